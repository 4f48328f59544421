"""The one way a run comes to be: every producer (collectives, p2p, the nccl-tests import,
suites) creates its directory, writes its record saying "running" (stamped with who writes
it), and ends it complete, failed or interrupted through here.

    life = start_run(out, RunKind.P2P, settings=..., context=...)
    with life.guarded():            # Ctrl-C: interrupted; an exception: failed; re-raised
        ... measure, life.dir.write_rows(rows), life.save() ...
    life.finish(RunStatus.COMPLETE)

A record saying "running" names its writer (`ProcessId`): a writer killed outright (SIGKILL,
OOM), or one that can no longer write (full disk), leaves it so; readers then check that
writer (`RunRecord.recognised`). On its host, once no process of the run is left, a reader
takes the run as ended, its points recovered from the journal, in memory (`recover`): reading
never writes, so a read-only copy reads the same. Writing that into the run is a deliberate
act (`settle`): `commbench settle`, or a command that writes into the run's directory anyway
(`settle_written`).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from commbench.errors import UserError
from commbench.files import shown
from commbench.health.record import HealthSnapshot, RunHealth
from commbench.processes import RUN_MARKER, ProcessId, alive, environ
from commbench.results.journal import JournalReader, RowEvent
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus, SuiteRecord
from commbench.results.schema import ResultRow
from commbench.results.store import (
    EVENTS_FILE,
    RESULTS_CSV,
    RESULTS_JSON,
    RUN_FILE,
    RunDir,
    SuiteDir,
    suite_entries,
    temp_name,
)

R = TypeVar("R", RunRecord, SuiteRecord)
D = TypeVar("D", RunDir, SuiteDir)

INTERRUPTED = "interrupted"
"""The failure of a run stopped by Ctrl-C or a termination signal."""


def now() -> str:
    """A record's timestamps: local time with its offset."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Life(Generic[D, R]):
    """A run (or suite) being produced: its directory and its record, written on `save()`."""

    def __init__(self, directory: D, record: R, write: Callable[[R], None]) -> None:
        self.dir: D = directory
        self.record: R = record
        self._write: Callable[[R], None] = write

    @property
    def path(self) -> Path:
        return self.dir.path

    def save(self) -> None:
        self._write(self.record)

    def finish(self, status: RunStatus, failure: str | None = None) -> None:
        """Write the record's final status (and why, when it did not complete); a run whose
        health was snapshot before gets its `after` snapshot here, whatever its status."""
        if isinstance(self.record, RunRecord):
            health = self.record.context.health
            if health is not None and health.after is None:
                health.after = _take_health()
        self.record.status = status
        self.record.failure = failure
        self.record.finished_at = self.record.finished_at or now()
        self.save()

    @contextlib.contextmanager
    def guarded(self) -> Iterator[None]:
        """Ctrl-C (or SIGTERM turned into it) inside the block ends the run interrupted, any
        other exception failed naming it; the record is written and the exception goes on."""
        try:
            yield
        except KeyboardInterrupt:
            self.finish(RunStatus.INTERRUPTED, INTERRUPTED)
            raise
        except Exception as exc:
            self.finish(RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            raise


def start_run(
    parent: Path,
    kind: RunKind,
    *,
    settings: dict[str, Any],
    context: RunContext,
    status: RunStatus = RunStatus.RUNNING,
    name: str | None = None,
    health: bool = False,
    **fields: Any,
) -> Life[RunDir, RunRecord]:
    """Create `parent/<timestamp>-<name>` (the kind, unless a suite names its entry) and write
    its record (running, unless an import says otherwise); `fields` are more of `RunRecord`'s.

    `health`: snapshot this node's link health counters now and again at `finish()` (runs that
    measure this machine: collectives, p2p, diagnose; not an import of someone else's)."""
    if health:
        context.health = RunHealth(before=_take_health())
    directory = RunDir.create(parent, name or kind.value)
    record = RunRecord(
        kind=kind,
        run_id=directory.name,
        status=status,
        settings=settings,
        context=context,
        launcher=ProcessId.of(),
        **fields,
    )
    life = Life(directory, record, directory.write_record)
    life.save()
    return life


def _take_health() -> HealthSnapshot:
    # imported here: pynvml is loaded only by the runs that snapshot health
    from commbench.health.capture import take

    return take()


def start_suite(parent: Path, record: SuiteRecord) -> Life[SuiteDir, SuiteRecord]:
    """Create `parent/<timestamp>-suite-<name>` and write `record` saying running."""
    directory = SuiteDir.create(parent, record.name)
    record.status = RunStatus.RUNNING
    record.launcher = ProcessId.of()
    record.started_at = record.started_at or now()
    life = Life(directory, record, directory.write_record)
    life.save()
    return life


def _csv_rows(directory: RunDir) -> int:
    """Data rows of results.csv (0 when it cannot be read): a reader that trusts the JSON
    needs only to know whether the CSV lags behind it."""
    try:
        with open(directory.results_csv, newline="", encoding="utf-8", errors="replace") as fh:
            return max(0, sum(1 for row in csv.reader(fh) if row) - 1)
    except (OSError, csv.Error):
        return 0


@dataclass(frozen=True, slots=True)
class Recovery:
    """A run whose launcher died outright (SIGKILL, the OOM killer), as it ended: its record
    still says "running", and the rows rank 0 journaled after the launcher's last rewrite of
    the results (its workers measure on until they notice, within a heartbeat) are only in
    events.jsonl. A reader takes it so (`recover`: `record`, `rows`); `settle` writes it."""

    ended: RunRecord
    """Interrupted, "its launcher (pid N) is gone", its points counted; no word yet of who
    ended it (`record`, `written`)."""
    rows: list[ResultRow]
    """Every point the run measured: the journal's where it holds more than results.json,
    else results.json's."""
    taken: int
    """Points of `rows` that only events.jsonl holds."""
    files_behind: bool
    """results.json or results.csv lacks a point of `rows` (a launcher killed between its
    rewrite of the one and of the other leaves the CSV a row behind): `settle` rewrites
    both."""
    launcher: ProcessId
    """The launcher that died."""

    @property
    def record(self) -> RunRecord:
        """The record as a reader takes it, with a warning saying how it was read; run.json
        still says "running" (`recorded_status`)."""
        return self._noted("read as interrupted", "; `commbench settle` writes that into the run")

    def written(self, by: str) -> RunRecord:
        """The record `settle` writes: `by` (the command, e.g. "commbench settle") ended it."""
        noted = self._noted(f"{by} (pid {ProcessId.of().pid}) ended it on {now()}")
        return replace(noted, recorded_status=None)

    def _noted(self, how: str, then: str = "") -> RunRecord:
        taken = f", with {self.taken} point(s) taken from {EVENTS_FILE}" if self.taken else ""
        note = (
            f"its launcher (pid {self.launcher.pid}) died before it finished this record; "
            f"{how}{taken}{then}"
        )
        return replace(self.ended, warnings=[*self.ended.warnings, note])


def recover(directory: RunDir, run_json: RunRecord | None = None) -> Recovery | None:
    """The run in `directory` as it ended, where its launcher died outright: it acts only
    where the launcher is known to be gone (this host: `ProcessId.running()` is False) and no
    process of the run is left that could still journal. Every reader takes a run through
    this (`results.runs.load_run`), and it writes nothing. None when there is nothing to
    recover (`settle` says why). `run_json`: its run.json (`RunDir.stored_record`), where the
    caller has read it already."""
    found = _recovery(directory, run_json)
    return found if isinstance(found, Recovery) else None


def _recovery(directory: RunDir, run_json: RunRecord | None = None) -> Recovery | str:
    """The run's recovery, or why there is none; UserError for a run.json that cannot be
    read (as `RunDir.read_record` says it)."""
    record = directory.stored_record() if run_json is None else run_json
    if record.status is not RunStatus.RUNNING:
        return f"it is {record.status}"
    launcher = record.launcher
    if launcher is None:
        return "it says running and names no launcher: whether it still runs cannot be told"
    running = launcher.running()
    if running:
        return f"its launcher (pid {launcher.pid}) still runs"
    if running is None:
        return (
            f"its launcher (pid {launcher.pid}) ran on host {launcher.host}: only there can "
            "it be told whether it still runs"
        )
    if _run_processes_left(directory):
        return "a worker of the run still runs: it may journal another point"
    try:
        stored: list[ResultRow] = directory.read_rows(kind=record.kind.value)
    except UserError:
        stored = []  # a reader that takes results.json says what is wrong with it
    journaled = _journaled_rows(directory)
    rows = journaled if len(journaled) > len(stored) else stored
    taken = len(rows) - len(stored) if rows is journaled else 0
    ended = record.recognised()  # interrupted: "its launcher (pid N) is gone"
    if ended.points_done is not None or taken > 0:
        ended = replace(ended, points_done=len(rows))
    return Recovery(
        ended=ended,
        rows=rows,
        taken=taken,
        files_behind=taken > 0 or _csv_rows(directory) < len(rows),
        launcher=launcher,
    )


def settle(directory: RunDir, by: str = "commbench settle") -> Recovery | str:
    """Write the run's recovery (`recover`) into it: the result files from the journal when
    they lack a point of it, then run.json saying interrupted and why, with its points and a
    warning naming `by`, the command that ended it; then the temporary files the launcher
    was writing are removed. Returns what was written, or why nothing was ("it is
    complete"). UserError, naming the file, when it cannot be read or written (another
    user's run, a read-only copy): what was written before stays, and every reader still
    takes the run as recovered."""
    found = _recovery(directory)
    if isinstance(found, str):
        return found
    if found.files_behind:  # the rows first: an ended run.json vouches for them
        directory.write_rows(found.rows)
    directory.write_record(found.written(by))
    for name in (RUN_FILE, RESULTS_JSON, RESULTS_CSV):  # what the launcher was writing
        with contextlib.suppress(OSError):
            temp_name(directory.path / name, found.launcher.pid).unlink(missing_ok=True)
    return found


@dataclass(frozen=True, slots=True)
class Settled:
    """What `commbench settle` did to one run: what it wrote, or why it wrote nothing."""

    path: Path
    recovery: Recovery | None
    """What was written; None when nothing was (`left`)."""
    left: str | None = None
    """Why the run was left as it is, e.g. "it is complete"."""

    def __str__(self) -> str:
        where = shown(self.path)
        if self.recovery is None:
            return f"{where}: left as it is: {self.left}"
        done = [f"run.json says {self.recovery.ended.status} ({self.recovery.ended.failure})"]
        if self.recovery.taken:
            done.append(
                f"{self.recovery.taken} point(s) from {EVENTS_FILE} written into "
                f"{RESULTS_JSON} and {RESULTS_CSV}"
            )
        elif self.recovery.files_behind:
            done.append(f"{RESULTS_CSV} rewritten: it lacked a point of {RESULTS_JSON}")
        return f"{where}: settled: " + "; ".join(done)


def settle_paths(paths: Iterable[Path]) -> list[Settled]:
    """`commbench settle`'s work: each run directory of `paths` (a suite directory stands for
    its runs) settled in turn (`settle`). Every path is checked to be a run or a suite before
    anything is written; UserError when one is not, or when a run cannot be read or
    written."""
    runs: list[RunDir] = []
    for path in paths:
        if SuiteDir.holds(path):
            suite = SuiteDir(Path(path))
            runs += [suite.entry(e.path) for e in suite.read_record().entries if e.path]
        else:
            runs.append(RunDir.of(path))
    done = []
    for run in runs:
        found = settle(run)
        if isinstance(found, Recovery):
            done.append(Settled(run.path, found))
        else:
            done.append(Settled(run.path, None, found))
    return done


def settle_written(written: Iterable[Path], reads: Iterable[Path], by: str) -> list[Path]:
    """What a command that wrote files (`written`) after reading runs and suites (`reads`)
    does to a run it read whose launcher died: where a file of `written` lies in the run's
    directory, or in the directory of a suite of `reads` that holds the run, the command
    has written there anyway, and settles the run too (`settle`, naming `by`). Best effort:
    a run whose files it cannot write is left as it is (its readers recover it). Returns the
    directories of the runs settled."""
    outs = [Path(os.path.realpath(p)) for p in written]
    runs: dict[Path, list[Path]] = {}  # a run's directory: the directories it lies in
    for read in reads:
        real = Path(os.path.realpath(read))
        if real.name == RUN_FILE:
            real = real.parent
        entries = [Path(os.path.realpath(e)) for e in suite_entries(real)]
        for run in entries or [real]:
            runs.setdefault(run, []).extend([run, real] if entries else [run])
    settled = []
    for run, homes in runs.items():
        if not any(out.is_relative_to(home) for out in outs for home in homes):
            continue
        if not (run / RUN_FILE).is_file():
            continue
        with contextlib.suppress(UserError):
            if isinstance(settle(RunDir(run), by), Recovery):
                settled.append(run)
    return settled


def _run_processes_left(directory: RunDir) -> bool:
    """Whether a worker of the run still runs (it may journal one more row): a pid from its
    heartbeat that is alive and carries the run's marker (not a later process that reused
    the pid)."""
    marker = str(directory.path.resolve())
    for pid in _heartbeat_pids(directory.path):
        if alive(pid) and (environ(pid) or {}).get(RUN_MARKER) == marker:
            return True
    return False


def _heartbeat_pids(run_dir: Path) -> set[int]:
    """The pids the ranks' heartbeat files (`ranks/rank<N>.json`) name; a file torn or not
    a heartbeat names none. Read raw and bounded: only the pid matters here."""
    pids = set()
    for path in (run_dir / "ranks").glob("rank*.json"):
        with contextlib.suppress(OSError, ValueError, RecursionError):
            with open(path, "rb") as fh:
                beat = json.loads(fh.read(1 << 16))
            match beat:
                case {"pid": int(pid)} if not isinstance(pid, bool) and pid > 0:
                    pids.add(pid)
    return pids


def _journaled_rows(directory: RunDir) -> list[ResultRow]:
    """Every row in the run's journal, in order; [] when it has none. A row that does not
    validate ends the list: the result files never hold a point after a gap."""
    rows = []
    for event in JournalReader(directory.path / EVENTS_FILE).read(final=True):
        journaled = RowEvent.read(event)
        if journaled is None:
            continue
        try:
            rows.append(ResultRow.from_dict(journaled.row, f"{EVENTS_FILE}: row"))
        except UserError:
            break
    return rows
