"""What to draw, as plain data: figures, panels and series built from stored runs.

Nothing here imports matplotlib. `commbench.report.plots` draws these specs; tests check
the specs, which is exactly what matplotlib is handed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from commbench.results.record import RunContext, RunKind
from commbench.results.runs import Run
from commbench.results.schema import CHECK_FAILED, P2P_OP, ResultRow


@dataclass(kw_only=True, slots=True)
class Series:
    """One line: x = message sizes in bytes, y = the metric, in the same order."""

    label: str
    x: list[int]
    y: list[float]
    dashed: bool = False
    band: list[tuple[float, float]] | None = None
    """Per point, the interquartile range of the metric (q1..q3 of the samples): the noise a
    reader must see before reading a gap between two lines as a difference."""


@dataclass(kw_only=True, slots=True)
class Panel:
    title: str
    ylabel: str
    series: list[Series]
    ylog: bool = False


@dataclass(kw_only=True, slots=True)
class Heatmap:
    """A src x dst matrix (None where a pair was not measured)."""

    labels: list[str]
    values: list[list[float | None]]
    unit: str


@dataclass(kw_only=True, slots=True)
class Figure:
    name: str
    """File stem: `<name>.png` / `<name>.svg`."""
    title: str
    panels: list[Panel] = field(default_factory=list)
    heatmap: Heatmap | None = None


# -- titles and labels -----------------------------------------------------------------------


def context_title(context: RunContext) -> str:
    """`NVIDIA H100 80GB HBM3 x8 · nccl 2.21.5 · world size 8`: what a reader needs to see."""
    names = list(dict.fromkeys(context.device_names))
    world = context.world_size
    count = world or context.device_count or len(context.device_names)
    device = " / ".join(names) if names else str(context.device or "?")
    # ranks on CPU cores are not devices: the world size below says how many
    parts = ["CPU"] if device == "cpu" else [f"{device} x{count}" if count else device]
    backend = context.backend
    if backend == "nccl" and context.nccl:
        backend = f"nccl {context.nccl}"
    if backend:
        parts.append(backend)
    if world:
        nnodes = context.nnodes or 1
        parts.append(f"world size {world}" + (f" ({nnodes} nodes)" if nnodes > 1 else ""))
    return " · ".join(parts)


def run_labels(runs: list[Run]) -> list[str]:
    """Legend names: the run directory, plus what tells the runs apart when that is context."""
    if len(runs) == 1:
        return [runs[0].path.name]
    titles = [context_title(r.context) for r in runs]
    distinct = len(set(titles)) > 1
    return [f"{r.path.name} ({t})" if distinct else r.path.name for r, t in zip(runs, titles)]


def figure_title(what: str, runs: list[Run]) -> str:
    titles = list(dict.fromkeys(context_title(r.context) for r in runs))
    return f"{what} — {' vs '.join(titles)}"


# -- series ----------------------------------------------------------------------------------


def _plotted(row: ResultRow) -> bool:
    return row.check != CHECK_FAILED and math.isfinite(row.time_us) and row.time_us > 0


def _variant(row: ResultRow) -> tuple[str, str, int, bool]:
    return (row.dtype, row.reduce_op, row.world_size, row.in_place)


def _variant_label(variant: tuple[str, str, int, bool], varying: set[int]) -> str:
    dtype, reduce_op, world, in_place = variant
    parts = []
    if 0 in varying:
        parts.append(dtype)
    if 1 in varying and reduce_op:
        parts.append(reduce_op)
    if 2 in varying:
        parts.append(f"n={world}")
    if 3 in varying:
        parts.append("in-place" if in_place else "out-of-place")
    return " ".join(parts)


def _series_for(
    runs: list[Run],
    labels: list[str],
    select: Any,
    metric: Any,
    name_of: Any = None,
    band: Any = None,
) -> list[Series]:
    """One series per (run, name, variant) among the rows `select` keeps, sorted by size."""
    groups: dict[tuple[int, str, tuple[str, str, int, bool]], list[ResultRow]] = {}
    for i, run in enumerate(runs):
        for row in run.rows:
            if select(row) and _plotted(row) and metric(row) is not None:
                name = name_of(row) if name_of else ""
                groups.setdefault((i, name, _variant(row)), []).append(row)
    # Name a variant by what varies within its own run: across runs, the run label does.
    varying: dict[int, set[int]] = {}
    for i in range(len(runs)):
        variants = [v for (j, _, v) in groups if j == i]
        varying[i] = {k for k in range(4) if len({v[k] for v in variants}) > 1}
    series = []
    for (i, name, variant), rows in groups.items():
        rows.sort(key=lambda r: r.size_bytes)
        parts = [name] if name else []
        if len(runs) > 1:
            parts.append(labels[i])
        extra = _variant_label(variant, varying[i])
        if extra:
            parts.append(extra)
        bands = [band(r) for r in rows] if band is not None else []
        series.append(
            Series(
                label=" · ".join(parts) or labels[i],
                x=[r.size_bytes for r in rows],
                y=[float(metric(r)) for r in rows],
                band=bands if bands and all(b is not None for b in bands) else None,
            )
        )
    return series


def _busbw(row: ResultRow) -> float | None:
    return row.busbw_gbps if row.busbw_gbps is not None and math.isfinite(row.busbw_gbps) else None


def _time(row: ResultRow) -> float | None:
    return row.time_us


def _quartiles_known(row: ResultRow) -> bool:
    return row.stats.n >= 4 and all(
        math.isfinite(v) and v > 0 for v in (row.stats.q1, row.stats.q3)
    )


def _time_band(row: ResultRow) -> tuple[float, float] | None:
    return (row.stats.q1, row.stats.q3) if _quartiles_known(row) else None


def _busbw_band(row: ResultRow) -> tuple[float, float] | None:
    """busbw is inversely proportional to time: the slow quartile gives the low edge."""
    busbw = _busbw(row)
    if busbw is None or not _quartiles_known(row):
        return None
    return (busbw * row.time_us / row.stats.q3, busbw * row.time_us / row.stats.q1)


def op_figures(runs: list[Run]) -> list[Figure]:
    """Per op: busbw and latency against message size, one line per run (and variant)."""
    # p2p copies have their own figure (the heatmap): a line per op would mix every pair.
    # barrier moves no bytes: a size axis means nothing for it (its latency is in the tables)
    ops = list(
        dict.fromkeys(
            r.op
            for run in runs
            for r in run.rows
            if not r.strategy and r.op not in (P2P_OP, "barrier")
        )
    )
    figures = []
    for op in ops:

        def select(row: ResultRow, op: str = op) -> bool:
            return row.op == op and not row.strategy

        # Only the runs that measured this op name the figure and its lines.
        having = [run for run in runs if any(select(r) and _plotted(r) for r in run.rows)]
        labels = run_labels(having)
        panels = []
        bus = _series_for(having, labels, select, _busbw, band=_busbw_band)
        if bus:
            panels.append(Panel(title="bus bandwidth", ylabel="busbw (GB/s)", series=bus))
        lat = _series_for(having, labels, select, _time, band=_time_band)
        if lat:
            panels.append(Panel(title="latency", ylabel="time (us)", series=lat, ylog=True))
        if panels:
            figures.append(Figure(name=op, title=figure_title(op, having), panels=panels))
    return figures


def strategies_figure(runs: list[Run]) -> Figure | None:
    """All-reduce strategies side by side, with the plain all_reduce dashed for reference."""

    def strategy(row: ResultRow) -> bool:
        return bool(row.strategy) and row.op != P2P_OP

    runs = [run for run in runs if any(strategy(r) for r in run.rows)]
    labels = run_labels(runs)
    series = _series_for(
        runs, labels, strategy, _busbw, name_of=lambda r: r.strategy, band=_busbw_band
    )
    if not series:
        return None
    reference = _series_for(
        runs,
        labels,
        lambda r: r.op == "all_reduce" and not r.strategy,
        _busbw,
        name_of=lambda r: "all_reduce (plain)",
    )
    for s in reference:
        s.dashed = True
    return Figure(
        name="strategies",
        title=figure_title("all-reduce strategies", runs),
        panels=[Panel(title="bus bandwidth", ylabel="busbw (GB/s)", series=series + reference)],
    )


def p2p_matrix(run: Run) -> Heatmap | None:
    """GB/s per (src, dst) GPU pair at the largest size, as `commbench p2p --matrix` draws it:
    unidirectional p2p bandwidth rows, each link alone (sequential) where measured."""
    from commbench.p2p.heatmap import copies, matrix_values

    gpus = [i for _, c in copies(run.rows) for i in (c.src, c.dst) if i is not None]
    if not gpus:
        return None
    n = max(gpus) + 1
    values, mode = matrix_values(run.rows, n)
    if all(v is None for line in values for v in line):
        return None
    return Heatmap(labels=[f"cuda:{i}" for i in range(n)], values=values, unit=f"GB/s ({mode})")


def p2p_figures(runs: list[Run]) -> list[Figure]:
    figures = []
    for run in runs:
        heatmap = p2p_matrix(run) if run.kind is RunKind.P2P else None
        if heatmap is not None:
            stem = "p2p" if len(runs) == 1 else f"p2p-{run.path.name}"
            figures.append(
                Figure(name=stem, title=figure_title("p2p bandwidth", [run]), heatmap=heatmap)
            )
    return figures


def all_figures(runs: list[Run]) -> list[Figure]:
    """Every figure the runs have data for: per op, the strategies, the p2p heatmaps."""
    figures = op_figures(runs)
    strategies = strategies_figure(runs)
    if strategies is not None:
        figures.append(strategies)
    figures.extend(p2p_figures(runs))
    return figures
