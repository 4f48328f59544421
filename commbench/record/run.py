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
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType

from commbench.errors import UserError, quoted
from commbench.files import path_kind, shown
from commbench.launch.pythonpath import PACKAGE_ROOT
from commbench.record.meta import RankMeta, read_metas
from commbench.traces.trace import RANK_FILE, Manifest, write_manifest

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


def default_directory(parent: Path) -> Path:
    return parent / f"trace-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def check_command(argv: Sequence[str]) -> list[str]:
    """The job's command, refused in one line when there is none or it cannot be found."""
    if not argv:
        raise UserError(
            "record needs the job's command after `--`: commbench record -- torchrun "
            "--nproc-per-node 2 train.py"
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


def record(argv: Sequence[str], directory: Path) -> Recorded:
    """Run `argv` with the capture in each of its Python processes, writing into the new or
    empty `directory`; returns when the job has ended."""
    command = check_command(argv)
    directory = prepare_directory(directory)
    started = time.time()
    write_manifest(directory, Manifest(argv=tuple(command), world_size=1, started=started))
    try:
        proc = subprocess.Popen(command, env=job_environment(directory))
    except OSError as exc:
        raise UserError(f"{quoted(command[0])}: cannot run it: {exc.strerror}") from None
    with _forwarding(proc):
        code = proc.wait()
    exit_code = 128 - code if code < 0 else code
    return finish(directory, command, started, exit_code)


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


def finish(directory: Path, argv: Sequence[str], started: float, exit_code: int) -> Recorded:
    """Write the manifest from what the ranks left, and say what the trace holds."""
    metas, problems = read_metas(directory)
    notes = list(problems)
    by_rank = {m.rank: m for m in metas}
    world = max((m.world_size for m in metas), default=1)
    ranks = tuple(
        sorted(r for r in range(world) if (directory / RANK_FILE.format(rank=r)).exists())
    )
    missing = [r for r in range(world) if r not in ranks]
    complete = exit_code == 0 and not missing and all(m.closed and not m.error for m in metas)
    if not metas:
        notes.append(
            "no process of the job made a torch.distributed call that commbench saw (a job "
            "without process groups, `python -S` or `-I`, or torch older than 2.5)"
        )
        complete = False
    if exit_code != 0:
        notes.append(f"the job exited with status {exit_code}: the trace is incomplete")
    elif missing and metas:
        notes.append(f"rank(s) {_listed(missing)} wrote no calls: the trace is incomplete")
    unclosed = [m.rank for m in metas if not m.closed]
    if unclosed and exit_code == 0:
        notes.append(f"rank(s) {_listed(unclosed)} did not close their file (killed?)")
    for m in metas:
        if m.error:
            notes.append(f"rank {m.rank}: the capture stopped early: {m.error}")
    first: RankMeta | None = by_rank.get(0) or (metas[0] if metas else None)
    manifest = Manifest(
        argv=tuple(argv),
        world_size=world,
        hosts=tuple(sorted({m.host for m in metas})),
        torch_version=first.torch_version if first else None,
        backends=tuple(sorted({b for m in metas for b in m.backends})),
        started=started,
        ended=time.time(),
        complete=complete,
        parameters=first.parameters if first else (),
    )
    write_manifest(directory, manifest)
    return Recorded(
        directory=directory,
        exit_code=exit_code,
        manifest=manifest,
        calls=sum(m.calls for m in metas),
        ranks=ranks,
        notes=tuple(notes),
    )


def _listed(ranks: Sequence[int]) -> str:
    shown_ranks = ", ".join(str(r) for r in ranks[:8])
    return shown_ranks + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
