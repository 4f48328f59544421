"""The reference a gate judges a run against: each of the run's points in the comparable runs
of the history (`History.reference`).

Comparable: the same series, so the same machine identity (`identity.Machine`). Of a series'
runs the reference takes those that started no later than the run (the history before it;
all of them for a run without a start time), never the run itself (were it added already),
and of those only the runs after the series' last change point among them: a level the series
has left says nothing of the one it is at. Then at most `limit`, the most recent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commbench.history.db import Database
from commbench.history.identity import machine_of, run_digest, run_time, series_digest
from commbench.results.runs import Run
from commbench.results.schema import RowKey

PointKey = RowKey
"""A point's key across runs (`ResultRow.key`)."""


@dataclass
class Reference:
    """The history a gate judges a run against (`History.reference`)."""

    run_ids: list[str]
    """The comparable history runs used, oldest first (never the run itself)."""
    medians_us: dict[PointKey, list[float]]
    """For each point key of the run, its median time (µs) in each of those runs, aligned
    with `run_ids`, NaN where absent."""


def reference(db: Database, run: Run, *, limit: int = 20) -> Reference:
    """`run`'s reference in the history `db` (the module's docstring says which runs)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    machine = machine_of(run)
    itself = db.one("SELECT id FROM runs WHERE digest = ?", (run_digest(run),))
    own = None if itself is None else int(itself[0])
    until = run_time(run)
    per_key: dict[PointKey, dict[int, float]] = {}
    used: dict[int, tuple[str, str]] = {}
    for key in dict.fromkeys(row.key for row in run.rows):
        per_key[key] = {}
        found = db.one("SELECT id FROM series WHERE digest = ?", (series_digest(machine, key),))
        if found is None:
            continue
        series = int(found[0])
        points = [
            (int(pk), at, run_id, median)
            for pk, at, run_id, median in db.rows(
                "SELECT p.run, p.at, r.run_id, p.median_us FROM points p "
                "JOIN runs r ON r.id = p.run WHERE p.series = ? ORDER BY p.at, p.run",
                (series,),
            )
            if int(pk) != own and (until is None or at <= until)
        ]
        starts = {int(r) for (r,) in db.rows("SELECT run FROM changes WHERE series = ?", (series,))}
        last = max((i for i, p in enumerate(points) if p[0] in starts), default=0)
        for pk, at, run_id, median in points[last:][-limit:]:
            per_key[key][pk] = float(median)
            used[pk] = (at, run_id)
    order = sorted(used, key=lambda pk: (used[pk][0], pk))
    return Reference(
        run_ids=[used[pk][1] for pk in order],
        medians_us={
            key: [medians.get(pk, math.nan) for pk in order] for key, medians in per_key.items()
        },
    )
