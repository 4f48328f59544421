"""What a finished run means to whoever ran it, decided once.

A run's record says how it ended (`RunStatus`): complete, failed, interrupted. Whoever ran it
needs one more answer: did it pass? A run that measured every point but got a wrong result
at one of them did not, and a run wound up as Ctrl-C arrived is whole but means "stop". The
`collectives` and `p2p` commands, a suite's entries and the Python API all take that answer
from `judge`, so they cannot disagree on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from commbench.errors import CommbenchError, Interrupted, RunFailed
from commbench.results.record import RunStatus
from commbench.results.schema import CHECK_FAILED, ResultRow
from commbench.sizes import format_size

SHOWN_POINTS = 5
"""Wrong points named in the message (the rest are counted)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    status: RunStatus
    """COMPLETE only for a run that ended and whose every checked result was right; FAILED
    for a failed run or a wrong result; otherwise the record's status (INTERRUPTED, RUNNING)."""
    message: str | None = None
    """Why it did not pass, in the one line the CLI prints; None when it passed."""
    stopped: bool = False
    """Ctrl-C or SIGTERM came while the run was wound up: its record is whole (and may have
    passed), but whoever runs more after it should stop."""

    @property
    def passed(self) -> bool:
        return self.status is RunStatus.COMPLETE

    def error(self) -> CommbenchError | None:
        """The error the CLI exits with (exit 1; 130 or 143 as the stop signal was Ctrl-C or
        SIGTERM); None for a run that passed and was not asked to stop."""
        if self.status is RunStatus.INTERRUPTED or (self.stopped and self.passed):
            return Interrupted(self.message or "interrupted")
        if not self.passed:
            return RunFailed(self.message or str(self.status), stop_requested=self.stopped)
        return None


def wrong_points(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """The rows whose result check failed (a p2p step's `total` row repeats its copies')."""
    return [r for r in rows if r.check == CHECK_FAILED and not (r.p2p and r.p2p.copy == "total")]


def judge(
    status: RunStatus,
    rows: Sequence[ResultRow],
    where: Path,
    *,
    failure: str | None = None,
    stop_requested: bool = False,
) -> Verdict:
    """The verdict on a run that ended as `status` (its record's), having measured `rows`
    into the directory `where`; `failure`: the record's account of a failed run."""
    if status is RunStatus.INTERRUPTED:
        return Verdict(
            status, f"interrupted; the {len(rows)} points measured are in {where}", stop_requested
        )
    if status is not RunStatus.COMPLETE:
        return Verdict(status, failure or str(status), stop_requested)
    wrong = wrong_points(rows)
    if wrong:
        shown = ", ".join(
            f"{r.strategy or r.op} {format_size(r.size_bytes)}" for r in wrong[:SHOWN_POINTS]
        )
        return Verdict(
            RunStatus.FAILED, f"wrong result at {len(wrong)} point(s): {shown}", stop_requested
        )
    if stop_requested:
        return Verdict(
            status, f"interrupted; every point was measured and is in {where}", stopped=True
        )
    return Verdict(status)
