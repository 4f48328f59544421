"""Stored runs as their readers (report, compare, plot, model, suites, the Python API) take
them: any run kind, or a suite, loaded from its directory. Loading writes nothing, so a
read-only copy (another user's, an archive) reads as the original does.

    run = load_run("results/20240611-090000-collectives")
    run.kind, run.status, run.context.world_size, run.rows, run.to_frame()
    run.rows[0].ranks, run.stragglers()   # each rank's own times; whom the others waited for
    suite = load_suite("results/suites/20240611-090000-suite-ci")
    {entry.name: suite.run(entry) for entry in suite.entries}
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.errors import UserError
from commbench.files import shown
from commbench.health.findings import Finding, run_findings
from commbench.results.lifecycle import recover
from commbench.results.record import Entry, RunContext, RunKind, RunRecord, RunStatus, SuiteRecord
from commbench.results.schema import ResultRow
from commbench.results.store import RunDir, SuiteDir, rows_to_csv
from commbench.results.stragglers import RankWaits, WaitedFor, summarise, waited_for
from commbench.results.verdict import Verdict, judge

if TYPE_CHECKING:
    import pandas


@dataclass(slots=True)
class Run:
    """A stored run of any kind: its directory, its record and its rows."""

    path: Path
    record: RunRecord
    rows: list[ResultRow]
    stopped: bool = False
    """Ctrl-C or SIGTERM reached the process that ran it as the run was wound up: the record
    is whole, but whoever runs more after it should stop (`Verdict.stopped`; never stored)."""
    plots: str | None = None
    """What plotting it after the run did, in a line; None when it was not plotted."""

    @property
    def kind(self) -> RunKind:
        return self.record.kind

    @property
    def status(self) -> RunStatus:
        """Whether the run passed: COMPLETE, or FAILED (the run failed, or a result was
        wrong), INTERRUPTED, RUNNING (`verdict`). The record's own status, which a wrong
        result does not change, is `record.status`."""
        return self.verdict.status

    @property
    def verdict(self) -> Verdict:
        """What the run means to whoever ran it, and why it did not pass
        (`results.verdict.judge`; a record that does not say how it ended is complete)."""
        return judge(
            self.record.status or RunStatus.COMPLETE,
            self.rows,
            self.path,
            failure=self.record.failure,
            stop_requested=self.stopped,
        )

    @property
    def context(self) -> RunContext:
        return self.record.context

    @property
    def unfinished(self) -> str | None:
        """How the run did not finish (`RunRecord.unfinished`); None when it did."""
        return self.record.unfinished

    def held_here(self) -> Run:
        """This run, where its directory holds its rows; UserError, in one line saying where
        they are, for a node of a multi-node run that did not run global rank 0 (its
        run.json names the host and directory that hold them). For the commands that read a
        run's rows (report, compare, plot): nothing to show is not a result."""
        if self.record.holds_results is False and not self.rows:
            where = self.record.note or "this node did not run global rank 0, whose node holds them"
            raise UserError(f"{shown(self.path)}: holds no rows: {where}")
        return self

    def health_findings(self) -> list[Finding]:
        """Links below their maximum and error counters that moved during the run
        (`health.findings` on `context.health`); empty for a record without health."""
        return run_findings(self.context.health)

    def stragglers(self) -> list[WaitedFor]:
        """Every point at which the others waited a meaningful time for one rank, with its
        host (`results.stragglers`); empty for a run without per-rank times."""
        return waited_for(self.rows, self.context.ranks)

    def straggler_summary(self) -> list[RankWaits | WaitedFor]:
        """The same findings folded: a rank waited for at most points once, then the other
        points, most telling first (`results.stragglers.summarise`)."""
        return summarise(self.rows, self.context.ranks)

    def to_frame(self) -> pandas.DataFrame:
        """The rows as a pandas DataFrame with results.csv's columns."""
        import pandas

        return pandas.read_csv(io.StringIO(rows_to_csv(self.rows)))


@dataclass(slots=True)
class Suite:
    """A stored suite: its directory, its record, a run per entry that made one."""

    path: Path
    record: SuiteRecord

    @property
    def status(self) -> RunStatus:
        return self.record.status

    @property
    def entries(self) -> list[Entry]:
        return self.record.entries

    def run(self, entry: Entry) -> Run | None:
        """The run an entry made; None for one that made none (skipped, failed early)."""
        return load_run(self.path / entry.path) if entry.path else None

    def runs(self) -> dict[str, Run]:
        """Every run of the suite, by entry name."""
        return {e.name: load_run(self.path / e.path) for e in self.entries if e.path}


def load_run(path: Path) -> Run:
    """A run directory of any kind (or its run.json). Raises UserError naming what is wrong.
    Writes nothing: a run whose launcher was killed outright is taken as it ended, its points
    recovered from its journal, in memory (`lifecycle.recover`; `commbench settle` writes
    that into it)."""
    run_dir = RunDir.of(path)
    stored = run_dir.stored_record()  # read once, for both (reading it was a fifth of a load)
    recovery = recover(run_dir, stored)
    record = run_dir.read_record(stored) if recovery is None else recovery.record
    # what a version-1 p2p row, which did not store it, gets as its world size
    world = record.context.device_count or len(record.context.device_names) or 1
    if recovery is not None and recovery.taken:
        rows = recovery.rows
    else:
        rows = run_dir.read_rows(kind=record.kind.value, world_size=world)
    _ranks_in_world(rows, record.context.world_size, run_dir)
    return Run(path=run_dir.path, record=record, rows=rows)


def _ranks_in_world(rows: list[ResultRow], world: int | None, run_dir: RunDir) -> None:
    """Each rank a row times is a rank of the run (run.json's world size): the one check of
    results.json that needs run.json."""
    if world is None:
        return
    for i, row in enumerate(rows):
        if row.ranks is not None and row.ranks.ranks and max(row.ranks.ranks) >= world:
            raise UserError(
                f"{shown(run_dir.results_json)}: rows[{i}].ranks.ranks: {max(row.ranks.ranks)} "
                f"is outside 0..{world - 1} (the run's world size is {world})"
            )


def stored_at(target: str | os.PathLike[str] | Run | Suite) -> Path:
    """Where a run or suite is stored: a path as given, or a loaded one's directory. Every
    verb that takes a run takes either."""
    return target.path if isinstance(target, Run | Suite) else Path(target)


def is_suite(path: Path) -> bool:
    """Whether `path` is a suite directory (a FIFO or a name the OS refuses: UserError)."""
    return SuiteDir.holds(path)


def load_suite(path: Path) -> Suite:
    path = Path(path)
    if not is_suite(path):
        raise UserError(f"{shown(path)}: not a suite directory (no suite.json in it)")
    return Suite(path=path, record=SuiteDir(path).read_record())


def load(path: Path) -> Run | Suite:
    """Whatever commbench stored at `path`: a run of any kind, or a suite."""
    return load_suite(path) if is_suite(path) else load_run(path)
