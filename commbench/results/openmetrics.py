"""A stored run as metrics: the OpenMetrics text format (1.0.0) and Prometheus' text
exposition format (0.0.4), for a node_exporter textfile collector, a Pushgateway or any
scraper.

What is exported, every sample labelled with the run (`run_id`, `hosts`):

- per measured point (labels `op`, `strategy`, `dtype`, `reduce_op`, `in_place`,
  `world_size`, `size_bytes`; a p2p copy adds its `step`): `commbench_algbw_bytes_per_second`,
  `commbench_busbw_bytes_per_second` (gauges) and `commbench_time_seconds` (a summary: the
  quantiles 0, 0.25, 0.5, 0.75, 0.95 and 1 of the iteration times, their `_sum` and `_count`);
- the run: `commbench_run_status` (one series per status, 1 for the run's),
  `commbench_run_timestamp_seconds` (when it started);
- link health (`context.health`): each error counter in each snapshot
  (`commbench_health_errors`, `snapshot="before"|"after"`), how much it rose during the run
  (`commbench_health_errors_increase`) and the findings by kind (`commbench_health_findings`);
- a diagnose run's verdicts (`commbench_diagnose_verdict`, `commbench_diagnose_node_verdict`)
  and the regression gate's against a baseline (`commbench_compare_point_verdict`,
  `commbench_compare_speed_ratio`, `commbench_compare_passed`), given by the caller through
  the protocols below: this package sits below `diagnose` and `compare`.

Why every metric is a gauge or a summary: those two types read the same in both formats.
A counter is named `x` in an OpenMetrics TYPE line and `x_total` in a Prometheus one, and
OpenMetrics' stateset and info types do not exist in Prometheus 0.0.4, so a file in one
format would not parse as the other (promtool and node_exporter's textfile collector read
the Prometheus format). A state is a gauge per state, 1 for the one that holds (the
convention before statesets). The hardware counters are gauges of what a snapshot read;
their increase during the run is the figure to alert on. promtool lints a name holding a
type's name (`counter`), hence `_errors`.

Units are Prometheus' base units (seconds, bytes per second), named in the metric. Label
values are escaped as both formats say (backslash, double quote, line feed); no two
samples of a family share a label set (the first of two rows with one key wins, as the gate
joins them). No timestamps: the textfile collector refuses them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from commbench.health.findings import RDMA_ERROR_COUNTERS, FindingKind
from commbench.results.record import RunStatus

if TYPE_CHECKING:
    from commbench.health.record import HealthSnapshot
    from commbench.results.runs import Run
    from commbench.results.schema import ResultRow


class Dialect(str, Enum):
    openmetrics = "openmetrics"
    prometheus = "prometheus"


CONTENT_TYPES = {
    Dialect.openmetrics: "application/openmetrics-text; version=1.0.0; charset=utf-8",
    Dialect.prometheus: "text/plain; version=0.0.4; charset=utf-8",
}
"""What an HTTP server (a Pushgateway client) sends each format as."""

GB = 1e9
"""A row's GB/s are 10**9 bytes per second."""
US = 1e-6
"""A row's times are microseconds."""
QUANTILES = (
    ("0", "min"),
    ("0.25", "q1"),
    ("0.5", "median"),
    ("0.75", "q3"),
    ("0.95", "p95"),
    ("1", "max"),
)
"""The summary's quantile labels and the `Stats` figure each one is."""

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Labels
    value: float
    suffix: str = ""
    """`_sum` or `_count` of a summary; '' for every other sample."""


@dataclass(slots=True)
class Family:
    """One metric: its name (the unit last), type, help, unit and samples."""

    name: str
    type: str
    """`gauge` or `summary` (module docstring)."""
    help: str
    unit: str = ""
    samples: list[Sample] = field(default_factory=list)
    _seen: set[tuple[str, Labels]] = field(default_factory=set)

    def add(self, labels: Mapping[str, str] | Labels, value: float, suffix: str = "") -> None:
        """One sample; a second one with the same labels (and suffix) is dropped."""
        items = tuple(labels.items()) if isinstance(labels, Mapping) else labels
        if (suffix, items) in self._seen:
            return
        self._seen.add((suffix, items))
        self.samples.append(Sample(items, value, suffix))


# -- the text ----------------------------------------------------------------------------------


def escape_label(value: str) -> str:
    """A label value as both formats write it between double quotes."""
    value = value.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate is not UTF-8
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str, dialect: Dialect) -> str:
    """HELP text: Prometheus escapes backslash and line feed, OpenMetrics double quotes too."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if dialect is Dialect.openmetrics else text


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: Iterable[Family], dialect: Dialect) -> str:
    """The exposition: each family with samples, its HELP, TYPE (and in OpenMetrics UNIT)
    lines first; OpenMetrics ends with `# EOF`."""
    dialect = Dialect(dialect)
    out: list[str] = []
    for family in families:
        if not family.samples:
            continue
        out.append(f"# HELP {family.name} {escape_help(family.help, dialect)}")
        out.append(f"# TYPE {family.name} {family.type}")
        if family.unit and dialect is Dialect.openmetrics:
            out.append(f"# UNIT {family.name} {family.unit}")
        for s in family.samples:
            labels = ",".join(f'{k}="{escape_label(v)}"' for k, v in s.labels)
            out.append(f"{family.name}{s.suffix}{{{labels}}} {format_value(s.value)}")
    if dialect is Dialect.openmetrics:
        out.append("# EOF")
    return "".join(line + "\n" for line in out)


# -- what a run holds --------------------------------------------------------------------------


def run_labels(run: Run) -> dict[str, str]:
    """The labels of every sample of `run`: its id (the directory's name when run.json has
    none) and its hosts."""
    ctx = run.context
    hosts = ctx.hosts or ([ctx.host] if ctx.host else [])
    return {"run_id": run.record.run_id or run.path.name, "hosts": ",".join(hosts)}


class PointKey(Protocol):
    """What names a measured point: a result row, or a point the regression gate judged."""

    @property
    def op(self) -> str: ...
    @property
    def strategy(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def reduce_op(self) -> str: ...
    @property
    def in_place(self) -> bool: ...
    @property
    def world_size(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...


def point_labels(run: Mapping[str, str], point: PointKey) -> dict[str, str]:
    return {
        **run,
        "op": point.op,
        "strategy": point.strategy,
        "dtype": point.dtype,
        "reduce_op": point.reduce_op,
        "in_place": "true" if point.in_place else "false",
        "world_size": str(point.world_size),
        "size_bytes": str(point.size_bytes),
    }


def _row_labels(run: Mapping[str, str], row: ResultRow) -> dict[str, str]:
    labels = point_labels(run, row)
    if row.p2p is not None:  # a copy's name may repeat across the steps of a p2p run
        labels["step"] = str(row.p2p.step)
    return labels


def run_families(run: Run) -> list[Family]:
    labels = run_labels(run)
    status = Family(
        "commbench_run_status",
        "gauge",
        "1 for the run's status (as commbench judges it: a wrong result is failed), 0 for "
        "the others.",
    )
    for state in RunStatus:
        if state in (RunStatus.PENDING, RunStatus.SKIPPED) and state is not run.status:
            continue  # a suite entry's states, not a run's
        status.add({**labels, "kind": run.kind.value, "status": state.value}, run.status is state)
    started = Family(
        "commbench_run_timestamp_seconds",
        "gauge",
        "When the run started, seconds since the Unix epoch.",
        unit="seconds",
    )
    when = _timestamp(run.context.started_at)
    if when is not None:
        started.add(labels, when)
    return [status, started]


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def point_families(run: Run) -> list[Family]:
    """algbw, busbw and the time summary of every point that was measured."""
    labels = run_labels(run)
    algbw = Family(
        "commbench_algbw_bytes_per_second",
        "gauge",
        "Algorithm bandwidth at the median time: bytes per rank / time.",
        unit="bytes_per_second",
    )
    busbw = Family(
        "commbench_busbw_bytes_per_second",
        "gauge",
        "Bus bandwidth at the median time (nccl-tests' busbw), comparable across world sizes.",
        unit="bytes_per_second",
    )
    time = Family(
        "commbench_time_seconds",
        "summary",
        "Time of one iteration (the slowest rank's), quantiles over the timed iterations.",
        unit="seconds",
    )
    seen = set()
    for row in run.rows:
        stats = row.stats
        if stats.n < 1 or not math.isfinite(stats.median):
            continue  # a point that could not run has nothing to say
        key = (row.key, None if row.p2p is None else row.p2p.step)
        if key in seen:
            continue
        seen.add(key)
        point = _row_labels(labels, row)
        if row.algbw_gbps is not None:
            algbw.add(point, row.algbw_gbps * GB)
        if row.busbw_gbps is not None:
            busbw.add(point, row.busbw_gbps * GB)
        for quantile, name in QUANTILES:
            value = getattr(stats, name)
            if math.isfinite(value):
                time.add({**point, "quantile": quantile}, value * US)
        total = math.fsum(row.samples_us) if row.samples_us else stats.mean * stats.n
        if math.isfinite(total):
            time.add(point, total * US, "_sum")
        time.add(point, stats.n, "_count")
    return [algbw, busbw, time]


# -- link health -------------------------------------------------------------------------------

CounterKey = tuple[str, str, str]
"""(device, link, counter): `("GPU3", "", "pcie_replay")`, `("GPU3", "2", "nvlink_crc_flit")`,
`("mlx5_0/1", "", "symbol_error")`."""


def health_counters(snapshot: HealthSnapshot) -> dict[CounterKey, int]:
    """Every link-health counter a snapshot read; unknown ones are left out, never zero."""
    out: dict[CounterKey, int] = {}
    for gpu in snapshot.gpus:
        device = f"GPU{gpu.index}"
        plain = {
            "pcie_replay": gpu.pcie_replay,
            "retired_pages_sbe": gpu.retired_pages_sbe,
            "retired_pages_dbe": gpu.retired_pages_dbe,
            "remapped_corrected": gpu.remapped_corrected,
            "remapped_uncorrected": gpu.remapped_uncorrected,
        }
        plain |= {f"ecc_{name}": value for name, value in gpu.ecc.items()}
        for name, value in plain.items():
            if value is not None:
                out[(device, "", name)] = value
        for link, counters in gpu.nvlink_errors.items():
            for name, value in counters.items():
                out[(device, link, f"nvlink_{name}")] = value
    for port in snapshot.ports:
        for name in RDMA_ERROR_COUNTERS:
            if name in port.counters:
                out[(port.name, "", name)] = port.counters[name]
    return out


def _node_snapshots(
    run: Run,
) -> list[tuple[str, str, HealthSnapshot | None, HealthSnapshot | None]]:
    """(host, node, before, after) of every node whose snapshots the record holds."""
    health = run.context.health
    if health is None:
        return []
    own = health.after or health.before
    host = (own.host if own is not None else None) or run.context.host or ""
    nodes = [(host, str(health.node or 0), health.before, health.after)]
    for n in health.nodes:
        snap = n.after or n.before
        other = n.host or (snap.host if snap is not None else None) or ""
        nodes.append((other, str(n.node), n.before, n.after))
    return nodes


def health_families(run: Run) -> list[Family]:
    labels = run_labels(run)
    value = Family(
        "commbench_health_errors",
        "gauge",
        "A link-health error counter (PCIe replays, NVLink errors, ECC errors, retired or "
        "remapped memory, RDMA port errors) as the snapshot before or after the run read it.",
    )
    increase = Family(
        "commbench_health_errors_increase",
        "gauge",
        "How much a link-health error counter rose during the run (negative: it was reset).",
    )
    for host, node, before, after in _node_snapshots(run):
        read = {
            name: health_counters(snap)
            for name, snap in (("before", before), ("after", after))
            if snap is not None
        }
        for snapshot, counters in read.items():
            for (device, link, counter), count in counters.items():
                where = {**labels, "host": host, "node": node, "device": device, "link": link}
                value.add({**where, "counter": counter, "snapshot": snapshot}, count)
        if "before" in read and "after" in read:
            for key, count in read["after"].items():
                if key in read["before"]:
                    device, link, counter = key
                    where = {**labels, "host": host, "node": node, "device": device, "link": link}
                    increase.add({**where, "counter": counter}, count - read["before"][key])
    findings = Family(
        "commbench_health_findings",
        "gauge",
        "Link-health findings of the run by kind (a link below its maximum, a counter that "
        "moved, throttling, ECC, retired memory).",
    )
    if run.context.health is not None:
        found = [f.kind for f in run.health_findings()]
        for kind in FindingKind:
            findings.add({**labels, "kind": kind.value}, found.count(kind))
    return [value, increase, findings]


# -- verdicts (the callers hold the records: diagnose and compare sit above this package) -------


class NodeVerdictLike(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def node(self) -> int: ...
    @property
    def verdict(self) -> str: ...


def diagnose_families(
    run: Run, verdict: str, nodes: Iterable[NodeVerdictLike], verdicts: Sequence[str]
) -> list[Family]:
    """A diagnose run's verdict and each node's, one series per possible verdict."""
    labels = run_labels(run)
    overall = Family(
        "commbench_diagnose_verdict",
        "gauge",
        "1 for the diagnosis' verdict (healthy, degraded, failed), 0 for the others.",
    )
    for state in verdicts:
        overall.add({**labels, "verdict": state}, verdict == state)
    per_node = Family(
        "commbench_diagnose_node_verdict",
        "gauge",
        "1 for each node's verdict (healthy, degraded, failed), 0 for the others.",
    )
    for n in nodes:
        for state in verdicts:
            node = {**labels, "host": n.host, "node": str(n.node), "verdict": state}
            per_node.add(node, n.verdict == state)
    return [overall, per_node]


class JudgedPoint(PointKey, Protocol):
    """A point the regression gate judged (`compare.PointResult`)."""

    @property
    def mark(self) -> Enum: ...
    @property
    def ratio(self) -> float | None: ...


def compare_families(
    run: Run,
    baseline_id: str,
    points: Iterable[JudgedPoint],
    passed: bool,
    marks: Sequence[str],
) -> list[Family]:
    """The regression gate against a baseline: each point's mark and speed ratio, and
    whether the gate passed."""
    labels = {**run_labels(run), "baseline_run_id": baseline_id}
    verdict = Family(
        "commbench_compare_point_verdict",
        "gauge",
        "1 for the regression gate's mark of each point against the baseline (better, "
        "worse, same, noisy, missing, new), 0 for the others.",
    )
    ratio = Family(
        "commbench_compare_speed_ratio",
        "gauge",
        "New speed / baseline speed of each point (0.8: 20% slower).",
    )
    for point in points:
        where = point_labels(labels, point)
        mark = str(point.mark.value)
        for state in marks:
            verdict.add({**where, "verdict": state}, mark == state)
        if point.ratio is not None:
            ratio.add(where, point.ratio)
    gate = Family(
        "commbench_compare_passed",
        "gauge",
        "1 when the regression gate passed against the baseline, 0 when it failed.",
    )
    gate.add(labels, passed)
    return [gate, verdict, ratio]


__all__ = [
    "CONTENT_TYPES",
    "Dialect",
    "Family",
    "JudgedPoint",
    "NodeVerdictLike",
    "Sample",
    "compare_families",
    "diagnose_families",
    "escape_label",
    "health_counters",
    "health_families",
    "point_families",
    "render",
    "run_families",
]
