"""What a run reached, in the figures nccl-tests users look for: per series the peak bus
bandwidth and the size it was reached at, the average over the bandwidth-bound sizes, and the
devices that took part ("Using devices").

A series is one line of a plot: the points of one op (or all-reduce strategy), dtype, reduce
op, world size, in-place flag and skew (all_to_allv's), as the regression gate groups them.

**Bandwidth-bound** is the gate's rule (`commbench.compare`), so a summary and a verdict never
disagree on which points are which: a point is bandwidth-bound when its busbw is at least
`LATENCY_BOUND_FRACTION` (half) of its series' peak. Half the peak is where the fixed cost and
the transfer take equal time (t = a + S/B at S = aB); below it, a point measures launch and
wake-up latency, and averaging it in would make "average bus bandwidth" depend on how many
small sizes the sweep happened to hold. nccl-tests' own "Avg bus bandwidth" averages every
size, small ones included, which is why an imported log's figure (kept in its run's settings)
is lower than this one.

    summary = summarise(run.rows, run.context.ranks)
    for s in summary.series:            # SeriesSummary, in the order measured
        s.peak_busbw_gbps, s.peak_size_bytes, s.avg_busbw_gbps
    summary.devices                     # [Device(rank=0, host="n1", device="cuda:0", ...)]
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from commbench.escape import markdown_text
from commbench.results.ranks import RankEntry
from commbench.results.schema import CHECK_FAILED, ROW_SERIES, ResultRow
from commbench.sizes import format_size
from commbench.tables import fixed, markdown_table, text_table

LATENCY_BOUND_FRACTION = 0.5
"""A point whose busbw is under this fraction of its series' peak is latency-bound: half the
peak is where the fixed cost and the transfer take equal time (t = a + S/B at S = aB). The
regression gate (`commbench.compare`) uses the same rule for its latency tolerance."""

SeriesKey = tuple[str, str, str, str, int, bool, str]
"""(op, strategy, dtype, reduce_op, world_size, in_place, skew): one line of a plot."""


def series_key(row: ResultRow) -> SeriesKey:
    return cast(SeriesKey, tuple(getattr(row, name) for name in ROW_SERIES))


def busbw_of(row: ResultRow) -> float | None:
    """The row's busbw when it is a measured, checked, finite figure; else None (barrier, a
    point that failed its check or could not run)."""
    value = row.busbw_gbps
    if row.check == CHECK_FAILED or value is None or not math.isfinite(value) or value <= 0:
        return None
    return value


def bandwidth_bound(busbw: float | None, peak: float) -> bool:
    """Whether a point with this busbw is bandwidth-bound in a series peaking at `peak`."""
    return busbw is not None and peak > 0 and busbw >= LATENCY_BOUND_FRACTION * peak


def series_peaks(rows: Iterable[ResultRow]) -> dict[SeriesKey, float]:
    """Each series' highest busbw among `rows` (`busbw_of`): the peak `bandwidth_bound` holds
    a point to. Series without a bandwidth are absent."""
    peaks: dict[SeriesKey, float] = {}
    for row in rows:
        busbw = busbw_of(row)
        if busbw is not None:
            key = series_key(row)
            peaks[key] = max(peaks.get(key, 0.0), busbw)
    return peaks


@dataclass(kw_only=True, slots=True, frozen=True)
class SeriesSummary:
    """One series' peak and average bus bandwidth. The figures are None for a series without
    a bandwidth (barrier) or without a measured point."""

    op: str
    strategy: str
    """All-reduce strategy, '' for plain ops."""
    dtype: str
    reduce_op: str
    world_size: int
    in_place: bool
    points: int
    """Points of the series, measured or not."""
    peak_busbw_gbps: float | None
    """The highest busbw of the series (GB/s, 1e9 B/s)."""
    peak_size_bytes: int | None
    """The size the peak was reached at (the smallest, on a tie)."""
    avg_busbw_gbps: float | None
    """Mean busbw over the bandwidth-bound points (`bandwidth_bound`)."""
    bandwidth_bound: tuple[int, ...]
    """Sizes of the bandwidth-bound points, ascending: what `avg_busbw_gbps` averages."""
    skew: str = ""
    """all_to_allv's skew (`ResultRow.skew`); '' for every other op."""

    @property
    def name(self) -> str:
        """The strategy when there is one, else the op: what a table's row names."""
        return self.strategy or self.op


@dataclass(kw_only=True, slots=True, frozen=True)
class Device:
    """One rank's device, as its worker reported it (nccl-tests' "Using devices" lines)."""

    rank: int
    host: str | None
    device: str | None
    """torch's name of it: `cuda:0`, `cpu`."""
    device_name: str | None
    """The model: `NVIDIA H100 80GB HBM3`, or `cpu`."""
    node: int | None = None
    local_rank: int | None = None
    pci_bus_id: str | None = None
    """As an nccl-tests log names the GPU; commbench's own runs do not record it."""
    pid: int | None = None
    """The rank's process id, where its worker (or the nccl-tests log) said it."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RunSummary:
    series: tuple[SeriesSummary, ...]
    """In the order their first point was measured."""
    devices: tuple[Device, ...]
    """In rank order; empty when the run's context does not list its ranks (imported logs
    without device lines, runs stored before commbench kept them)."""


def summarise_series(rows: Sequence[ResultRow]) -> list[SeriesSummary]:
    """Peak and average busbw per series of `rows`, in the order measured."""
    groups: dict[SeriesKey, list[ResultRow]] = {}
    for row in rows:
        groups.setdefault(series_key(row), []).append(row)
    out = []
    for key, group in groups.items():
        series: dict[str, Any] = dict(zip(ROW_SERIES, key))
        measured = [(r.size_bytes, bw) for r in group if (bw := busbw_of(r)) is not None]
        peak = peak_size = avg = None
        bound: list[int] = []
        if measured:
            peak = max(bw for _, bw in measured)
            peak_size = min(size for size, bw in measured if bw == peak)
            kept = sorted((s, bw) for s, bw in measured if bandwidth_bound(bw, peak))
            bound = [s for s, _ in kept]
            avg = statistics.fmean(bw for _, bw in kept)
        out.append(
            SeriesSummary(
                **series,
                points=len(group),
                peak_busbw_gbps=peak,
                peak_size_bytes=peak_size,
                avg_busbw_gbps=avg,
                bandwidth_bound=tuple(bound),
            )
        )
    return out


def devices(ranks: Sequence[Mapping[str, Any]]) -> list[Device]:
    """The devices of a run's `context.ranks`, in rank order; entries without a rank skipped
    (the context keeps what workers reported as it was, unchecked)."""
    out = []
    for entry in map(RankEntry.read, ranks):
        if entry.rank is None:
            continue
        local_rank, bus = entry.local_rank, entry.pci_bus_id or None
        device = entry.device or None
        if device is None and bus is not None and local_rank is not None:
            device = f"cuda:{local_rank}"  # an nccl-tests log: its "device N" is the ordinal
        out.append(
            Device(
                rank=entry.rank,
                host=entry.host or None,
                device=device,
                device_name=entry.device_name or None,
                node=entry.node,
                local_rank=local_rank,
                pci_bus_id=bus,
                pid=entry.pid,
            )
        )
    return sorted(out, key=lambda d: d.rank)


def summarise(rows: Sequence[ResultRow], ranks: Sequence[Mapping[str, Any]] = ()) -> RunSummary:
    """A run's summary from its rows and its `context.ranks`."""
    return RunSummary(series=tuple(summarise_series(rows)), devices=tuple(devices(ranks)))


def series_label(s: SeriesSummary, *, two_forms: bool = False) -> str:
    """`all_reduce float32 sum 2 ranks in-place`: the series in words. `two_forms`: the run
    has this series in place too (`--in-place both`, an nccl-tests log), so the out-of-place
    one says so."""
    parts = [s.name, s.dtype, s.reduce_op, f"{s.world_size} rank{'s' if s.world_size != 1 else ''}"]
    parts += ["in-place"] if s.in_place else (["out-of-place"] if two_forms else [])
    parts += [f"skew={s.skew}"] if s.skew else []
    return " ".join(p for p in parts if p)


def _twin(s: SeriesSummary) -> tuple[str, str, str, str, int, str]:
    """What a series and its other form (in place or not) share."""
    return (s.op, s.strategy, s.dtype, s.reduce_op, s.world_size, s.skew)


def _span(sizes: Sequence[int]) -> str:
    if not sizes:
        return "-"
    first, last = format_size(sizes[0]), format_size(sizes[-1])
    return f"{len(sizes)} ({first})" if first == last else f"{len(sizes)} ({first}-{last})"


SUMMARY_HEADERS = ["series", "peak busbw GB/s", "at size", "avg busbw GB/s", "averaged sizes"]
DEVICE_HEADERS = ["rank", "host", "device", "model"]


SUMMARY_TITLE = (
    "Bus bandwidth: peak, and average over the bandwidth-bound sizes (busbw at least half the peak)"
)
"""The summary table's title: it says what "average" means."""


@dataclass(kw_only=True, slots=True, frozen=True)
class SummaryTable:
    """One table of a summary as cells, for renderers other than `render` (the report)."""

    title: str
    headers: list[str]
    cells: list[list[str]]
    left: set[int]
    """Columns of words (left-aligned); the others are numbers."""


def tables(summary: RunSummary) -> list[SummaryTable]:
    """The "Using devices" table and the bandwidth summary, each only where there is data."""
    out = []
    if summary.devices:
        cells = [
            [
                str(d.rank),
                d.host or "-",
                (d.device or "-") + (f" [{d.pci_bus_id}]" if d.pci_bus_id else ""),
                d.device_name or "-",
            ]
            for d in summary.devices
        ]
        out.append(
            SummaryTable(title="Using devices", headers=DEVICE_HEADERS, cells=cells, left={1, 2, 3})
        )
    series = [s for s in summary.series if s.peak_busbw_gbps is not None]
    if series:
        in_place = {_twin(s) for s in series if s.in_place}
        cells = [
            [
                series_label(s, two_forms=_twin(s) in in_place),
                fixed(s.peak_busbw_gbps),
                format_size(s.peak_size_bytes) if s.peak_size_bytes is not None else "-",
                fixed(s.avg_busbw_gbps),
                _span(s.bandwidth_bound),
            ]
            for s in series
        ]
        out.append(
            SummaryTable(title=SUMMARY_TITLE, headers=SUMMARY_HEADERS, cells=cells, left={0})
        )
    return out


def render(summary: RunSummary, *, markdown: bool = False) -> str:
    """The "Using devices" block and the bandwidth summary, as text or Markdown tables; ''
    when there is neither. The summary's title says what "average" means."""
    table = markdown_table if markdown else text_table
    out: list[str] = []
    for t in tables(summary):
        out += [_title(t.title, markdown), *table(t.headers, t.cells, left=t.left), ""]
    return "\n".join(out).rstrip() + "\n" if out else ""


def _title(text: str, markdown: bool) -> str:
    return f"### {markdown_text(text, where='cell')}\n" if markdown else f"# {text}"


__all__ = [
    "LATENCY_BOUND_FRACTION",
    "Device",
    "RunSummary",
    "SeriesSummary",
    "SummaryTable",
    "bandwidth_bound",
    "busbw_of",
    "devices",
    "render",
    "series_key",
    "series_label",
    "series_peaks",
    "summarise",
    "summarise_series",
    "tables",
]
