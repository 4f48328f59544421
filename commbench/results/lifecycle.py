"""The one way a run comes to be: every producer (collectives, p2p, the nccl-tests import,
suites) creates its directory, writes its record saying "running" (stamped with who writes
it), and ends it complete, failed or interrupted through here.

    life = start_run(out, RunKind.P2P, settings=..., context=...)
    with life.guarded():            # Ctrl-C: interrupted; an exception: failed; re-raised
        ... measure, life.dir.write_rows(rows), life.save() ...
    life.finish(RunStatus.COMPLETE)

A record saying "running" names its writer (`ProcessId`): a writer killed outright (SIGKILL,
OOM), or one that can no longer write (full disk), leaves it so; readers then check that
writer (`RunRecord.recognised`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from commbench.health.record import HealthSnapshot, RunHealth
from commbench.processes import ProcessId
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus, SuiteRecord
from commbench.results.store import RunDir, SuiteDir

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
