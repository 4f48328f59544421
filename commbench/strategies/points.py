"""The strategies measured in a run, as typed records: grouped once, the model fitted once.

`commbench collectives --strategies` (`strategies.report`) and the report's strategies
section (`report.strategy_tables`) draw the same facts: per (dtype, reduce op, world size),
each strategy's time at each size, its ratio to direct, the fastest and whether it won
clearly, and what the alpha-beta model fitted to the same run's direct rows predicts. They
are computed here, in one pass, so that the two differ only in layout. No torch here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from commbench.collectives.specs import STRATEGIES
from commbench.errors import UserError
from commbench.results.schema import ResultRow
from commbench.strategies.model import Fit, Prediction, fit, main_factor, predict_one, winner

DISAGREE = 0.25
"""Measured vs model beyond this relative gap is flagged '!'."""

# What the ring-only model of NCCL leaves out, where it matters: a reader must not take a
# latency-bound "winner" over direct for what NCCL would do.
NCCL_CAVEAT = (
    "NCCL also has a tree algorithm (about 2 log2(n) steps) and low-latency protocols "
    "(LL, LL128), which it picks at small sizes and large n: there its all_reduce beats this "
    "ring-only model of direct, and a latency-bound win over direct (ring_naive's, say) "
    "is the model's, not NCCL's"
)


def legend(strategies: Sequence[str], backend: str) -> list[str]:
    """What the model counts for each strategy, and NCCL's caveat where direct is drawn."""
    lines = [f"{s}: {STRATEGIES[s].counts[backend]}" for s in strategies]
    if backend == "nccl" and "direct" in strategies:
        lines.append(f"note: {NCCL_CAVEAT}")
    return lines


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyPoint:
    """One strategy measured at one size, beside the direct reference and the model.

    The fields, in this order, are the columns of `--strategies`' csv and json output."""

    dtype: str
    reduce_op: str
    world_size: int
    size_bytes: int
    strategy: str
    time_us: float
    busbw_gbps: float | None
    vs_direct: float | None
    """The time over direct's (or over plain all_reduce's where direct was not run)."""
    fastest: bool
    """The fastest strategy measured at this size."""
    clear_win: bool
    """Fastest, and its interquartile range clear of the runner-up's."""
    cv: float
    check: str
    model_us: float | None
    """The fitted model's time; None when no model could be fitted."""
    measured_vs_model: float | None
    factor: str
    """The model's main factor behind the gap to direct; empty without a model."""

    def as_dict(self) -> dict[str, Any]:
        """The plain record csv and json write, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyGroup:
    """The strategies measured for one (dtype, reduce op, world size), and the model fitted
    to the same group's direct rows."""

    dtype: str
    reduce_op: str
    world_size: int
    rows: tuple[ResultRow, ...]
    """The group's all_reduce rows as measured, strategy or not, timed or not."""
    fitted: Fit | None
    why_not: str
    """Why no model was fitted (the fit's error), when `fitted` is None."""
    points: tuple[StrategyPoint, ...]
    """Per size in measured order, each strategy measured there, in `STRATEGIES` order."""

    @property
    def strategies(self) -> list[str]:
        """The strategies measured, in `STRATEGIES` order."""
        return [s for s in STRATEGIES if any(p.strategy == s for p in self.points)]

    @property
    def sizes(self) -> list[int]:
        return list(dict.fromkeys(p.size_bytes for p in self.points))

    def at(self, size: int) -> dict[str, StrategyPoint]:
        """The points at one size, by strategy."""
        return {p.strategy: p for p in self.points if p.size_bytes == size}

    def predicted_winner(self, size: int) -> Prediction:
        """The model's fastest of the measured strategies at one size (needs `fitted`)."""
        assert self.fitted is not None
        params = self.fitted.params
        predictions = [predict_one(s, self.world_size, size, params) for s in self.strategies]
        best = winner(predictions)
        return next(x for x in predictions if x.strategy == best)


def _clear_win(best: ResultRow, others: list[ResultRow]) -> bool:
    """False when the fastest's interquartile range overlaps the runner-up's."""
    if not others:
        return True
    runner = min(others, key=lambda r: r.time_us)
    return best.stats.q3 < runner.stats.q1


def _points(
    key: tuple[str, str, int], group: list[ResultRow], fitted: Fit | None
) -> Iterator[StrategyPoint]:
    dtype, reduce_op, n = key
    for size in sorted({r.size_bytes for r in group if r.strategy}):
        at = [r for r in group if r.size_bytes == size and not math.isnan(r.time_us)]
        by_name = {r.strategy: r for r in at if r.strategy}
        reference = by_name.get("direct") or next((r for r in at if not r.strategy), None)
        measured = [by_name[s] for s in STRATEGIES if s in by_name]
        fastest = min(measured, key=lambda r: r.time_us) if measured else None
        clear = fastest is not None and _clear_win(
            fastest, [r for r in measured if r is not fastest]
        )
        for r in measured:
            model_us = predict_one(r.strategy, n, size, fitted.params).time_us if fitted else None
            yield StrategyPoint(
                dtype=dtype,
                reduce_op=reduce_op,
                world_size=n,
                size_bytes=size,
                strategy=r.strategy,
                time_us=r.time_us,
                busbw_gbps=r.busbw_gbps,
                vs_direct=r.time_us / reference.time_us if reference else None,
                fastest=r is fastest,
                clear_win=r is fastest and clear,
                cv=r.stats.cv,
                check=r.check,
                model_us=model_us,
                measured_vs_model=r.time_us / model_us if model_us else None,
                factor=main_factor(r.strategy, n, size, fitted.params) if fitted else "",
            )


def strategy_groups(rows: Sequence[ResultRow], backend: str = "nccl") -> list[StrategyGroup]:
    """One group per (dtype, reduce op, world size) with a timed strategy row, in measured
    order; the model fitted once per group."""
    by_key: dict[tuple[str, str, int], list[ResultRow]] = {}
    for row in rows:
        if row.op == "all_reduce":
            by_key.setdefault((row.dtype, row.reduce_op, row.world_size), []).append(row)
    groups: list[StrategyGroup] = []
    for key, group in by_key.items():
        if not any(r.strategy for r in group):
            continue
        fitted: Fit | None = None
        why_not = ""
        try:
            fitted = fit(group, backend)
        except UserError as exc:
            why_not = str(exc)
        points = tuple(_points(key, group, fitted))
        if points:
            groups.append(
                StrategyGroup(
                    dtype=key[0],
                    reduce_op=key[1],
                    world_size=key[2],
                    rows=tuple(group),
                    fitted=fitted,
                    why_not=why_not,
                    points=points,
                )
            )
    return groups
