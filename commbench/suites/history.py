"""What a gate and a suite ask of a runs history (`commbench.history`): `compare --history`, `run --history
[--gate]`. The history is opened for each question and closed again, so a suite that runs for
an hour holds no connection to a team's database while it measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from commbench.compare import HISTORY_RUNS, HistoryMedians
from commbench.history.identity import environment, label_of
from commbench.history.store import History
from commbench.results.runs import Run
from commbench.suites.gate import ReferenceFn


def check(db: str, *, must_exist: bool = False) -> None:
    """Refuse, before anything is measured, a history that cannot be read: a URL that does
    not answer, a corrupt file, a schema newer than this commbench (UserError, one line). A
    SQLite file that is not there yet is made when the first runs are added, unless it
    `must_exist` (a gate reads it, nothing adds to it)."""
    if must_exist or Path(db).exists() or "://" in db:
        with History.open(db, write=False):
            pass


def reference_in(db: str, limit: int = HISTORY_RUNS) -> ReferenceFn:
    """The function a gate asks for a run's reference in `db`: each of its points' medians
    in the comparable runs since the point's series last changed (at most `limit`), and
    those runs' ids. A history not made yet has none."""

    def of(run: Run) -> tuple[HistoryMedians, Sequence[str]]:
        if "://" not in db and not Path(db).exists():
            return {}, []
        with History.open(db) as store:
            found = store.reference(run, limit=limit)
        return found.medians_us, found.run_ids

    return of


def add(db: str, path: Path, label: str | None) -> str:
    """Add every run at `path` (a suite's entries, or one run) to `db`, labelled `label` (or
    the CI's commit, `label_of`); a line saying what was added."""
    from commbench.history.request import runs_at

    runs = runs_at(path)  # what `history add` takes: complete, passed, measured
    labelled = [(run, *label_of(label, environment(), run.context)) for run in runs]
    with History.open(db, write=True) as store:
        added = store.add(labelled)
    new = sum(1 for r in added.runs if r.added)
    changes = len(added.changes)
    return (
        f"{new} run(s) added to {db}"
        + (f", {len(runs) - new} there already" if new < len(runs) else "")
        + (f"; {changes} change point(s) found" if changes else "")
    )
