"""The one way a run comes to be: every producer (collectives, p2p, the nccl-tests import,
suites) creates its directory, writes its record saying "running" (stamped with who writes
it), and ends it complete, failed or interrupted through here.

    life = start_run(out, RunKind.P2P, settings=..., context=...)
    with life.guarded():            # Ctrl-C: interrupted; an exception: failed; re-raised
        ... measure, life.dir.write_rows(rows), life.save() ...
    life.finish(RunStatus.COMPLETE)

A record saying "running" names its writer (`ProcessId`): a writer killed outright (SIGKILL,
OOM), or one that can no longer write (full disk), leaves it so; readers then check that
writer (`RunRecord.recognised`), and the first reader on its host ends the run for it
(`settle`).
"""

from __future__ import annotations

import contextlib
import csv
import json
import time
from collections.abc import Callable, Iterator
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
    load_json,
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


def settle(directory: RunDir) -> RunRecord | None:
    """End, for it, a run whose launcher died outright (SIGKILL, the OOM killer): its record
    still says "running", and the rows rank 0 journaled after the launcher's last rewrite of
    the results (its workers measure on until they notice, within a heartbeat) are only in
    events.jsonl. Every reader calls this first (`results.runs.load_run`); it acts only where
    the launcher is known to be gone (this host: `ProcessId.running()` is False) and no
    process of the run is left that could still journal. The result files are rewritten from
    the journal, then run.json says interrupted and why, with its points. Returns the record
    written; None when there was nothing to settle or the directory cannot be written (the
    reader then takes the record as `recognised` says)."""
    try:
        record = RunRecord.from_dict(load_json(directory.run_file), shown(directory.run_file))
    except UserError:
        return None  # the reader says what is wrong with it
    if record.status is not RunStatus.RUNNING or record.launcher is None:
        return None
    if record.launcher.running() is not False or _run_processes_left(directory):
        return None
    try:
        rows = directory.read_rows(kind=record.kind.value)
    except UserError:
        rows = []
    journaled = _journaled_rows(directory)
    recovered = len(journaled) - len(rows)
    settled = record.recognised()  # interrupted: "its launcher (pid N) is gone"
    settled.recorded_status = None
    if settled.points_done is not None or recovered > 0:
        settled.points_done = max(len(rows), len(journaled))
    settled.warnings = [
        *settled.warnings,
        f"its launcher (pid {record.launcher.pid}) died before it finished this record; a "
        f"reader (pid {ProcessId.of().pid}) ended it on {now()}"
        + (f", with {recovered} point(s) taken from {EVENTS_FILE}" if recovered > 0 else ""),
    ]
    # the launcher writes results.json, then results.csv: killed between the two, the CSV
    # lags a row behind the JSON and the journal
    csv_behind = _csv_rows(directory) < len(journaled)
    try:
        if recovered > 0 or csv_behind:  # the rows first: an ended run.json vouches for them
            directory.write_rows(journaled)
        directory.write_record(settled)
    except UserError:
        return None  # not ours to write (another user's run, a read-only copy)
    for name in (RUN_FILE, RESULTS_JSON, RESULTS_CSV):  # what the launcher was writing
        with contextlib.suppress(OSError):
            temp_name(directory.path / name, record.launcher.pid).unlink(missing_ok=True)
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
