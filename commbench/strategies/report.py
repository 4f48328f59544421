"""Strategy comparison tables: measured (next to the model) and predicted.

`render_comparison` is what `commbench collectives --strategies` prints after the usual
tables; `render_predictions` is `commbench model`. Each builds one document (the tables and
notes for people, plain records for csv and json) that every format's writer writes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from commbench.collectives.specs import STRATEGIES
from commbench.results.exporters import Format, format_time, write
from commbench.results.schema import ResultRow
from commbench.sizes import format_size
from commbench.strategies.model import Fit, Params, Prediction, winner
from commbench.strategies.points import DISAGREE, StrategyGroup, legend, strategy_groups
from commbench.tables import Block, Document, Notes, TitledTable, fixed


def _num(value: float | None, digits: int = 2) -> str:
    """Two decimals; none from 1000 up (the digits are noise); never 0.00 for a small value,
    never an exponent (`tables.fixed`)."""
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return fixed(value, digits)


def _time(us: float | None) -> str:
    """A time in the unit a person reads (`218.00 us`, `4.00 ms`): one column, one form."""
    return "-" if us is None else format_time(us)


def _records(records: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    """For tools: the records as CSV, and as JSON under what they were computed with."""
    return {
        "records": records,
        "columns": list(records[0]) if records else [],
        "data": {**extra, "rows": records},
    }


def _params_text(params: Params) -> str:
    text = f"{params.backend} algorithms, alpha {params.alpha_us:.2f} us/step, beta {params.bw_gbps:.3g} GB/s"
    if params.launch_us:
        text += f", {params.launch_us:.2f} us/launch"
    return text


def _legend(strategies: Sequence[str], backend: str) -> Notes:
    return Notes(legend(strategies, backend), indent=1, ours=True, gap=True)


# --- measured ----------------------------------------------------------------------------


def _fit_text(group: StrategyGroup) -> str:
    fitted = group.fitted
    if fitted is None:
        return f"model not fitted: {group.why_not}"
    return (
        f"model ({_params_text(fitted.params)}) fitted to {fitted.points} direct all_reduce "
        f"points at {len(fitted.sizes)} sizes, {fitted.quality}"
    )


def comparison_records(rows: list[ResultRow], backend: str = "nccl") -> list[dict[str, Any]]:
    """One record per measured strategy point, with ratio, model and factor."""
    return [p.as_dict() for group in strategy_groups(rows, backend) for p in group.points]


def comparison_document(rows: list[ResultRow], backend: str | None = None) -> Document:
    """Per size: each strategy's time, busbw, ratio to direct (fastest marked), the model's
    prediction fitted to the same run's direct rows, and the main factor behind the gap."""
    backend = backend or "nccl"
    groups = strategy_groups(rows, backend)
    blocks: list[Block] = []
    for group in groups:
        cells: list[list[str]] = []
        last_size = None
        for r in group.points:
            mark = ("*" if r.clear_win else "~") if r.fastest else ""
            ratio = r.measured_vs_model
            flag = "!" if ratio is not None and abs(ratio - 1) > DISAGREE else ""
            cells.append(
                [
                    format_size(r.size_bytes) if r.size_bytes != last_size else "",
                    r.strategy + (f" {mark}" if mark else ""),
                    _time(r.time_us),
                    _num(r.busbw_gbps),
                    f"{r.vs_direct:.2f}x" if r.vs_direct is not None else "-",
                    _time(r.model_us),
                    f"{ratio:.2f}x{flag}" if ratio is not None else "-",
                    r.factor or "-",
                ]
            )
            last_size = r.size_bytes
        title = (
            f"all_reduce strategies  {group.dtype}  op={group.reduce_op}  {group.world_size} ranks"
        )
        headers = [
            "size",
            "strategy",
            "time",
            "busbw_GB/s",
            "vs_direct",
            "model",
            "meas/model",
            "main factor (model)",
        ]
        blocks += [
            TitledTable(title, headers, cells, left=(0, 1, len(headers) - 1)),
            Notes(
                [
                    _fit_text(group),
                    "* fastest measured; ~ fastest but its IQR overlaps the runner-up's (no "
                    f"clear win); ! measured and model differ by more than {DISAGREE:.0%}",
                    "what the model counts:",
                ],
                ours=True,
            ),
            _legend(group.strategies, backend),
        ]
    records = [p.as_dict() for group in groups for p in group.points]
    # after the usual tables: nothing at all where no strategy was measured
    return Document(blocks, **_records(records, {"backend": backend}), empty="")


def render_comparison(rows: list[ResultRow], fmt: Format, backend: str | None = None) -> str:
    return write(comparison_document(rows, backend), fmt)


# --- predicted ---------------------------------------------------------------------------


def _by_point(predictions: list[Prediction]) -> dict[tuple[int, int], dict[str, Prediction]]:
    """The predictions grouped by (world size, size), each point's by strategy, in order: one
    pass, so that a long --world or --sizes list costs linear time."""
    points: dict[tuple[int, int], dict[str, Prediction]] = {}
    for p in predictions:
        points.setdefault((p.world_size, p.size_bytes), {})[p.strategy] = p
    return points


def prediction_records(predictions: list[Prediction]) -> list[dict[str, Any]]:
    best = {key: winner(at.values()) for key, at in _by_point(predictions).items()}
    return [
        {
            "world_size": p.world_size,
            "size_bytes": p.size_bytes,
            "strategy": p.strategy,
            "time_us": p.time_us,
            "busbw_gbps": p.busbw_gbps,
            "latency_us": p.latency_us,
            "bandwidth_us": p.bandwidth_us,
            "steps": p.cost.steps,
            "bytes_per_rank": p.cost.bytes_factor * p.size_bytes,
            "launches": p.cost.launches,
            "winner": best[(p.world_size, p.size_bytes)] == p.strategy,
        }
        for p in predictions
    ]


def _measured_range(fitted: Fit) -> str:
    """`2 ranks, sizes 1K-1M`: where the fit's points were measured."""
    worlds = ",".join(map(str, fitted.world_sizes))
    ranks = f"{worlds} rank{'s' if fitted.world_sizes != [1] else ''}"
    if not fitted.sizes:
        return ranks
    low, high = format_size(min(fitted.sizes)), format_size(max(fitted.sizes))
    return f"{ranks}, sizes {low}" + (f"-{high}" if high != low else "")


def _beyond(fitted: Fit, world_size: int, size: int) -> bool:
    """A prediction outside the measured world sizes and size range: an extrapolation."""
    if fitted.world_sizes and not min(fitted.world_sizes) <= world_size <= max(fitted.world_sizes):
        return True
    return bool(fitted.sizes) and not min(fitted.sizes) <= size <= max(fitted.sizes)


def predictions_document(
    predictions: list[Prediction], params: Params, fitted: Fit | None = None
) -> Document:
    """`commbench model`: per world size, each strategy's time and busbw per size, and the winner."""
    records = prediction_records(predictions)
    fit_info = (
        {
            "points": fitted.points,
            "sizes": fitted.sizes,
            "world_sizes": fitted.world_sizes,
            "worst_error": fitted.worst_error,
        }
        if fitted
        else None
    )
    strategies = list(dict.fromkeys(p.strategy for p in predictions))
    blocks: list[Block] = []
    measured = _measured_range(fitted) if fitted else None
    if fitted:
        verb = "checked against" if len(fitted.fixed) == 2 else "fitted to"
        pooled = (
            f" ({', '.join(fitted.dtypes)} pooled: the model is in bytes)"
            if len(fitted.dtypes) > 1
            else ""
        )
        blocks.append(
            Notes(
                [
                    f"{verb} {fitted.points} direct all_reduce points{pooled} measured at "
                    f"{measured}, {fitted.quality}"
                ],
                ours=True,
                gap=True,
            )
        )
    extrapolated = False
    points = _by_point(predictions)
    by_world: dict[int, list[int]] = {}
    for n, size in points:
        by_world.setdefault(n, []).append(size)
    for n, world_sizes in by_world.items():
        cells = []
        for size in world_sizes:
            at = points[(n, size)]
            beyond = fitted is not None and _beyond(fitted, n, size)
            extrapolated = extrapolated or beyond
            cells.append(
                [
                    format_size(size) + (" ^" if beyond else ""),
                    *(
                        f"{format_time(at[s].time_us)} ({_num(at[s].busbw_gbps)})"
                        for s in strategies
                    ),
                    winner(at.values()),
                ]
            )
        headers = ["size", *(STRATEGIES[s].header for s in strategies), "winner"]
        title = f"model  {n} ranks  {_params_text(params)}  cells: time (busbw GB/s)"
        blocks.append(TitledTable(title, headers, cells, left=(0, len(headers) - 1)))
    if extrapolated:
        blocks.append(
            Notes(
                [
                    f"^ extrapolated: beyond what was measured ({measured}); the model's "
                    "straight line may not hold there (other algorithms, protocols, congestion)"
                ],
                ours=True,
                gap=True,
            )
        )
    blocks += [
        Notes([f"what the model counts ({params.backend}):"], ours=True),
        _legend(strategies, params.backend),
    ]
    extra = {"params": asdict(params), "fit": fit_info}
    return Document(blocks, **_records(records, extra))


def render_predictions(
    predictions: list[Prediction], params: Params, fmt: Format, fitted: Fit | None = None
) -> str:
    return write(predictions_document(predictions, params, fitted), fmt)
