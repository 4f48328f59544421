"""`commbench run --confirm K`: the points that look worse, measured again K times before the
verdict.

Two runs cannot tell a regression from a point that ran once in a slow mode (on a loaded
machine a whole point now and then runs 2-60x slower: a rank waiting for a core), because
both look the same in one run: a median far from the baseline's, its own iterations steady.
A regression persists; a one-off does not. So each point the gate marks worse is measured
again K times (a run of just those ops and sizes, `confirmation_settings`), each judged
against the same reference as the first; the point stays worse when it is worse in every one
of them (`persists`), and is reported as a one-off otherwise: a warning, with what the
confirmations said. Every one, not most: measured on links of known truth
(benchmarks/gate_power.py, docs/ci.md), "most of 3" still failed 4 of 50 repeats on the
loaded 2-core VM where the baseline itself had been a fast run, "all 3" none, while a 2x
drop failed 44 of 50 pairs (48 with "most").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from commbench.compare import Comparison, Mark, PointKey

MAX_CONFIRM = 10
"""The most confirmations a point gets: past a few, a history answers better (docs/ci.md)."""


def persists(worse: int, confirmations: int) -> bool:
    """Whether a drop seen once persists: worse in every confirmation."""
    return confirmations > 0 and worse == confirmations


def worse_keys(comparison: Comparison) -> list[PointKey]:
    """The points a comparison marked worse: what a confirmation measures again."""
    return [p.key for p in comparison.marked(Mark.worse)]


def confirmation_settings(settings: Any, keys: Sequence[PointKey]) -> Any:
    """The settings of a run of one entry (`CollectivesSettings`) narrowed to the ops,
    strategies and sizes of `keys`: the union of them, so a few points more than asked may
    be measured (one run, not one per point). The key's size is the one measured (S after
    rounding), which the op plans to itself again."""
    ops = sorted({k[0] for k in keys if not k[1]})
    strategies = sorted({k[1] for k in keys if k[1]})
    sizes = sorted({k[5] for k in keys})
    changes: dict[str, Any] = {"sizes": sizes}
    if settings.ops:
        changes["ops"] = [op for op in settings.ops if op in ops]
    if settings.strategies:
        changes["strategies"] = [s for s in settings.strategies if s in strategies]
    return replace(settings, **changes)


def confirm(comparison: Comparison, confirmations: Sequence[Comparison]) -> Comparison:
    """`comparison` with each worse point judged again by `confirmations` (the same points,
    measured again and judged against the same reference): it stays worse when the drop
    `persists` (worse in every one), and becomes a one-off (noisy) otherwise. Each confirmed point says what the
    confirmations found (`PointResult.confirmed`)."""
    if not confirmations:
        return comparison
    k = len(confirmations)
    marks = [{p.key: p for p in c.points} for c in confirmations]
    points = []
    for p in comparison.points:
        if p.mark is Mark.worse:
            again = [m.get(p.key) for m in marks]
            worse = sum(1 for q in again if q is not None and q.mark in (Mark.worse, Mark.missing))
            ratios = ", ".join(f"{q.ratio:.2f}x" for q in again if q is not None and q.ratio)
            said = f"{worse} of {k} confirmations worse" + (f" ({ratios})" if ratios else "")
            if persists(worse, k):
                p = replace(p, confirmed=said, reason=f"{p.reason}; persists: {said}")
            else:
                p = replace(
                    p, mark=Mark.noisy, confirmed=said, reason=f"{p.reason}; a one-off: {said}"
                )
        points.append(p)
    one_offs = sum(1 for p in points if p.confirmed and p.mark is Mark.noisy)
    notes = [*comparison.notes]
    if one_offs:
        notes.append(
            f"{one_offs} point(s) worse once were not worse again in all {k} "
            "confirmations: one-offs (a warning), not regressions"
        )
    return replace(comparison, points=points, notes=notes)
