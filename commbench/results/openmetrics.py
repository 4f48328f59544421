"""A stored run as metrics: the OpenMetrics text format (1.0.0) and Prometheus' text
exposition format (0.0.4), for a node_exporter textfile collector, a Pushgateway or any
scraper.

What is exported:

- the run's identity: `commbench_run_info` (1, labelled with its `run_id`, host and hosts,
  start time, commit and versions), `commbench_run_status` (one series per status, 1 for the
  run's) and `commbench_run_timestamp_seconds` (when it started);
- per measured point (labels `op`, `strategy`, `dtype`, `reduce_op`, `in_place`,
  `world_size`, `size_bytes`; a p2p copy adds its `step`): `commbench_algbw_bytes_per_second`,
  `commbench_busbw_bytes_per_second` (gauges) and `commbench_time_seconds` (a summary: the
  quantiles 0, 0.25, 0.5, 0.75, 0.95 and 1 of the iteration times, their `_sum` and `_count`);
- link health (`context.health`): each error counter in each snapshot
  (`commbench_health_errors`, `snapshot="before"|"after"`), how much it rose during the run
  (`commbench_health_errors_increase`) and the findings by kind (`commbench_health_findings`);
- a diagnose run's verdicts (`commbench_diagnose_verdict`, `commbench_diagnose_node_verdict`)
  and the regression gate's against a baseline (`commbench_compare_point_verdict`,
  `commbench_compare_speed_ratio`, `commbench_compare_passed`, and the baseline's identity in
  `commbench_compare_baseline_info`), given by the caller through the protocols below: this
  package sits below `diagnose` and `compare`.

Why no run id on the measures: every label value makes a series of its own, and Prometheus
keeps each series it ever saw. A run id on every sample made each run a new set of series
(an unbounded label, which Prometheus' naming guide warns against), so that a node exporting
hourly added its whole sweep to the database every hour. Every sample carries the run's
`kind` and `backend` instead, and the other labels name things with a bounded set of values
(an op, a size, a dtype, a GPU); the next run's export gives the same series new values. What
tells one run from another is in the one info series (the convention of `node_uname_info`),
which a query joins in: `... * on() group_left(run_id) commbench_run_info`
(docs/metrics.md).

Why every metric is a gauge or a summary: those two types read the same in both formats.
A counter is named `x` in an OpenMetrics TYPE line and `x_total` in a Prometheus one, and
OpenMetrics' stateset and info types do not exist in Prometheus 0.0.4, so a file in one
format would not parse as the other (promtool and node_exporter's textfile collector read
the Prometheus format). A state is a gauge per state, 1 for the one that holds (the
convention before statesets); the info series is a gauge of 1. The hardware counters are
gauges of what a snapshot read; their increase during the run is the figure to alert on.
promtool lints a name holding a type's name (`counter`), hence `_errors`.

Units are Prometheus' base units (seconds, bytes per second), named in the metric. Every
string written into the text goes through `escape`, which escapes what the formats can
escape and refuses what they cannot hold; no two samples of a family share a label set (the
first of two rows with one key wins, as the gate joins them). No timestamps: the textfile
collector refuses them, and the scraper stamps each sample with its scrape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from commbench.errors import UserError, quoted
from commbench.health.findings import RDMA_ERROR_COUNTERS, FindingKind
from commbench.results.record import RunStatus
from commbench.results.schema import Keyed

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

    @classmethod
    def gauge(cls, name: str, help: str, unit: str = "") -> Family:
        """A gauge: every metric but the iteration times is one (module docstring)."""
        return cls(name, "gauge", help, unit)

    def add(self, labels: Mapping[str, str] | Labels, value: float, suffix: str = "") -> None:
        """One sample; a second one with the same labels (and suffix) is dropped."""
        items = tuple(labels.items()) if isinstance(labels, Mapping) else labels
        if (suffix, items) in self._seen:
            return
        self._seen.add((suffix, items))
        self.samples.append(Sample(items, value, suffix))

    def add_states(
        self, labels: Mapping[str, str], label: str, states: Iterable[str], current: str
    ) -> None:
        """A state as gauges (module docstring): one sample per state under `label`, 1 for
        `current` and 0 for the others."""
        for state in states:
            self.add({**labels, label: state}, state == current)


# -- the text ----------------------------------------------------------------------------------


_REFUSED = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""What `escape` refuses: a control character but the line feed it escapes (C0, DEL, C1), a
line or paragraph separator, a lone surrogate."""
_LINE_BREAKS = frozenset("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
"""The line breaks of Python's `str.splitlines` besides the line feed."""


def escape(text: str, where: str, *, quotes: bool) -> str:
    """`text` as the text formats write a label value (`quotes`) or HELP text (`quotes` in
    OpenMetrics only): the one place a string enters the file.

    The formats escape three characters: backslash, line feed, and (in a label value, or in
    OpenMetrics' HELP text) the double quote. They have no escape for any other character, so
    a character that some reader of the file takes for a line break (a carriage return, NEL,
    U+2028, U+2029: Prometheus and the textfile collector do not, Python's text mode and
    `splitlines` do), any other control character (a terminal that shows the file obeys it),
    or a lone surrogate (not UTF-8, and one bad label value makes the textfile collector drop
    the whole file) is refused with a `UserError` naming `where`, never written, dropped or
    replaced: a value that is written reads back as it is."""
    bad = _REFUSED.search(text)
    if bad is not None:
        char = bad.group()
        if char in _LINE_BREAKS:
            what = "a line break to some readers"
        elif "\ud800" <= char <= "\udfff":
            what = "a lone surrogate, which UTF-8 cannot encode"
        else:
            what = "a control character"
        raise UserError(
            f"{where}: {quoted(text)} holds U+{ord(char):04X}, {what}, which the metrics "
            "text formats cannot escape"
        )
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quotes else text


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
    lines first; OpenMetrics ends with `# EOF`. A string the formats cannot hold raises
    `UserError` (`escape`)."""
    dialect = Dialect(dialect)
    om = dialect is Dialect.openmetrics
    out: list[str] = []
    for family in families:
        if not family.samples:
            continue
        name = family.name
        out.append(f"# HELP {name} {escape(family.help, f'HELP of {name}', quotes=om)}")
        out.append(f"# TYPE {name} {family.type}")
        if family.unit and om:
            out.append(f"# UNIT {name} {family.unit}")
        for s in family.samples:
            labels = ",".join(
                f'{k}="{escape(v, f"label {k} of {name}", quotes=True)}"' for k, v in s.labels
            )
            out.append(f"{name}{s.suffix}{{{labels}}} {format_value(s.value)}")
    if om:
        out.append("# EOF")
    return "".join(line + "\n" for line in out)


# -- what a run holds --------------------------------------------------------------------------


def run_labels(run: Run) -> dict[str, str]:
    """The labels of every sample of `run`: its kind and backend. Both take a few values
    only, and they tell apart runs exported side by side (a collectives run's and a replay's
    all_reduce, gloo's and nccl's), which would otherwise be one series twice."""
    return {"kind": run.kind.value, "backend": run.context.backend or ""}


def run_identity(run: Run) -> dict[str, str]:
    """What tells `run` from every other run (`commbench_run_info`'s labels besides
    `run_labels`): its id (the directory's name when run.json has none), host and hosts,
    start time, the commit it ran at and the versions it ran with; '' for what the record does
    not hold (Prometheus reads an empty label as no label)."""
    ctx = run.context
    hosts = ctx.hosts or ([ctx.host] if ctx.host else [])
    return {
        "run_id": run.record.run_id or run.path.name,
        "host": ctx.host or "",
        "hosts": ",".join(hosts),
        "started_at": ctx.started_at or "",
        "commit": ctx.cwd_git_commit or "",
        "commbench_version": ctx.commbench or "",
        "torch_version": ctx.torch or "",
        "cuda_version": ctx.cuda or "",
        "nccl_version": ctx.nccl or "",
        "driver_version": ctx.driver or "",
    }


def point_labels(run: Mapping[str, str], point: Keyed) -> dict[str, str]:
    """A point's labels: what keys it (`ResultRow.key`), `skew` only on the points of an op
    that takes one (all_to_allv), so every other series keeps the labels it always had."""
    op, strategy, dtype, reduce_op, world_size, size_bytes, in_place, skew = point.key
    labels = {
        **run,
        "op": op,
        "strategy": strategy,
        "dtype": dtype,
        "reduce_op": reduce_op,
        "in_place": "true" if in_place else "false",
        "world_size": str(world_size),
        "size_bytes": str(size_bytes),
    }
    if skew:
        labels["skew"] = skew
    return labels


def _row_labels(run: Mapping[str, str], row: ResultRow) -> dict[str, str]:
    labels = point_labels(run, row)
    if row.p2p is not None:  # a copy's name may repeat across the steps of a p2p run
        labels["step"] = str(row.p2p.step)
    return labels


def run_families(run: Run) -> list[Family]:
    labels = run_labels(run)
    info = Family.gauge(
        "commbench_run_info",
        "1, labelled with what identifies the run the other series come from (run_id, "
        "hosts, start time, commit, versions): join it in with "
        "`* on() group_left(run_id) commbench_run_info`.",
    )
    info.add({**labels, **run_identity(run)}, 1)
    status = Family.gauge(
        "commbench_run_status",
        "1 for the run's status (as commbench judges it: a wrong result is failed), 0 for "
        "the others.",
    )
    # pending and skipped are a suite entry's states, not a run's (unless it holds one)
    suite_only = {RunStatus.PENDING, RunStatus.SKIPPED} - {run.status}
    states = [state.value for state in RunStatus if state not in suite_only]
    status.add_states(labels, "status", states, run.status.value)
    started = Family.gauge(
        "commbench_run_timestamp_seconds",
        "When the run started, seconds since the Unix epoch.",
        unit="seconds",
    )
    when = _timestamp(run.context.started_at)
    if when is not None:
        started.add(labels, when)
    return [info, status, started]


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
    algbw = Family.gauge(
        "commbench_algbw_bytes_per_second",
        "Algorithm bandwidth at the median time: bytes per rank / time.",
        unit="bytes_per_second",
    )
    busbw = Family.gauge(
        "commbench_busbw_bytes_per_second",
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
    value = Family.gauge(
        "commbench_health_errors",
        "A link-health error counter (PCIe replays, NVLink errors, ECC errors, retired or "
        "remapped memory, RDMA port errors) as the snapshot before or after the run read it.",
    )
    increase = Family.gauge(
        "commbench_health_errors_increase",
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
    findings = Family.gauge(
        "commbench_health_findings",
        "Link-health findings of the run by kind (a link below its maximum, a counter that "
        "moved, throttling, ECC, retired memory).",
    )
    if run.context.health is not None:
        found = [f.kind for f in run.health_findings()]
        for kind in FindingKind:
            findings.add({**labels, "finding": kind.value}, found.count(kind))
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
    overall = Family.gauge(
        "commbench_diagnose_verdict",
        "1 for the diagnosis' verdict (healthy, degraded, failed), 0 for the others.",
    )
    overall.add_states(labels, "verdict", verdicts, verdict)
    per_node = Family.gauge(
        "commbench_diagnose_node_verdict",
        "1 for each node's verdict (healthy, degraded, failed), 0 for the others.",
    )
    for n in nodes:
        per_node.add_states(
            {**labels, "host": n.host, "node": str(n.node)}, "verdict", verdicts, n.verdict
        )
    return [overall, per_node]


class JudgedPoint(Keyed, Protocol):
    """A point the regression gate judged (`compare.PointResult`)."""

    @property
    def mark(self) -> Enum: ...
    @property
    def ratio(self) -> float | None: ...


def compare_families(
    run: Run,
    baseline: Run,
    points: Iterable[JudgedPoint],
    passed: bool,
    marks: Sequence[str],
) -> list[Family]:
    """The regression gate against a baseline: each point's mark and speed ratio, whether
    the gate passed, and which run the baseline was (an info series, as the run's own)."""
    labels = run_labels(run)
    which = Family.gauge(
        "commbench_compare_baseline_info",
        "1, labelled with what identifies the baseline the regression gate compared the run "
        "with (baseline_run_id, ...).",
    )
    which.add({**labels, **{f"baseline_{k}": v for k, v in run_identity(baseline).items()}}, 1)
    verdict = Family.gauge(
        "commbench_compare_point_verdict",
        "1 for the regression gate's mark of each point against the baseline (better, "
        "worse, same, noisy, missing, new), 0 for the others.",
    )
    ratio = Family.gauge(
        "commbench_compare_speed_ratio",
        "New speed / baseline speed of each point (0.8: 20% slower).",
    )
    for point in points:
        where = point_labels(labels, point)
        verdict.add_states(where, "verdict", marks, str(point.mark.value))
        if point.ratio is not None:
            ratio.add(where, point.ratio)
    gate = Family.gauge(
        "commbench_compare_passed",
        "1 when the regression gate passed against the baseline, 0 when it failed.",
    )
    gate.add(labels, passed)
    return [which, gate, verdict, ratio]


__all__ = [
    "CONTENT_TYPES",
    "Dialect",
    "Family",
    "JudgedPoint",
    "NodeVerdictLike",
    "Sample",
    "compare_families",
    "diagnose_families",
    "escape",
    "health_counters",
    "health_families",
    "point_families",
    "render",
    "run_families",
    "run_identity",
    "run_labels",
]
