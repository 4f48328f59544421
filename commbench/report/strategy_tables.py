"""The strategies section of a report, as plain tables: who won at each size and by how much,
and what the cost model fitted to the same run predicts, with the reason for its winner.

The numbers are the records `commbench collectives --strategies` prints
(`strategies.points.strategy_groups`: grouped once, the model fitted once); this module only
lays them out one size per line, the strategies side by side, which is how a reader
compares them. Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from commbench.collectives.specs import STRATEGIES
from commbench.results.exporters import format_time
from commbench.results.schema import ResultRow
from commbench.sizes import format_size
from commbench.strategies.model import main_factor
from commbench.strategies.points import (
    DISAGREE,
    StrategyGroup,
    StrategyPoint,
    legend,
    strategy_groups,
)


@dataclass(kw_only=True, slots=True)
class StrategyTables:
    """The tables drawn for one `strategies.points.StrategyGroup`."""

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


def _time(point: StrategyPoint) -> str:
    ratio = point.vs_direct
    return format_time(point.time_us) + (f" ({ratio:.2f}x)" if ratio is not None else "")


def strategy_tables(rows: list[ResultRow], backend: str) -> list[StrategyTables]:
    """One group per (dtype, reduce op, world size) that has strategy rows, in measured order."""
    tables = []
    for group in strategy_groups(rows, backend):
        names = group.strategies
        measured_best: dict[int, str] = {}
        cells = []
        for size in group.sizes:
            at = group.at(size)
            ranked = sorted(at.values(), key=lambda r: r.time_us)
            best = next((r for r in ranked if r.fastest), ranked[0])
            measured_best[size] = best.strategy
            margin = "-"
            if len(ranked) > 1:
                runner = ranked[1]
                margin = f"{runner.time_us / best.time_us:.2f}x vs {runner.strategy}"
            mark = "*" if best.clear_win else "~"
            cells.append(
                [
                    format_size(size),
                    *(_time(at[s]) if s in at else "-" for s in names),
                    f"{best.strategy} {mark}",
                    margin,
                ]
            )
        table = StrategyTables(
            title=f"all_reduce {group.dtype} op={group.reduce_op} {group.world_size} ranks",
            headers=["size", *(STRATEGIES[s].header for s in names), "fastest", "margin"],
            cells=cells,
            marks=(
                "Cells: median time (ratio to direct). * fastest with its interquartile range "
                "clear of the runner-up's; ~ fastest, but the ranges overlap (no clear win). "
                "Margin: the runner-up's time over the fastest's."
            ),
            model_text="",
        )
        _add_model(table, group, backend, measured_best)
        tables.append(table)
    return tables


def _add_model(
    table: StrategyTables, group: StrategyGroup, backend: str, measured_best: dict[int, str]
) -> None:
    fitted = group.fitted
    if fitted is None:
        table.model_text = f"No cost model: {group.why_not}."
        return
    p = fitted.params
    table.model_text = (
        f"Cost model t = steps x alpha + bytes / beta ({p.backend} algorithms), fitted to this "
        f"run's {fitted.points} direct all_reduce points at {len(fitted.sizes)} sizes: "
        f"alpha {p.alpha_us:.2f} us per step, beta {p.bw_gbps:.3g} GB/s; {fitted.quality}. "
        f"The same fit as commbench model --from RUN. Measured and model differ by more "
        f"than {DISAGREE:.0%} where marked !."
    )
    table.model_headers = ["size", "model's winner", "predicted", "measured", "why (model)"]
    for size in group.sizes:
        predicted = group.predicted_winner(size)
        best = predicted.strategy
        measured = [r for r in group.rows if r.strategy == best and r.size_bytes == size]
        time_us = measured[0].time_us if measured else math.nan
        flag = (
            " !"
            if math.isfinite(time_us) and abs(time_us / predicted.time_us - 1) > DISAGREE
            else ""
        )
        agree = "same" if measured_best.get(size) == best else f"{measured_best.get(size)} won"
        table.model_cells.append(
            [
                format_size(size),
                best,
                format_time(predicted.time_us),
                format_time(time_us) + flag + f" ({agree})",
                main_factor(best, group.world_size, size, p),
            ]
        )
    table.legend = legend(group.strategies, backend)
