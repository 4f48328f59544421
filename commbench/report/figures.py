"""What to draw, as plain data: figures, panels and series built from stored runs.

Nothing here imports matplotlib. `commbench.report.plots` draws these specs; tests check
the specs, which is exactly what matplotlib is handed.

Every op gets two panels over a log2 size axis. Time per call on log-log axes: small
messages are latency-bound (flat, a few µs) and large ones grow linearly, so both regions
read as lines. Bus bandwidth on log-log axes too: on a linear axis everything below ~128K
lies on zero, where strategies and links differ most; on a log axis the latency-bound
region is a rising line, the bandwidth-bound one a plateau to hold against the peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.heatmap import Heatmap, value_text
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
    """Per point, the interquartile range of the metric (q1..q3 of the timed iterations): the
    noise a reader must see before reading a gap between two lines as a difference (the
    figure's legend says so: `plots.BAND_LABEL`)."""


@dataclass(kw_only=True, slots=True)
class Peak:
    """A theoretical bandwidth to draw as a horizontal line on a bandwidth panel."""

    gbps: float
    label: str
    """`peak 450 GB/s`, with the run it belongs to when the runs on a figure differ."""


@dataclass(kw_only=True, slots=True)
class Panel:
    title: str
    ylabel: str
    series: list[Series]
    ylog: bool = False
    ytime: bool = False
    """y is a time in µs: ticks read `5 µs`, `2 ms` rather than `2000`."""
    peaks: list[Peak] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class Figure:
    name: str
    """File stem: `<name>.png` / `<name>.svg`."""
    title: str
    panels: list[Panel] = field(default_factory=list)
    heatmap: Heatmap | None = None
    """A pair matrix instead of panels (the p2p figure), with `title` as its own."""
    legend: bool = False
    """Name even a single line: the runs were named (`--label`) or several were plotted, so
    a figure that only one of them has must still say which."""


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


def suite_entry_name(path: Path) -> str | None:
    """The name of the suite entry that made the run at `path`, when a suite did (its
    directory sits inside the suite's, and suite.json names it); None otherwise."""
    from commbench.results.runs import is_suite, load_suite

    run = path.resolve()
    for parent in list(run.parents)[:3]:
        try:
            if not is_suite(parent):
                continue
            entries = load_suite(parent).entries
        except (UserError, OSError):  # an unreadable suite.json names nothing: the folder will do
            return None
        for entry in entries:
            if entry.path and (parent / entry.path).resolve() == run:
                return entry.name
        return None
    return None


def run_names(runs: Sequence[Run]) -> list[str]:
    """What to call each run in a legend: its suite entry's name, else its directory's."""
    return [suite_entry_name(r.path) or r.path.name for r in runs]


def run_labels(runs: list[Run], names: Sequence[str] | None = None) -> list[str]:
    """Legend names: the given names (`plot --label`) as they are; else the suite entry or
    directory name, plus what tells the runs apart when that is context."""
    if names is not None:
        return list(names)
    own = run_names(runs)
    if len(runs) == 1:
        return own
    titles = [context_title(r.context) for r in runs]
    distinct = len(set(titles)) > 1
    return [f"{n} ({t})" if distinct else n for n, t in zip(own, titles)]


def topology_peak(run: Run) -> float | None:
    """The theoretical peak a collective on this run's GPUs can reach per direction: the
    slowest link among the GPUs its ranks used, from the topology recorded with the run.

    None where it cannot be known: CPU ranks, one GPU, several nodes (the network between
    them is not in the snapshot), no snapshot, or a pair whose peak is unknown."""
    context = run.context
    topology = context.topology
    if topology is None or (context.nnodes or 1) > 1 or len(context.hosts) > 1:
        return None
    used: set[int] = set()
    for rank in context.rank_entries:
        device = rank.device
        if device is None or not device.startswith("cuda:"):
            return None
        index = device.removeprefix("cuda:")
        if not index.isdecimal():
            return None
        used.add(int(index))
    if len(used) < 2:
        return None
    peaks = [p.peak_gbps for p in topology.pairs if p.src in used and p.dst in used]
    if len(peaks) < len(used) * (len(used) - 1) or any(p is None for p in peaks):
        return None
    return min(p for p in peaks if p is not None)


def peak_text(gbps: float) -> str:
    """`peak 450 GB/s`, `peak 15.8 GB/s` (PCIe Gen3 x16), `peak 0.125 GB/s`."""
    shown = f"{gbps:.1f}".rstrip("0").rstrip(".") if gbps >= 10 else f"{gbps:.3g}"
    return f"peak {shown} GB/s"


def _peaks(runs: list[Run], labels: list[str], peak_gbps: float | None) -> list[Peak]:
    """The peak lines of a bandwidth panel: the one given, else each run's own (once per
    value; named after the runs when they differ)."""
    if peak_gbps is not None:
        return [Peak(gbps=peak_gbps, label=peak_text(peak_gbps))]
    known: dict[float, list[str]] = {}
    for run, label in zip(runs, labels):
        peak = topology_peak(run)
        if peak is not None:
            known.setdefault(peak, []).append(label)
    if len(known) == 1 and sum(map(len, known.values())) == len(runs):
        ((gbps, _),) = known.items()
        return [Peak(gbps=gbps, label=peak_text(gbps))]
    return [
        Peak(gbps=gbps, label=f"{peak_text(gbps)} ({', '.join(names)})")
        for gbps, names in known.items()
    ]


def _pick(runs: list[Run], having: list[Run], labels: Sequence[str] | None) -> list[str] | None:
    """The given labels of the runs in `having` (a figure draws only the runs with its op)."""
    if labels is None:
        return None
    by_run = {id(r): label for r, label in zip(runs, labels)}
    return [by_run[id(r)] for r in having]


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
    """The row's bus bandwidth where a log axis can draw it. nccl-tests prints GB/s with two
    decimals, so its small sizes read 0.00: drawn, such a point sat at minus infinity on the
    log axis and its line fell straight down the panel beside the first size that prints
    0.01 (512 B in an all_reduce over 16 GPUs), as if the bandwidth had collapsed there. Its
    time is still drawn on the latency panel."""
    busbw = row.busbw_gbps
    return busbw if busbw is not None and math.isfinite(busbw) and busbw > 0 else None


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


BUSBW_LABEL = "bus bandwidth (GB/s)"
TIME_LABEL = "time per call"


def op_figures(
    runs: list[Run],
    *,
    peak_gbps: float | None = None,
    labels: Sequence[str] | None = None,
) -> list[Figure]:
    """Per op: latency and busbw against message size, one line per run (and variant).

    `peak_gbps` draws that peak on the bandwidth panels; without it each run's topology
    gives one where it is known. `labels` names the runs in the legend, in order."""
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
        given = _pick(runs, having, labels)
        names = run_labels(having, given)
        panels = []
        lat = _series_for(having, names, select, _time, band=_time_band)
        if lat:
            panels.append(
                Panel(title="latency", ylabel=TIME_LABEL, series=lat, ylog=True, ytime=True)
            )
        bus = _series_for(having, names, select, _busbw, band=_busbw_band)
        if bus:
            panels.append(
                Panel(
                    title="bus bandwidth",
                    ylabel=BUSBW_LABEL,
                    series=bus,
                    ylog=True,
                    peaks=_peaks(having, given or run_names(having), peak_gbps),
                )
            )
        if panels:
            figures.append(
                Figure(
                    name=op,
                    title=figure_title(op, having),
                    panels=panels,
                    legend=labels is not None or len(runs) > 1,
                )
            )
    return figures


def strategies_figure(
    runs: list[Run],
    *,
    peak_gbps: float | None = None,
    labels: Sequence[str] | None = None,
) -> Figure | None:
    """All-reduce strategies side by side, latency beside bandwidth (small messages are where
    strategies differ 2-5x), with the plain all_reduce dashed for reference."""

    def strategy(row: ResultRow) -> bool:
        return bool(row.strategy) and row.op != P2P_OP

    def plain(row: ResultRow) -> bool:
        return row.op == "all_reduce" and not row.strategy

    having = [run for run in runs if any(strategy(r) for r in run.rows)]
    given = _pick(runs, having, labels)
    names = run_labels(having, given)
    panels = []
    for metric, band, title in ((_time, _time_band, "latency"), (_busbw, _busbw_band, "bw")):
        series = _series_for(
            having, names, strategy, metric, name_of=lambda r: r.strategy, band=band
        )
        if not series:
            continue
        reference = _series_for(
            having, names, plain, metric, name_of=lambda r: "all_reduce (plain)"
        )
        for s in reference:
            s.dashed = True
        if title == "latency":
            panel = Panel(
                title="latency", ylabel=TIME_LABEL, series=series + reference, ylog=True, ytime=True
            )
        else:
            panel = Panel(
                title="bus bandwidth",
                ylabel=BUSBW_LABEL,
                series=series + reference,
                ylog=True,
                peaks=_peaks(having, given or run_names(having), peak_gbps),
            )
        panels.append(panel)
    if not panels:
        return None
    return Figure(
        name="strategies", title=figure_title("all-reduce strategies", having), panels=panels
    )


def p2p_matrix(run: Run, title: str = "") -> Heatmap | None:
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
    labels = [f"cuda:{i}" for i in range(n)]
    return Heatmap.square(
        values=values,
        labels=labels,
        title=title,
        unit=f"GB/s ({mode})",
        row_axis="source",
        col_axis="destination",
        annotations=value_text(values) if n <= 16 else None,  # beyond, the numbers crowd
    )


def p2p_figures(runs: list[Run]) -> list[Figure]:
    figures = []
    for run in runs:
        if run.kind is not RunKind.P2P:
            continue
        title = figure_title("p2p bandwidth", [run])
        heatmap = p2p_matrix(run, title)
        if heatmap is not None:
            stem = "p2p" if len(runs) == 1 else f"p2p-{run.path.name}"
            figures.append(Figure(name=stem, title=title, heatmap=heatmap))
    return figures


def all_figures(
    runs: list[Run],
    *,
    peak_gbps: float | None = None,
    labels: Sequence[str] | None = None,
) -> list[Figure]:
    """Every figure the runs have data for: per op, the strategies, the p2p heatmaps.

    `peak_gbps` is drawn on every bandwidth panel (else each run's topology peak, where
    known); `labels` name the runs, one per run in order (else suite entry or folder)."""
    figures = op_figures(runs, peak_gbps=peak_gbps, labels=labels)
    strategies = strategies_figure(runs, peak_gbps=peak_gbps, labels=labels)
    if strategies is not None:
        figures.append(strategies)
    figures.extend(p2p_figures(runs))
    return figures
