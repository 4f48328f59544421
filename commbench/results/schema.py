"""The result schema: one row per measured point, whatever measured it.

A `ResultRow` is one (op, strategy, dtype, size) point of a collectives run, a line of an
imported nccl-tests log, or one copy of a p2p run. Its summary is a `Stats` (microseconds)
next to the samples it summarises; a p2p copy adds a `P2PCopy` sub-record (which copy, how
it ran, what it should reach and the verdict), a collectives point a `RankTimes` (each member
rank's own times and how long the others waited for it). This module is the one place that
reads and writes a row: `ResultRow.to_dict`/`from_dict` for results.json, each field read by
its converter (`FIELD_READERS`) and checked with the others (`check_row`); `results.versions`
reads a whole results.json of any version (version 1 is migrated on load), `results.csv_rows`
writes results.csv.

Files written by commbench carry `schema_version`. Readers accept the versions they can
migrate and refuse newer ones with a message, so an old commbench never misreads a new run.
Version 2 nests the stats (`"stats": {"median": ...}`) and the p2p fields (`"p2p": {...}`);
version 1 had them flat, and p2p rows of their own in milliseconds. A version-2 collectives
row may hold `"ranks": {...}` (`RankTimes`); rows written before it was added, p2p rows and
most imported rows have none, which is why it is optional rather than a new version. A row
imported from nccl-tests' `-I` JSON may hold `"processes": {...}` (`ProcessTimes`), optional
for the same reason.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import MISSING as dataclasses_missing
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, cast

from commbench.errors import UserError, quoted
from commbench.fields import (
    Conv,
    Fields,
    boolean,
    integer_in,
    line,
    list_of,
    number_in,
    one_of,
    text,
)
from commbench.numbers import MAX_ITERATIONS
from commbench.ops import OPS
from commbench.results.names import DTYPES, OP_NAMES, REDUCE_OPS, STRATEGY_NAMES
from commbench.stats import TIMES, Stats

SCHEMA_VERSION = 2
"""Of run.json, suite.json and results.json; version 1 is migrated on load (run.json and
suite.json by `results.record`, results.json by `versions.rows_from_stored`)."""

# What a stored row may hold: bounds past anything measured, so that a hand-edited or hostile
# file (`size_bytes: 10**30`, `world_size: 0`, a negative time) is refused naming the field
# instead of drawing, gating or exporting nonsense.
MAX_WORLD_SIZE = 1 << 20
"""Ranks in one run: the largest clusters have about 10**5 GPUs."""
MAX_SIZE_BYTES = 1 << 50
"""Bytes per message: no device holds a 1 PiB buffer."""
MAX_TIME_US = 1e15
"""Microseconds: about 30 years."""
MAX_GBPS = 1e9
"""GB/s: 10**6 times any link's peak; a suspicious p2p figure is still kept below this."""
MAX_COUNT = 1 << 50
"""Iterations, outliers, elements."""
MAX_GPU = 1 << 16
"""A GPU's index (CUDA ordinal) in a p2p row."""
MAX_ISSUE_RATE = 1e12
"""Ops per second a host issues: 10**4 times a bare Python loop's."""

CHECK_OK = "ok"
CHECK_FAILED = "failed"
CHECK_SKIPPED = "skipped"  # --no-check, or an op that cannot run here (sendrecv at n=1)
CHECK_NA = "n/a"  # nothing to check (barrier)

STRAGGLER_MIN_SHARE = 0.05
"""A rank is named as the one the others waited for (`RankTimes.straggler`) only when its
wait exceeds every other rank's by at least this share of the point's median iteration time.
Not its wait alone: on a shared machine every rank arrives last now and then, so every rank
shows some slack from scheduling noise alone (on a 2-core CPU run, 5-30% of the iteration at
every point); a rank that makes the others wait stands out from them."""
STRAGGLER_MIN_US = 1.0
"""... and by at least this long: below a microsecond the clocks cannot tell who waited."""

P2P_OP = "p2p"
"""The op of a p2p copy's row; the copy's name (`0->1 p2p uni sequential`) is its strategy."""

# What a stored row's names may be: the registries the command line takes (`--ops`,
# `--strategies`, `--dtype`, `--reduce-op`), and what the other producers write (p2p's rows,
# the nccl-tests import). A name outside them is a file someone edited: a check of "maybe"
# would pass the regression gate, an op holding a newline would add lines to a report.
IMPORTED_OPS = ("hypercube",)
"""nccl-tests' ops that commbench does not measure itself; an imported log keeps them."""
IMPORTED_DTYPES = ("uint32", "uint64", "f8e4m3", "f8e5m2")
"""nccl-tests' types that commbench does not measure itself (`importers.nccl_tests.DTYPES`
names the others as commbench does)."""
IMPORTED_REDUCE_OPS = ("mulsum", "premulsum")
"""nccl-tests' reduce ops that commbench does not measure itself."""
ROW_OPS = (*OP_NAMES, P2P_OP, *IMPORTED_OPS)
ROW_DTYPES = (*DTYPES, *IMPORTED_DTYPES)
NO_DTYPE = ""
"""The dtype of a row whose op carries no data (a replayed barrier: its trace records none),
as `reduce_op` is '' for an op that does not reduce; only such an op's row may have it."""
ROW_REDUCE_OPS = ("", *REDUCE_OPS, *IMPORTED_REDUCE_OPS)
"""'': an op that does not reduce."""
ROW_POINT = ("op", "strategy", "dtype", "reduce_op", "world_size", "size_bytes")
"""What a row measured: the first columns of every table of rows (results.csv, the gate's)."""
ROW_KEY = (*ROW_POINT, "in_place", "skew")
"""`ResultRow.key`'s fields, in its order."""
ROW_SERIES = ("op", "strategy", "dtype", "reduce_op", "world_size", "in_place", "skew")
"""A row's series, one line of a plot: its key but the size (`results.summary.series_key`)."""
RowKey = tuple[str, str, str, str, int, int, bool, str]
"""`ResultRow.key`: (op, strategy, dtype, reduce_op, world_size, size_bytes, in_place, skew)."""
ROW_STRATEGIES = ("", *STRATEGY_NAMES)
"""'': the op itself; a p2p row's strategy is its copy's name (`P2PCopy.name`)."""
CHECKS = (CHECK_OK, CHECK_FAILED, CHECK_SKIPPED, CHECK_NA)
MOVES_NOTHING = tuple(op for op, spec in OPS.items() if spec.latency_only)
"""Ops whose rows have 0 bytes (`OpSpec.latency_only`); every other row moves 1 byte or more."""
SKEWED_OPS = tuple(op for op, spec in OPS.items() if spec.skewed)
"""Ops whose rows name their skew (`OpSpec.skewed`); no other row does."""


class Keyed(Protocol):
    """What names a measured point: a result row, or a record about one (`KeyedPoint`: a
    point the regression gate judged, a series of the history)."""

    @property
    def key(self) -> RowKey: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyedPoint:
    """A record about one point, named by its key (`ROW_KEY`): a point the gate judged
    (`compare.PointResult`), a point's series in the history (`history.Series`). Each names
    its `skew` itself, where its columns have it (a comparison's after the verdict)."""

    op: str
    strategy: str
    dtype: str
    reduce_op: str
    world_size: int
    size_bytes: int
    in_place: bool

    @property
    def key(self) -> RowKey:
        """Its `ResultRow.key`."""
        return cast(RowKey, tuple(getattr(self, name) for name in ROW_KEY))


# A p2p copy's words (`P2PCopy`), as `commbench.p2p` writes them.
P2P_TESTS = ("bandwidth", "latency")
P2P_MODES = ("concurrent", "sequential")
P2P_DIRECTIONS = ("uni", "bi")
P2P_COPIES = ("p2p", "d2d", "h2d", "d2h", "total")
P2P_PATHS = ("nvlink", "pcie", "staged", "host", "local", "total", "unknown")


@dataclass(kw_only=True, slots=True)
class P2PCopy:
    """What a p2p copy's row adds: which copy it timed, how, and what it should have reached.

    The row's `busbw_gbps` (= `algbw_gbps`) is the copy's bandwidth at the median time, GB/s
    (1e9 B/s), a total summing the bytes of its copies; None for latency rows, as are the
    peak, ceiling, expected and efficiency figures here."""

    step: int = 0
    """Index of the measurement (0, 1, ...): rows of one step were timed together."""
    test: str = ""
    """`bandwidth`, or `latency` (small copies: read the time, not the bandwidth)."""
    mode: str = ""
    """`concurrent` (timed while the step's other copies ran) or `sequential` (alone)."""
    direction: str = ""
    """`uni`, or `bi` when the pair was copied both ways at once."""
    copy: str = ""
    """`p2p`, `d2d` (within one GPU), `h2d`, `d2h`, or `total` (the step's copies together)."""
    src: int | None = None
    """Source GPU (CUDA ordinal); None for pinned host memory, or a total over several sources."""
    dst: int | None = None
    """Destination GPU; None for pinned host memory, or for a total."""
    pair: str = ""
    """`0->1`, `host->0`, `0->host`, `0->0`; a total: `0->{1,2,4}` or `0<->1`."""
    peak_gbps: float | None = None
    """Theoretical peak of the copy alone (a total: the sum of its copies' peaks)."""
    ceiling_gbps: float | None = None
    """Theoretical GB/s in this step, after sharing with the copies that ran at once."""
    expected_gbps: float | None = None
    """What such a copy typically reaches in this step (`commbench.p2p.expect`)."""
    efficiency: float | None = None
    """bandwidth / peak_gbps."""
    link: str = ""
    """nvidia-smi label of the pair (`NV2`, `PIX`, `SYS`, ...), `PCIe` for host copies,
    `local` within one GPU."""
    nvlinks: int = 0
    peer_access: bool | None = None
    """Whether the pair supports P2P (None: unknown, or not a GPU pair); results.csv's `p2p`."""
    path: str = ""
    """`nvlink`, `pcie`, `staged` (no P2P: through host memory), `host`, `local`, `total`."""
    suspicious: bool = False
    """Faster than the theoretical peak: the number cannot be right as it stands."""
    diagnosis: str = ""
    """One line: the verdict on the measurement, then the topology's explanation."""

    @property
    def name(self) -> str:
        """The copy as a point's strategy: `0->1 p2p uni sequential`, `... latency`."""
        name = " ".join(v for v in (self.pair, self.copy, self.direction, self.mode) if v)
        return name + " latency" if self.test == "latency" else name

    @property
    def label(self) -> str:
        """The copy in a warning or failure: `0->1 (sequential)`."""
        return f"{self.pair} ({self.mode})"

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in P2P_NAMES}


@dataclass(frozen=True, slots=True)
class Straggler:
    """The rank the others waited for at one point (`ResultRow.straggler`)."""

    rank: int
    """Its global rank."""
    wait_us: float
    """About how long the others waited for it per iteration (its median slack)."""
    share: float
    """wait_us / the point's median iteration time (`ResultRow.time_us`)."""


@dataclass(kw_only=True, slots=True)
class RankTimes:
    """Each member rank's own times at one collectives point, in group order.

    The row's `samples_us` are the maximum over ranks of each iteration, which is what the op
    costs the job, and says nothing about which rank it cost. A synchronising collective ends
    on every rank about when the last rank arrives, so the rank that arrives last spends the
    least time inside the call: its slack, (maximum over ranks) - (its own time) of an
    iteration, is about how long the others waited for it. The rank with the largest median
    slack is the one the others waited for (`straggler`). The lists are parallel, one item per
    rank of `ranks`; ranks outside a `--ranks` subgroup have no entry."""

    ranks: list[int]
    """Global ranks of the group's members, in group order (ascending: new_group sorts)."""
    median_us: list[float]
    """Each rank's median of its own per-iteration times, microseconds."""
    p95_us: list[float]
    """Each rank's 95th percentile of its own per-iteration times."""
    wait_us: list[float]
    """Each rank's median slack over the iterations (>= 0): how long the others waited for it."""

    def __post_init__(self) -> None:
        sizes = {len(self.ranks), len(self.median_us), len(self.p95_us), len(self.wait_us)}
        if len(sizes) != 1:
            raise ValueError("RankTimes: ranks, median_us, p95_us and wait_us differ in length")
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"RankTimes: a rank is listed twice in {self.ranks}")

    def straggler(self, time_us: float) -> Straggler | None:
        """The rank the others waited for, given the point's median iteration time: the one
        with the largest wait, when that exceeds every other rank's by a meaningful time
        (`STRAGGLER_MIN_SHARE` of `time_us`, and `STRAGGLER_MIN_US`); else None, two ranks
        equally late included (no one rank held the others up)."""
        if not self.ranks or not time_us > 0:  # NaN or 0: no iteration to share
            return None
        wait, *others = sorted(self.wait_us, reverse=True)
        runner_up = others[0] if others else 0.0
        if wait - runner_up < max(STRAGGLER_MIN_US, STRAGGLER_MIN_SHARE * time_us):
            return None
        rank = self.ranks[self.wait_us.index(wait)]
        return Straggler(rank=rank, wait_us=wait, share=wait / time_us)

    def to_dict(self) -> dict[str, Any]:
        return {name: list(getattr(self, name)) for name in _RANKS_NAMES}


@dataclass(frozen=True, slots=True)
class SlowProcess:
    """The process slower than every other at one point (`ProcessTimes.slowest`)."""

    rank: int
    """The first global rank of the process (`ProcessTimes.ranks`)."""
    median_us: float
    """Its median time per iteration."""
    excess_us: float
    """Its median minus the next slowest process's."""
    share: float
    """excess_us / the point's median iteration time (`ResultRow.time_us`)."""


@dataclass(kw_only=True, slots=True)
class ProcessTimes:
    """nccl-tests' per-process times at one point (`-I 1`, its JSON `per_process_max_times_us`).

    Each MPI process of an nccl-tests run times every iteration on each of its GPUs with CUDA
    events and keeps, per iteration, the maximum over its GPUs; the row's `samples_us` are the
    maximum of these over the processes. A process is named by its first global rank
    (nccl-tests' `proc * nThreads * nGpus`); it holds `ranks_per_process` consecutive ranks.
    nccl-tests' own analyzer (`tools/analyze_perf_json.py`) calls the process with the largest
    times the slowest (`slowest`)."""

    ranks: list[int]
    """Each process's first global rank, in process order."""
    ranks_per_process: int = 1
    """Ranks (GPUs) each process drives (nThreads x nGpus): a time is the maximum over them."""
    times_us: list[list[float]]
    """Per process (parallel to `ranks`), its time of each iteration, microseconds."""

    def __post_init__(self) -> None:
        if len(self.ranks) != len(self.times_us):
            raise ValueError("ProcessTimes: ranks and times_us differ in length")
        if len({len(t) for t in self.times_us}) > 1:
            raise ValueError("ProcessTimes: the processes hold different numbers of iterations")
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"ProcessTimes: a rank is listed twice in {self.ranks}")

    @property
    def medians_us(self) -> list[float]:
        """Each process's median time per iteration (NaN for a process without one)."""
        return [statistics.median(t) if t else math.nan for t in self.times_us]

    def slowest(self, time_us: float) -> SlowProcess | None:
        """The process whose median time exceeds every other's by a meaningful time (the
        thresholds of `RankTimes.straggler`: `STRAGGLER_MIN_SHARE` of `time_us`, and
        `STRAGGLER_MIN_US`); None with fewer than two processes, or two equally slow."""
        medians = self.medians_us
        if len(medians) < 2 or not time_us > 0 or any(math.isnan(m) for m in medians):
            return None
        top, runner_up = sorted(medians, reverse=True)[:2]
        if top - runner_up < max(STRAGGLER_MIN_US, STRAGGLER_MIN_SHARE * time_us):
            return None
        rank = self.ranks[medians.index(top)]
        return SlowProcess(
            rank=rank, median_us=top, excess_us=top - runner_up, share=(top - runner_up) / time_us
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": list(self.ranks),
            "ranks_per_process": self.ranks_per_process,
            "times_us": [list(t) for t in self.times_us],
        }


@dataclass(kw_only=True, slots=True)
class ResultRow:
    """One measured point: its identity, bandwidth, check, `stats` (microseconds) and the
    `samples_us` they summarise. `time_us` (the median) is the headline number."""

    op: str
    strategy: str = ""
    """All-reduce strategy name ('' for plain ops); a p2p copy's name (`P2PCopy.name`)."""
    dtype: str
    reduce_op: str = ""
    """'' for ops that do not reduce."""
    world_size: int
    """Ranks taking part in the op (the subgroup's size with --ranks); GPUs seen by a p2p run."""
    size_bytes: int
    """S as nccl-tests defines it, after rounding (see `note`); bytes per copy for p2p."""
    count: int
    """Elements in S."""
    algbw_gbps: float | None
    busbw_gbps: float | None
    check: str
    stats: Stats = field(default_factory=Stats)
    """Summary of `samples_us`; all NaN (n = 0) for a point that could not run."""
    warmup: int = 0
    in_place: bool = False
    requested_bytes: int = 0
    note: str = ""
    samples_us: list[float] = field(default_factory=list)
    """Per-iteration time, maximum over ranks, in microseconds."""
    p2p: P2PCopy | None = None
    """The p2p copy this row measured; None for every other run kind."""
    ranks: RankTimes | None = None
    """Each member rank's own times at a collectives point; None for other run kinds, points
    that did not run, and rows stored before commbench kept them."""
    processes: ProcessTimes | None = None
    """nccl-tests' per-process times (an import of its `-I` JSON); None for every other row."""
    calls: int | None = None
    """A replay's row: the recorded calls of this (op, size, dtype, group) over the replayed
    steps, so calls x size_bytes is the recorded traffic; None for every other row (and not
    written then)."""
    skew: str = ""
    """The splits of an op that takes a skew (all_to_allv), as `commbench.skew.Skew.label`
    names them (`uniform`, `zipf:1.2 seed=0`); '' for every other row (and not written then).
    Part of the key: the gate never pairs points of two skews."""
    skew_ratio: float | None = None
    """The busiest rank's bytes (sent or received) over the mean, S: algbw is S x this over
    the time. None where every rank moves S (and not written then)."""
    issue_ops_per_s: float | None = None
    """Ops per second the slowest rank's host issued in the timed loop (`timing.Timed`): what
    an eager training loop sees where the host, not the device, sets the pace (small ops on a
    GPU, whose samples are the device's time). None for rows stored before commbench kept
    it, imports and p2p rows (and not written then)."""

    @property
    def time_us(self) -> float:
        """The median time, microseconds (NaN when the point has none)."""
        return self.stats.median

    def sample_median_us(self) -> float:
        """The median of `samples_us` where the row holds them, else the stats' median: what
        the gate and the history judge a point by. The samples decide: a stats block that
        disagrees with them (edited, or written by another tool) never does."""
        if not self.samples_us:
            return self.stats.median
        return statistics.median(self.samples_us)

    def sample_busbw_gbps(self) -> float | None:
        """`busbw_gbps` at `sample_median_us` (busbw is inversely proportional to the
        time); None where the row has no busbw."""
        busbw, stored, median = self.busbw_gbps, self.stats.median, self.sample_median_us()
        if busbw is None or not math.isfinite(busbw):
            return None
        if not self.samples_us or stored == median or not (median > 0 and stored > 0):
            return busbw
        return busbw * stored / median

    @property
    def straggler(self) -> Straggler | None:
        """The rank the others waited for at this point (`RankTimes.straggler`); None
        without per-rank times or without a meaningful wait."""
        return None if self.ranks is None else self.ranks.straggler(self.time_us)

    @property
    def slow_process(self) -> SlowProcess | None:
        """The process slower than every other at this point (`ProcessTimes.slowest`); None
        without per-process times (every row but an nccl-tests import's) or a clear one."""
        return None if self.processes is None else self.processes.slowest(self.time_us)

    @property
    def key(self) -> RowKey:
        """What identifies a point across runs (the regression gate joins on it): in-place
        too, since a run of `--in-place both` (or an imported nccl-tests log) holds both, and
        the skew (a row stored without one, every op's but all_to_allv's, has '')."""
        return (
            self.op,
            self.strategy,
            self.dtype,
            self.reduce_op,
            self.world_size,
            self.size_bytes,
            self.in_place,
            self.skew,
        )

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        """results.json's (version 2) form of the row; NaN stays NaN (`dump_json` writes null)."""
        # not dataclasses.asdict: it deep-copies every value, the bulk of writing 10**5 rows
        data = {name: getattr(self, name) for name in TOP_NAMES}
        data["stats"] = self.stats.as_dict()
        if samples:
            data["samples_us"] = list(self.samples_us)
        if self.p2p is not None:
            data["p2p"] = self.p2p.to_dict()
        if self.ranks is not None:
            data["ranks"] = self.ranks.to_dict()
        if self.processes is not None and samples:
            data["processes"] = self.processes.to_dict()
        if self.calls is not None:
            data["calls"] = self.calls
        if self.skew:
            data["skew"] = self.skew
        if self.skew_ratio is not None:
            data["skew_ratio"] = self.skew_ratio
        if self.issue_ops_per_s is not None:
            data["issue_ops_per_s"] = self.issue_ops_per_s
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "row") -> ResultRow:
        """Rebuild a row from results.json (version 2); a field missing, of the wrong type or
        out of bounds is a UserError naming `where` and the field."""
        f = Fields(data, where)
        kwargs = read_fields(f, FIELD_READERS, REQUIRED)
        stats = f.sub("stats")
        if stats is None:
            raise UserError(f"{f.at('stats')}: missing")
        kwargs["stats"] = Stats(**read_fields(stats, STATS_READERS, ()))
        copy = f.sub("p2p")
        if copy is not None:
            kwargs["p2p"] = P2PCopy(**read_fields(copy, P2P_READERS, ()))
        ranks = f.sub("ranks")
        if ranks is not None:
            kwargs["ranks"] = _rank_times(ranks)
        processes = f.sub("processes")
        if processes is not None:
            kwargs["processes"] = _process_times(processes)
        return check_row(cls(**kwargs), f)

    @classmethod
    def measured(
        cls,
        *,
        samples_us: list[float],
        size_bytes: int,
        busbw_factor: float | None,
        skew_ratio: float | None = None,
        **kw: Any,
    ) -> ResultRow:
        """Build a row from raw samples: stats, algbw = S / t (the busiest rank's bytes,
        S x `skew_ratio`, where ranks move unequal amounts), busbw = algbw x factor."""
        stats = Stats.of(samples_us)
        algbw = busbw = None
        if busbw_factor is not None and stats.median > 0:
            algbw = size_bytes * (skew_ratio or 1.0) / (stats.median * 1e-6) / 1e9
            busbw = algbw * busbw_factor
        return cls(
            size_bytes=size_bytes,
            skew_ratio=skew_ratio,
            algbw_gbps=algbw,
            busbw_gbps=busbw,
            stats=stats,
            samples_us=list(samples_us),
            **kw,
        )

    @classmethod
    def not_run(cls, *, check: str, note: str, **kw: Any) -> ResultRow:
        """A point that could not be measured here; kept so it shows, never silently dropped."""
        return cls(algbw_gbps=None, busbw_gbps=None, check=check, stats=Stats(), note=note, **kw)


def read_fields(
    f: Fields, readers: Mapping[str, Conv[Any]], required: tuple[str, ...]
) -> dict[str, Any]:
    """The fields of `readers` present in `f`, converted. JSON has no NaN: a file holds null
    where a figure has none, and a time read as null is NaN again (`_NAN_WHEN_NULL`)."""
    kwargs: dict[str, Any] = {}
    for name, conv in readers.items():
        if name not in f.data:
            continue
        value = f.data[name]
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # NaN from a reader that allows it: no value, as null is
        if value is None and name in _NAN_WHEN_NULL:
            kwargs[name] = math.nan
        elif value is None and name in _NULLABLE:
            kwargs[name] = None
        elif value is None:
            raise UserError(f"{f.at(name)}: expected a value, got null")
        else:
            kwargs[name] = conv(value, f.at(name))
    missing = [n for n in required if n not in kwargs]
    if missing:
        raise UserError(f"{f.at(missing[0])}: missing")
    return kwargs


def _skew_label(value: Any, path: str) -> str:
    """A row's `skew`: a label commbench writes (`Skew.label`), or '' for no skew."""
    from commbench.skew import Skew

    label = line(value, path)
    if label:
        Skew.from_label(label, path)
    return label


_time = number_in(0, MAX_TIME_US)
_bw = number_in(0, MAX_GBPS)
_count = integer_in(0, MAX_COUNT)
_cv = number_in(0, MAX_COUNT)
_gpu = integer_in(0, MAX_GPU)
_iterations = integer_in(0, MAX_ITERATIONS)
"""Warm-up rounds, as `--warmup` takes them."""
FIELD_READERS: dict[str, Conv[Any]] = {
    "op": one_of(ROW_OPS),
    "strategy": line,  # which ones an op may have: `check_row`
    "dtype": one_of((NO_DTYPE, *ROW_DTYPES)),  # which ops may have none: `check_row`
    "reduce_op": one_of(ROW_REDUCE_OPS),
    "world_size": integer_in(1, MAX_WORLD_SIZE),
    "size_bytes": integer_in(0, MAX_SIZE_BYTES),  # 0 for an op that moves no data only
    "count": integer_in(0, MAX_SIZE_BYTES),  # elements: at most one per byte
    "algbw_gbps": _bw,
    "busbw_gbps": _bw,
    "check": one_of(CHECKS),
    "warmup": _iterations,
    "in_place": boolean,
    "requested_bytes": integer_in(0, MAX_SIZE_BYTES),
    "note": line,
    "samples_us": list_of(_time, max_items=MAX_ITERATIONS),
    "calls": _count,
    "skew": _skew_label,
    "skew_ratio": number_in(1, MAX_WORLD_SIZE),  # the busiest rank gets at most n x S
    "issue_ops_per_s": number_in(0, MAX_ISSUE_RATE),
}
STATS_READERS: dict[str, Conv[Any]] = {
    "n": _count,
    **{name: _time for name in TIMES},
    "cv": _cv,
    "outliers": _count,
}
P2P_READERS: dict[str, Conv[Any]] = {
    "step": _count,
    "test": one_of(P2P_TESTS),
    "mode": one_of(P2P_MODES),
    "direction": one_of(P2P_DIRECTIONS),
    "copy": one_of(P2P_COPIES),
    "src": _gpu,
    "dst": _gpu,
    "pair": line,
    "peak_gbps": _bw,
    "ceiling_gbps": _bw,
    "expected_gbps": _bw,
    "efficiency": number_in(0, MAX_GBPS),
    "link": line,
    "nvlinks": integer_in(0, MAX_GPU),
    "peer_access": boolean,
    "path": one_of(P2P_PATHS),
    "suspicious": boolean,
    "diagnosis": text,
}
_RANKS_READERS: dict[str, Conv[Any]] = {
    "ranks": list_of(integer_in(0, MAX_WORLD_SIZE - 1), max_items=MAX_WORLD_SIZE),
    "median_us": list_of(_time, max_items=MAX_WORLD_SIZE),
    "p95_us": list_of(_time, max_items=MAX_WORLD_SIZE),
    "wait_us": list_of(_time, max_items=MAX_WORLD_SIZE),
}

_PROCESSES_READERS: dict[str, Conv[Any]] = {
    "ranks": list_of(integer_in(0, MAX_WORLD_SIZE - 1), max_items=MAX_WORLD_SIZE),
    "ranks_per_process": integer_in(1, MAX_WORLD_SIZE),
    "times_us": list_of(list_of(_time, max_items=MAX_ITERATIONS), max_items=MAX_WORLD_SIZE),
}


def _rank_times(f: Fields) -> RankTimes:
    """A row's `ranks`, its lists checked to be parallel and its ranks distinct."""
    # not `_read`: its null-means-NaN names (`median_us`, `p95_us`) are lists here
    values = {name: f.req(name, conv) for name, conv in _RANKS_READERS.items()}
    for name in ("median_us", "p95_us", "wait_us"):
        if len(values[name]) != len(values["ranks"]):
            raise UserError(
                f"{f.at(name)}: {len(values[name])} items for {len(values['ranks'])} ranks"
            )
    if len(set(values["ranks"])) != len(values["ranks"]):
        raise UserError(f"{f.at('ranks')}: a rank is listed twice")
    return RankTimes(**values)


def _process_times(f: Fields) -> ProcessTimes:
    """A row's `processes`: a first rank per process, each process's times of as many
    iterations as every other's."""
    ranks = f.req("ranks", _PROCESSES_READERS["ranks"])
    per_process = f.opt("ranks_per_process", _PROCESSES_READERS["ranks_per_process"]) or 1
    times = f.req("times_us", _PROCESSES_READERS["times_us"])
    if len(times) != len(ranks):
        raise UserError(f"{f.at('times_us')}: {len(times)} processes for {len(ranks)} ranks")
    if len({len(t) for t in times}) > 1:
        raise UserError(f"{f.at('times_us')}: the processes hold different numbers of iterations")
    if len(set(ranks)) != len(ranks):
        raise UserError(f"{f.at('ranks')}: a rank is listed twice")
    return ProcessTimes(ranks=ranks, ranks_per_process=per_process, times_us=times)


def check_row(row: ResultRow, f: Fields) -> ResultRow:
    """What one field cannot say alone: a strategy is one of its op's, a p2p row's is its
    copy's name, only an op that moves no data (barrier) has 0 bytes or no dtype, a point's
    elements and ranks fit its bytes and its world."""
    if row.op == P2P_OP:
        if row.p2p is None:
            raise UserError(f"{f.at('p2p')}: missing (a p2p row names its copy)")
        if row.strategy != row.p2p.name:
            raise UserError(
                f"{f.at('strategy')}: {quoted(row.strategy)} is not the name of the row's copy "
                f"({quoted(row.p2p.name)})"
            )
    else:
        if row.p2p is not None:
            raise UserError(f"{f.at('p2p')}: only a p2p row holds a copy; this is {row.op}'s")
        if row.strategy not in ROW_STRATEGIES or (row.strategy and row.op != "all_reduce"):
            allowed = ", ".join(STRATEGY_NAMES) if row.op == "all_reduce" else "none"
            raise UserError(
                f"{f.at('strategy')}: {quoted(row.strategy)} is not a strategy of {row.op} "
                f"(it has: {allowed})"
            )
    if row.op in SKEWED_OPS and not row.skew:
        raise UserError(f"{f.at('skew')}: missing ({row.op}'s rows name their skew)")
    if row.skew and row.op not in SKEWED_OPS:
        raise UserError(f"{f.at('skew')}: {quoted(row.skew)}, but {row.op} splits evenly")
    moves_nothing = row.op in MOVES_NOTHING
    if row.dtype == NO_DTYPE and not moves_nothing:
        raise UserError(f"{f.at('dtype')}: missing ({row.op} moves data of a dtype)")
    if moves_nothing and row.size_bytes != 0:
        raise UserError(f"{f.at('size_bytes')}: {row.size_bytes}, but {row.op} moves no data")
    if not moves_nothing and row.size_bytes == 0:
        raise UserError(f"{f.at('size_bytes')}: 0, but {row.op} moves data (1 byte or more)")
    if row.count > row.size_bytes:
        raise UserError(
            f"{f.at('count')}: {row.count} elements in {row.size_bytes} bytes (one per byte at most)"
        )
    if row.processes is not None and any(r >= row.world_size for r in row.processes.ranks):
        raise UserError(f"{f.at('processes.ranks')}: a rank outside a world of {row.world_size}")
    if row.ranks is not None and len(row.ranks.ranks) > row.world_size:
        raise UserError(
            f"{f.at('ranks.ranks')}: {len(row.ranks.ranks)} ranks in a world of {row.world_size}"
        )
    return row


_NAN_WHEN_NULL = {*TIMES, "cv", "time_us", *(f"{name}_us" for name in TIMES)}
"""Figures stored as null when unknown (version 2's stats, version 1's flat names)."""
_NULLABLE = {
    "algbw_gbps",
    "busbw_gbps",
    "src",
    "dst",
    "peak_gbps",
    "ceiling_gbps",
    "expected_gbps",
    "efficiency",
    "peer_access",
    "calls",
    "skew_ratio",
    "issue_ops_per_s",
}
TOP_NAMES = tuple(
    f.name
    for f in fields(ResultRow)
    if f.name
    not in (
        "stats",
        "samples_us",
        "p2p",
        "ranks",
        "processes",
        "calls",
        "skew",
        "skew_ratio",
        "issue_ops_per_s",
    )
)
P2P_NAMES = tuple(f.name for f in fields(P2PCopy))
_RANKS_NAMES = tuple(f.name for f in fields(RankTimes))
REQUIRED = tuple(
    f.name
    for f in fields(ResultRow)
    if f.default is dataclasses_missing and f.default_factory is dataclasses_missing
)
