"""The strategies section of a report, as plain tables: who won at each size and by how much,
and what the cost model fitted to the same run predicts, with the reason for its winner.

The numbers come from the code `commbench collectives --strategies` and `commbench model`
print with (`strategies.report.comparison_records`, `strategies.model.fit`, `predict_one`,
`winner`, `main_factor`); this module only lays them out one size per line, the strategies
side by side, which is how a reader compares them. Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from commbench.collectives.specs import STRATEGIES
from commbench.errors import UserError
from commbench.results.exporters import format_time
from commbench.results.schema import ResultRow
from commbench.sizes import format_size
from commbench.strategies.model import fit, main_factor, predict_one, winner
from commbench.strategies.report import DISAGREE, NCCL_CAVEAT, comparison_records


@dataclass(kw_only=True, slots=True)
class StrategyGroup:
    """The strategies measured for one (dtype, reduce op, world size)."""

    title: str
    headers: list[str]
    cells: list[list[str]]
    """Per size: each strategy's median time and its ratio to direct, the fastest, its margin."""
    marks: str
    """What the marks in `cells` mean."""
    model_text: str
    """The fit in words, or why there is none."""
    model_headers: list[str] = field(default_factory=list)
    model_cells: list[list[str]] = field(default_factory=list)
    """Per size: the model's winner, why (its main factor against direct), and whether the
    measured fastest is the same strategy."""
    legend: list[str] = field(default_factory=list)
    """What the model counts for each strategy."""


def _has_strategies(rows: list[ResultRow]) -> bool:
    return any(r.strategy for r in rows)


def _time(rec: dict[str, Any]) -> str:
    ratio = rec["vs_direct"]
    return format_time(rec["time_us"]) + (f" ({ratio:.2f}x)" if ratio is not None else "")


def strategy_groups(rows: list[ResultRow], backend: str) -> list[StrategyGroup]:
    """One group per (dtype, reduce op, world size) that has strategy rows, in measured order."""
    if not _has_strategies(rows):
        return []
    records = comparison_records(rows, backend)
    keys = list(dict.fromkeys((r["dtype"], r["reduce_op"], r["world_size"]) for r in records))
    groups = []
    for key in keys:
        dtype, reduce_op, n = key
        mine = [r for r in records if (r["dtype"], r["reduce_op"], r["world_size"]) == key]
        names = [s for s in STRATEGIES if any(r["strategy"] == s for r in mine)]
        sizes = list(dict.fromkeys(r["size_bytes"] for r in mine))
        measured_best: dict[int, str] = {}
        cells = []
        for size in sizes:
            at = {r["strategy"]: r for r in mine if r["size_bytes"] == size}
            ranked = sorted(at.values(), key=lambda r: r["time_us"])
            best = next((r for r in ranked if r["fastest"]), ranked[0])
            measured_best[size] = best["strategy"]
            margin = "-"
            if len(ranked) > 1:
                runner = ranked[1]
                margin = f"{runner['time_us'] / best['time_us']:.2f}x vs {runner['strategy']}"
            mark = "*" if best["clear_win"] else "~"
            cells.append(
                [
                    format_size(size),
                    *(_time(at[s]) if s in at else "-" for s in names),
                    f"{best['strategy']} {mark}",
                    margin,
                ]
            )
        group_rows = [
            r for r in rows if r.op == "all_reduce" and (r.dtype, r.reduce_op, r.world_size) == key
        ]
        group = StrategyGroup(
            title=f"all_reduce {dtype} op={reduce_op} {n} ranks",
            headers=["size", *(STRATEGIES[s].header for s in names), "fastest", "margin"],
            cells=cells,
            marks=(
                "Cells: median time (ratio to direct). * fastest with its interquartile range "
                "clear of the runner-up's; ~ fastest, but the ranges overlap (no clear win). "
                "Margin: the runner-up's time over the fastest's."
            ),
            model_text="",
        )
        _add_model(group, group_rows, names, sizes, n, backend, measured_best)
        groups.append(group)
    return groups


def _add_model(
    group: StrategyGroup,
    rows: list[ResultRow],
    names: list[str],
    sizes: list[int],
    n: int,
    backend: str,
    measured_best: dict[int, str],
) -> None:
    try:
        fitted = fit(rows, backend)
    except UserError as exc:
        group.model_text = f"No cost model: {exc}."
        return
    p = fitted.params
    group.model_text = (
        f"Cost model t = steps x alpha + bytes / beta ({p.backend} algorithms), fitted to this "
        f"run's {fitted.points} direct all_reduce points at {len(fitted.sizes)} sizes: "
        f"alpha {p.alpha_us:.2f} us per step, beta {p.bw_gbps:.3g} GB/s; {fitted.quality}. "
        f"The same fit as commbench model --from RUN. Measured and model differ by more "
        f"than {DISAGREE:.0%} where marked !."
    )
    group.model_headers = ["size", "model's winner", "predicted", "measured", "why (model)"]
    for size in sizes:
        predictions = [predict_one(s, n, size, p) for s in names]
        best = winner(predictions)
        predicted = next(x for x in predictions if x.strategy == best)
        measured = [r for r in rows if r.strategy == best and r.size_bytes == size]
        time_us = measured[0].time_us if measured else math.nan
        flag = (
            " !"
            if math.isfinite(time_us) and abs(time_us / predicted.time_us - 1) > DISAGREE
            else ""
        )
        agree = "same" if measured_best.get(size) == best else f"{measured_best.get(size)} won"
        group.model_cells.append(
            [
                format_size(size),
                best,
                format_time(predicted.time_us),
                format_time(time_us) + flag + f" ({agree})",
                main_factor(best, n, size, p),
            ]
        )
    group.legend = [f"{s}: {STRATEGIES[s].counts[backend]}" for s in names]
    if backend == "nccl" and "direct" in names:
        group.legend.append(f"note: {NCCL_CAVEAT}")
