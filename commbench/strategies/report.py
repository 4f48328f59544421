"""Strategy comparison tables: measured (next to the model) and predicted.

`render_comparison` is what `commbench collectives --strategies` prints after the usual
tables; `render_predictions` is `commbench model`. Both render through one cell builder
for table and md, and emit plain records for csv and json.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from commbench.collectives.specs import STRATEGIES
from commbench.errors import UserError
from commbench.escape import markdown_text
from commbench.results.exporters import Format, dicts_to_csv, format_time
from commbench.results.schema import ResultRow
from commbench.results.store import dump_json
from commbench.sizes import format_size
from commbench.strategies.model import (
    Fit,
    Params,
    Prediction,
    fit,
    main_factor,
    predict_one,
    winner,
)
from commbench.tables import fixed, markdown_table

DISAGREE = 0.25
"""Measured vs model beyond this relative gap is flagged '!'."""


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


def _render(
    title: str,
    headers: list[str],
    cells: list[list[str]],
    fmt: Format,
    left: Sequence[int] = (0,),
) -> list[str]:
    """A titled table; the columns numbered in `left` align left, the others right."""
    if fmt == Format.md:
        table = markdown_table(headers, cells, left=left)
        return [f"### {markdown_text(title, where='cell')}", "", *table, ""]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths))
        ).rstrip()

    return [f"# {title}", line(headers), *(line(c) for c in cells), ""]


def _records_out(records: list[dict[str, Any]], fmt: Format, extra: dict[str, Any]) -> str:
    if fmt == Format.json:
        return dump_json({**extra, "rows": records})
    return dicts_to_csv(records, list(records[0])) if records else ""


def _params_text(params: Params) -> str:
    text = f"{params.backend} algorithms, alpha {params.alpha_us:.2f} us/step, beta {params.bw_gbps:.3g} GB/s"
    if params.launch_us:
        text += f", {params.launch_us:.2f} us/launch"
    return text


# What the ring-only model of NCCL leaves out, where it matters: a reader must not take a
# latency-bound "winner" over direct for what NCCL would do.
NCCL_CAVEAT = (
    "NCCL also has a tree algorithm (about 2 log2(n) steps) and low-latency protocols "
    "(LL, LL128), which it picks at small sizes and large n: there its all_reduce beats this "
    "ring-only model of direct, and a latency-bound win over direct (ring_naive's, say) "
    "is the model's, not NCCL's"
)


def _legend(strategies: Sequence[str], backend: str, fmt: Format) -> list[str]:
    bullet = "  - " if fmt == Format.md else "  "
    lines = [f"{bullet}{s}: {STRATEGIES[s].counts[backend]}" for s in strategies]
    if backend == "nccl" and "direct" in strategies:
        lines.append(f"{bullet}note: {NCCL_CAVEAT}")
    return lines


# --- measured ----------------------------------------------------------------------------


def _fit_or_reason(rows: list[ResultRow], backend: str) -> tuple[Fit | None, str]:
    try:
        result = fit(rows, backend)
    except UserError as exc:
        return None, f"model not fitted: {exc}"
    return result, (
        f"model ({_params_text(result.params)}) fitted to {result.points} direct all_reduce "
        f"points at {len(result.sizes)} sizes, {result.quality}"
    )


def _clear_win(best: ResultRow, others: list[ResultRow]) -> bool:
    """False when the fastest's interquartile range overlaps the runner-up's."""
    if not others:
        return True
    runner = min(others, key=lambda r: r.time_us)
    return best.stats.q3 < runner.stats.q1


def comparison_records(rows: list[ResultRow], backend: str = "nccl") -> list[dict[str, Any]]:
    """One record per measured strategy point, with ratio, model and factor."""
    groups: dict[tuple[str, str, int], list[ResultRow]] = {}
    for row in rows:
        if row.op == "all_reduce":
            groups.setdefault((row.dtype, row.reduce_op, row.world_size), []).append(row)
    records: list[dict[str, Any]] = []
    for (dtype, reduce_op, n), group in groups.items():
        if not any(r.strategy for r in group):
            continue
        fitted, _ = _fit_or_reason(group, backend)
        sizes = sorted({r.size_bytes for r in group if r.strategy})
        for size in sizes:
            at = [r for r in group if r.size_bytes == size and not math.isnan(r.time_us)]
            by_name = {r.strategy: r for r in at if r.strategy}
            reference = by_name.get("direct") or next((r for r in at if not r.strategy), None)
            measured = [by_name[s] for s in STRATEGIES if s in by_name]
            fastest = min(measured, key=lambda r: r.time_us) if measured else None
            clear = fastest is not None and _clear_win(
                fastest, [r for r in measured if r is not fastest]
            )
            for r in measured:
                model_us = (
                    predict_one(r.strategy, n, size, fitted.params).time_us if fitted else None
                )
                records.append(
                    {
                        "dtype": dtype,
                        "reduce_op": reduce_op,
                        "world_size": n,
                        "size_bytes": size,
                        "strategy": r.strategy,
                        "time_us": r.time_us,
                        "busbw_gbps": r.busbw_gbps,
                        "vs_direct": r.time_us / reference.time_us if reference else None,
                        "fastest": r is fastest,
                        "clear_win": r is fastest and clear,
                        "cv": r.stats.cv,
                        "check": r.check,
                        "model_us": model_us,
                        "measured_vs_model": r.time_us / model_us if model_us else None,
                        "factor": main_factor(r.strategy, n, size, fitted.params) if fitted else "",
                    }
                )
    return records


def render_comparison(rows: list[ResultRow], fmt: Format, backend: str | None = None) -> str:
    """Per size: each strategy's time, busbw, ratio to direct (fastest marked), the model's
    prediction fitted to the same run's direct rows, and the main factor behind the gap."""
    backend = backend or "nccl"
    records = comparison_records(rows, backend)
    if fmt in (Format.json, Format.csv):
        return _records_out(records, Format(fmt), {"backend": backend})
    out: list[str] = []
    seen: set[tuple[str, str, int]] = set()
    for rec in records:
        key = (rec["dtype"], rec["reduce_op"], rec["world_size"])
        if key in seen:
            continue
        seen.add(key)
        mine = [r for r in records if (r["dtype"], r["reduce_op"], r["world_size"]) == key]
        group = [
            r for r in rows if r.op == "all_reduce" and (r.dtype, r.reduce_op, r.world_size) == key
        ]
        _, fit_text = _fit_or_reason(group, backend)
        cells: list[list[str]] = []
        last_size = None
        for r in mine:
            mark = ("*" if r["clear_win"] else "~") if r["fastest"] else ""
            ratio = r["measured_vs_model"]
            flag = "!" if ratio is not None and abs(ratio - 1) > DISAGREE else ""
            cells.append(
                [
                    format_size(r["size_bytes"]) if r["size_bytes"] != last_size else "",
                    r["strategy"] + (f" {mark}" if mark else ""),
                    _time(r["time_us"]),
                    _num(r["busbw_gbps"]),
                    f"{r['vs_direct']:.2f}x" if r["vs_direct"] is not None else "-",
                    _time(r["model_us"]),
                    f"{ratio:.2f}x{flag}" if ratio is not None else "-",
                    r["factor"] or "-",
                ]
            )
            last_size = r["size_bytes"]
        dtype, reduce_op, n = key
        title = f"all_reduce strategies  {dtype}  op={reduce_op}  {n} ranks"
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
        out += _render(title, headers, cells, Format(fmt), left=(0, 1, len(headers) - 1))
        bullet = "- " if fmt == Format.md else ""
        out += [
            f"{bullet}{fit_text}",
            f"{bullet}* fastest measured; ~ fastest but its IQR overlaps the runner-up's (no clear win); "
            f"! measured and model differ by more than {DISAGREE:.0%}",
            f"{bullet}what the model counts:",
            *_legend(
                [s for s in STRATEGIES if any(r["strategy"] == s for r in mine)],
                backend,
                Format(fmt),
            ),
            "",
        ]
    return "\n".join(out).rstrip() + "\n" if out else ""


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


def render_predictions(
    predictions: list[Prediction], params: Params, fmt: Format, fitted: Fit | None = None
) -> str:
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
    if fmt in (Format.json, Format.csv):
        return _records_out(records, Format(fmt), {"params": asdict(params), "fit": fit_info})
    strategies = list(dict.fromkeys(p.strategy for p in predictions))
    out: list[str] = []
    bullet = "- " if fmt == Format.md else ""
    measured = _measured_range(fitted) if fitted else None
    if fitted:
        verb = "checked against" if len(fitted.fixed) == 2 else "fitted to"
        pooled = (
            f" ({', '.join(fitted.dtypes)} pooled: the model is in bytes)"
            if len(fitted.dtypes) > 1
            else ""
        )
        out += [
            f"{bullet}{verb} {fitted.points} direct all_reduce points{pooled} measured at "
            f"{measured}, {fitted.quality}",
            "",
        ]
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
        out += _render(title, headers, cells, Format(fmt), left=(0, len(headers) - 1))
    if extrapolated:
        out += [
            f"{bullet}^ extrapolated: beyond what was measured ({measured}); the model's "
            "straight line may not hold there (other algorithms, protocols, congestion)",
            "",
        ]
    out += [
        f"{bullet}what the model counts ({params.backend}):",
        *_legend(strategies, params.backend, Format(fmt)),
    ]
    return "\n".join(out).rstrip() + "\n"
