"""Run a job under `commbench record`: unchanged, with the capture injected, and its trace
directory completed when it ends.

The job is started as it would be from the shell: same standard streams (its output passes
through untouched; commbench's own lines go to stderr), same process group (a Ctrl-C at the
terminal reaches it directly, as it would without commbench), same environment plus
COMMBENCH_RECORD_DIR, COMMBENCH_PACKAGE_ROOT and a PYTHONPATH that starts with the directory
holding the capture's `sitecustomize.py` (`job_environment`). A SIGTERM, SIGHUP or SIGQUIT sent
to commbench is passed to the job, and so is a SIGINT that the terminal did not already
deliver to it; commbench then waits for the job, whose exit status becomes its own (a job
killed by signal N gives 128 + N, as a shell says).

When the job has ended, the manifest is written from the ranks' meta files: the world size,
the hosts, the backends, the optimizer's parameters, and `complete` only when the job exited
0 and every rank closed its file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType

from commbench.errors import UserError, quoted
from commbench.files import path_kind, shown
from commbench.launch.pythonpath import PACKAGE_ROOT
from commbench.record.meta import META_FILE, RankMeta, Stepped, read_metas
from commbench.results.store import new_directory
from commbench.traces.names import MAX_WORLD
from commbench.traces.reader import held_calls
from commbench.traces.records import (
    MAX_ARGV,
    MAX_BACKENDS,
    MAX_HOSTS,
    MAX_MANIFEST_BYTES,
    MAX_NOT_CAPTURED,
    MAX_PARAMETERS,
    RANK_FILE,
    Manifest,
)
from commbench.traces.writer import write_manifest

DIR_ENV = "COMMBENCH_RECORD_DIR"  # the capture's, without importing torch to read it
ROOT_ENV = "COMMBENCH_PACKAGE_ROOT"
"""The directory holding the recorder's `commbench` package, which the capture loads."""
INJECT_DIR = Path(__file__).resolve().parent / "inject"
"""The directory of the capture's `sitecustomize.py`."""
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """What `commbench record` did: the trace written and the job's exit status."""

    directory: Path
    exit_code: int
    manifest: Manifest
    calls: int
    """Calls written, all ranks together."""
    ranks: tuple[int, ...]
    """Ranks that wrote a file."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """What the user should know: an incomplete trace and why, a capture that stopped."""
    lost: str | None = None
    """Why the trace could not be finished, when the job broke its directory (removed it,
    replaced it, made its manifest a directory, took its permissions): the one line to say."""


DEFAULT_PARENT = Path("results")
"""Where a trace goes when no directory is given: a new `trace-<time>` in it."""


def new_default_directory(parent: Path = DEFAULT_PARENT) -> Path:
    """A new `parent/trace-<time>[-N]`, made here (mkdir, which fails on one that exists),
    so that two records started in the same second get a directory each: a name chosen
    first and made later let the second refuse the first's directory as not empty, or both
    write into one when each found it still empty."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        made = new_directory(parent, f"trace-{stamp}")
    except OSError as exc:
        where = Path(exc.filename) if exc.filename else parent
        raise UserError(f"{shown(where)}: cannot create it: {exc.strerror}") from None
    if made is None:
        raise UserError(f"{shown(parent)}: no new trace-{stamp} directory could be made in it")
    return made.resolve()


def check_command(argv: Sequence[str]) -> list[str]:
    """The job's command, refused in one line when there is none or it cannot be found."""
    if not argv:
        raise UserError(
            "record needs the job's command after `--`: commbench record -- torchrun "
            "--nproc-per-node 2 train.py"
        )
    if len(argv) > MAX_ARGV:
        raise UserError(
            f"the job's command has {len(argv)} words: a trace records at most {MAX_ARGV}"
        )
    program = argv[0]
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise UserError(f"{quoted(program)}: no such executable file")
    elif shutil.which(program) is None:
        raise UserError(f"{quoted(program)}: command not found")
    return list(argv)


def prepare_directory(directory: Path) -> Path:
    kind = path_kind(directory, "trace directory")
    if kind == "dir":
        if any(directory.iterdir()):
            raise UserError(
                f"{shown(directory)}: not empty: a trace goes into a new or empty directory"
            )
    elif kind != "missing":
        raise UserError(f"{shown(directory)}: exists and is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{shown(directory)}: cannot create it: {exc.strerror}") from None
    return directory.resolve()


def job_environment(directory: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The job's environment: its own, plus the capture's directory first on PYTHONPATH
    (it holds nothing but `sitecustomize.py`, so it shadows nothing) and where the capture
    writes and where this commbench lives. commbench's own package root is not put on the
    path (installed, it is site-packages, whose every package would then come before the
    job's own PYTHONPATH): the capture loads commbench from it by location."""
    env = dict(os.environ) if environ is None else dict(environ)
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([str(INJECT_DIR), rest]) if rest else str(INJECT_DIR)
    env[DIR_ENV] = str(directory)
    env[ROOT_ENV] = str(PACKAGE_ROOT)
    return env


def record(argv: Sequence[str], directory: Path | None = None) -> Recorded:
    """Run `argv` with the capture in each of its Python processes, writing into the new or
    empty `directory` (None: a new one, `new_default_directory`); returns when the job has
    ended."""
    command = check_command(argv)
    directory = new_default_directory() if directory is None else prepare_directory(directory)
    made = os.stat(directory)
    started = time.time()
    write_manifest(directory, Manifest(argv=tuple(command), world_size=1, started=started))
    try:
        proc = subprocess.Popen(command, env=job_environment(directory))
    except OSError as exc:
        raise UserError(f"{quoted(command[0])}: cannot run it: {exc.strerror}") from None
    with _forwarding(proc):
        code = proc.wait()
    exit_code = 128 - code if code < 0 else code
    return finish(directory, command, started, exit_code, made=(made.st_dev, made.st_ino))


@contextlib.contextmanager
def _forwarding(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the job runs, pass the stop signals commbench gets on to it."""

    def forward(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and _terminal_delivered():
            return  # the terminal sent it to the job's process group, ours, already
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (*FORWARDED, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _terminal_delivered() -> bool:
    """True when this process is in its terminal's foreground group: a Ctrl-C there went to
    the job as well (it shares the group)."""
    for stream in (sys.stdin, sys.stderr, sys.stdout):
        with contextlib.suppress(Exception):
            return os.tcgetpgrp(stream.fileno()) == os.getpgrp()
    return False


def finish(
    directory: Path,
    argv: Sequence[str],
    started: float,
    exit_code: int,
    *,
    made: tuple[int, int] | None = None,
) -> Recorded:
    """Write the manifest from what the ranks left, and say what the trace holds.

    The work is linear in the files the directory holds, whatever world size a meta file
    claims (one pass lists it; ranks are counted, not enumerated). A job that broke its own
    trace directory (removed it, put a file in its place, made `manifest.json` a directory,
    took away the permissions) gets `lost`: one line saying what is left, never a
    traceback; its exit status is still the job's. `made`: the directory's (st_dev, st_ino)
    when it was made, to tell it from another put in its place."""
    ended = time.time()
    lost = _gone(directory, made)
    if lost is None:
        try:
            left = _Left.read(directory)
        except (OSError, UserError) as exc:
            lost = _unfinished(directory, exc)
    if lost is not None:
        bare = Manifest(argv=tuple(argv), world_size=1, started=started, ended=ended)
        return Recorded(directory=directory, exit_code=exit_code, manifest=bare, calls=0,
                        ranks=(), lost=lost)  # fmt: skip
    manifest, notes = left.manifest(argv, started, ended, exit_code)
    calls = left.calls(directory)
    ranks = tuple(sorted(r for r in left.present if r < manifest.world_size))
    try:
        manifest = write_manifest(directory, manifest)
    except UserError as exc:
        return Recorded(directory=directory, exit_code=exit_code, manifest=manifest,
                        calls=calls, ranks=ranks, lost=_unfinished(directory, exc))  # fmt: skip
    if manifest.parameters_left_out:
        notes.append(
            f"the trace does not list the job's {manifest.parameters_left_out} parameters "
            f"(a trace lists at most {MAX_PARAMETERS}, in a manifest of at most "
            f"{MAX_MANIFEST_BYTES >> 20} MiB): replay --rebucket cannot advise on it"
        )
    return Recorded(directory=directory, exit_code=exit_code, manifest=manifest, calls=calls,
                    ranks=ranks, notes=tuple(notes))  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Left:
    """What the job's processes left in the trace directory."""

    present: set[int]
    """Ranks with a calls file (a regular one, as a reader opens it)."""
    metas: list[RankMeta]
    problems: list[str]
    """A line for each meta file (or parameter list) that could not be read."""
    stepped: Stepped

    @classmethod
    def read(cls, directory: Path) -> _Left:
        """One pass over the directory, then the meta files it holds, each bounded."""
        present, meta_paths = _listing(directory)
        metas, problems = read_metas(meta_paths)
        try:
            stepped = Stepped.read(directory) or Stepped(())
        except UserError as exc:
            problems.append(str(exc))
            stepped = Stepped(())
        return cls(present, metas, problems, stepped)

    def calls(self, directory: Path) -> int:
        """The calls the rank files hold, all ranks together: a closed rank's own count (its
        file is whole), the lines of any other's. A rank killed outright (SIGKILL, the OOM
        killer) left a count up to a second old, 0 when it died within its first second,
        while its file holds every call of the steps it closed."""
        closed = {m.rank: m.calls for m in self.metas if m.closed}
        total = 0
        for rank in self.present:
            if rank in closed:
                total += closed[rank]
                continue
            with contextlib.suppress(OSError, UserError):  # replaced as we read: not counted
                total += held_calls(directory / RANK_FILE.format(rank=rank))
        return total

    def manifest(
        self, argv: Sequence[str], started: float, ended: float, exit_code: int
    ) -> tuple[Manifest, list[str]]:
        """The manifest to write, and what to say of the trace."""
        metas = self.metas
        world, disagreement = _world(metas)
        complete, notes = self._completeness(world, disagreement, exit_code)
        notes += _closing_notes(metas, exit_code)
        first = next((m for m in metas if m.rank == 0), metas[0] if metas else None)
        hosts = sorted({m.host for m in metas})
        backends = sorted({b for m in metas for b in m.backends})
        if len(hosts) > MAX_HOSTS or len(backends) > MAX_BACKENDS:  # what its reader takes
            notes.append(
                f"the ranks name {len(hosts)} hosts and {len(backends)} backends: the manifest "
                f"lists the first {MAX_HOSTS} and {MAX_BACKENDS}"
            )
        not_captured, graph_captured, uncaptured = _uncaptured(metas)
        notes += uncaptured
        manifest = Manifest(
            not_captured=tuple(sorted(not_captured.items()))[:MAX_NOT_CAPTURED],
            graph_captured=graph_captured,
            argv=tuple(argv),
            world_size=world,
            hosts=tuple(hosts[:MAX_HOSTS]),
            torch_version=first.torch_version if first else None,
            backends=tuple(backends[:MAX_BACKENDS]),
            started=started,
            ended=ended,
            complete=complete,
            parameters=self.stepped.parameters,
            parameters_left_out=self.stepped.left_out,
        )
        return manifest, notes

    def _completeness(
        self, world: int, disagreement: str | None, exit_code: int
    ) -> tuple[bool, list[str]]:
        """Whether the trace holds every call of the job, and the lines that say why not:
        meta files that could not be read, ranks that left calls and no word, no rank at all,
        ranks that disagree on the world, then how the job ended. Apart from `manifest`
        because `complete` and these lines must answer the same question the same way."""
        metas = self.metas
        notes = _problems(self.problems)
        missing, missing_count = _missing(self.present, world)
        told = {m.rank for m in metas}
        # a rank past the world that left calls and no word is as silent as one inside it
        silent = sorted(r for r in self.present if r not in told)
        # every rank's program ran to its end and closed its file, and the job still exited
        # non-zero: it failed in its teardown (an abort at exit, in torch's), or said so
        # itself; the trace holds every call
        failed_at_exit = (
            exit_code != 0 and bool(metas) and all(m.closed and m.ended == "exit" for m in metas)
        )
        complete = (
            (exit_code == 0 or failed_at_exit)
            and bool(metas)
            and not missing_count
            and not silent
            and not self.problems
            and disagreement is None
            and all(m.closed and not m.error for m in metas)
        )
        if silent and metas:
            notes.append(
                f"rank(s) {_listed(silent)} left no meta file that could be read: whether they "
                "closed their file is not known, the trace is incomplete"
            )
        if not metas:
            notes.append(
                "no process of the job made a torch.distributed call that commbench saw (a job "
                "without process groups, `python -S` or `-I`, or torch older than 2.5)"
            )
        if disagreement is not None:
            notes.append(disagreement)
        if failed_at_exit:
            notes.append(
                f"the job exited with status {exit_code} after every rank's program had run "
                f"to its end and closed its file: it failed at exit (an abort in its teardown, "
                f"or its own exit status); the trace holds all {sum(m.calls for m in metas)} calls"
            )
        elif exit_code != 0:
            notes.append(f"the job exited with status {exit_code}: the trace is incomplete")
        elif missing_count and metas:
            notes.append(
                f"rank(s) {_listed(missing, missing_count)} of {world} wrote no calls: the "
                "trace is incomplete"
            )
        return complete, notes


def _closing_notes(metas: Sequence[RankMeta], exit_code: int) -> list[str]:
    """What the ranks said of their own ending: files left open although the job exited 0
    (killed?), and captures that stopped early (the first rank's error, and how many more).
    Apart from the completeness lines: these name ranks, whatever the trace's verdict."""
    notes: list[str] = []
    unclosed = [m.rank for m in metas if not m.closed]
    if unclosed and exit_code == 0:
        notes.append(f"rank(s) {_listed(unclosed)} did not close their file (killed?)")
    stopped = [m for m in metas if m.error]
    if stopped:
        also = f" (and {len(stopped) - 1} more ranks)" if len(stopped) > 1 else ""
        notes.append(f"rank {stopped[0].rank}: the capture stopped early: {stopped[0].error}{also}")
    return notes


def _uncaptured(metas: Sequence[RankMeta]) -> tuple[Counter[str], int, list[str]]:
    """The calls the trace does not hold as made, all ranks together: each op the capture
    could not see (symmetric memory) with its count, the calls made while capturing CUDA
    graphs, and a line for each, since a replay of the trace differs from the job there."""
    not_captured: Counter[str] = Counter()
    for m in metas:
        not_captured.update(dict(m.not_captured))
    graph_captured = sum(m.graph_captured for m in metas)
    notes = [
        f"not captured: {n} call(s) of {op} (symmetric memory is not a c10d op: "
        "these calls are not in the trace and are not replayed)"
        for op, n in sorted(not_captured.items())
    ]
    if graph_captured:
        notes.append(
            f"{graph_captured} call(s) were made while capturing CUDA graphs: each is in "
            "the trace once, marked `graph`; the graphs' replays never reach the "
            "dispatcher and are not recorded"
        )
    return not_captured, graph_captured, notes


def _gone(directory: Path, made: tuple[int, int] | None) -> str | None:
    """What is wrong with the trace directory itself, when the job removed it or put
    something else in its place (another directory too): then there is no trace to finish."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return f"{shown(directory)} is gone (removed while the job ran): no trace is left"
    except OSError as exc:
        return _unfinished(directory, exc)
    if not stat.S_ISDIR(info.st_mode):
        return (
            f"{shown(directory)} is no longer a directory (replaced while the job ran): no "
            "trace is left"
        )
    if made is not None and (info.st_dev, info.st_ino) != made:
        return (
            f"{shown(directory)} is another directory than the one the trace was written "
            "into (replaced while the job ran): no trace is left"
        )
    return None


def _unfinished(directory: Path, exc: OSError | UserError) -> str:
    """The line for a trace directory that can no longer be read or written (its permissions
    taken, `manifest.json` made a directory). Only `finish` marks a trace complete (the
    capture writes the manifest it started with, complete=false), so what is left is marked
    incomplete wherever a manifest is left at all."""
    if isinstance(exc, OSError):
        reason = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc.strerror or exc)
    else:
        reason = str(exc)
    return (
        f"cannot finish the trace in {shown(directory)} ({reason}): it stays as the job left "
        "it, marked incomplete if its manifest is left"
    )


_RANK_NAME = re.compile(
    "|".join(
        re.escape(template).replace(re.escape("{rank}"), "(0|[1-9][0-9]*)")
        for template in (RANK_FILE, META_FILE)
    )
)


def _listing(directory: Path) -> tuple[set[int], list[Path]]:
    """One pass over the directory: the ranks that left a calls file (a regular one, as a
    reader opens it) and the rank meta files, whatever else it holds."""
    present: set[int] = set()
    metas: list[Path] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            match = _RANK_NAME.fullmatch(entry.name)
            if match is None:
                continue
            if match[1] is not None:
                if int(match[1]) < MAX_WORLD and entry.is_file():
                    present.add(int(match[1]))
            else:
                metas.append(Path(entry.path))
    return present, metas


def _world(metas: Sequence[RankMeta]) -> tuple[int, str | None]:
    """The world size the ranks claim (the largest), and a line when they disagree: a world
    that no file supports is marked, never enumerated."""
    claims: dict[int, list[int]] = {}
    for m in metas:
        claims.setdefault(m.world_size, []).append(m.rank)
    world = max(claims, default=1)
    if len(claims) <= 1:
        return world, None
    said = ", ".join(
        f"{size} by rank(s) {_listed(ranks)}" for size, ranks in sorted(claims.items())[:4]
    )
    more = f" and {len(claims) - 4} more sizes" if len(claims) > 4 else ""
    return world, f"the ranks disagree on the world size ({said}{more}): the trace is incomplete"


def _missing(present: set[int], world: int, shown_ranks: int = 8) -> tuple[list[int], int]:
    """The first `shown_ranks` ranks below `world` without a file, and how many there are:
    found in time linear in `present`, not in the world a meta file claims."""
    count = world - sum(1 for r in present if r < world)
    first: list[int] = []
    rank = 0
    while len(first) < min(count, shown_ranks):
        if rank not in present:
            first.append(rank)
        rank += 1
    return first, count


def _problems(problems: Sequence[str]) -> list[str]:
    """The meta files that could not be read, in one line however many they are."""
    if len(problems) <= 1:
        return list(problems)
    return [f"{problems[0]} (and {len(problems) - 1} more rank meta files that could not be read)"]


def _listed(ranks: Sequence[int], count: int | None = None) -> str:
    """`0, 1, 2 and 5 more`: at most 8 ranks named, of `count` (default: all of `ranks`)."""
    total = len(ranks) if count is None else count
    shown_ranks = ", ".join(str(r) for r in ranks[:8])
    return shown_ranks + (f" and {total - min(len(ranks), 8)} more" if total > 8 else "")
