"""The result file schema: one row per measured (op, strategy, dtype, size) point.

Files written by commbench carry `schema_version`. Readers accept the versions they can
migrate and refuse newer ones with a message, so an old commbench never misreads a new run.
"""

from __future__ import annotations

import math
from dataclasses import MISSING as dataclasses_missing
from dataclasses import dataclass, field, fields
from typing import Any

from commbench.errors import UserError
from commbench.fields import Conv, Fields, boolean, integer_in, list_of, number_in, string
from commbench.stats import Stats

SCHEMA_VERSION = 2
"""Of run.json, suite.json and results.json; version 1 is migrated on load (`record`)."""

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

CHECK_OK = "ok"
CHECK_FAILED = "failed"
CHECK_SKIPPED = "skipped"  # --no-check, or an op that cannot run here (sendrecv at n=1)
CHECK_NA = "n/a"  # nothing to check (barrier)


@dataclass(kw_only=True, slots=True)
class ResultRow:
    """One measured point. `time_us` is the median of `samples_us`, the headline number."""

    op: str
    strategy: str = ""
    """All-reduce strategy name ('' for plain ops)."""
    dtype: str
    reduce_op: str = ""
    """'' for ops that do not reduce."""
    world_size: int
    """Ranks taking part in the op (the subgroup's size with --ranks)."""
    size_bytes: int
    """S as nccl-tests defines it, after rounding (see `note`)."""
    count: int
    """Elements in S."""
    time_us: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    check: str
    min_us: float
    q1_us: float
    q3_us: float
    p95_us: float
    max_us: float
    mean_us: float
    stddev_us: float
    cv: float
    n: int
    """Timed iterations (samples)."""
    outliers: int = 0
    warmup: int = 0
    in_place: bool = False
    requested_bytes: int = 0
    note: str = ""
    samples_us: list[float] = field(default_factory=list)
    """Per-iteration time, maximum over ranks, in microseconds."""

    @property
    def key(self) -> tuple[str, str, str, str, int, int]:
        """What identifies a point across runs (the regression gate joins on it)."""
        return (
            self.op,
            self.strategy,
            self.dtype,
            self.reduce_op,
            self.world_size,
            self.size_bytes,
        )

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies every value, the bulk of writing 10**5 rows
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        if samples:
            data["samples_us"] = list(self.samples_us)
        else:
            data.pop("samples_us")
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "row") -> ResultRow:
        """Rebuild a row from a file; a field missing, of the wrong type or out of bounds is a
        UserError naming `where` and the field."""
        f = Fields(data, where)
        kwargs: dict[str, Any] = {}
        for name, conv in _FIELD_READERS.items():
            if name not in f.data:
                continue
            value = f.data[name]
            if isinstance(value, float) and not math.isfinite(value):
                value = None  # NaN from a reader that allows it: no value, as null is
            if value is None and name in _NAN_WHEN_NULL:
                kwargs[name] = (
                    math.nan
                )  # JSON has no NaN: files store null where a point has no time
            elif value is None and name in _NULLABLE:
                kwargs[name] = None
            elif value is None:
                raise UserError(f"{f.at(name)}: expected a value, got null")
            else:
                kwargs[name] = conv(value, f.at(name))
        missing = [n for n in _REQUIRED if n not in kwargs]
        if missing:
            raise UserError(f"{f.at(missing[0])}: missing")
        return cls(**kwargs)

    @classmethod
    def measured(
        cls,
        *,
        samples_us: list[float],
        size_bytes: int,
        busbw_factor: float | None,
        **kw: Any,
    ) -> ResultRow:
        """Build a row from raw samples: stats, algbw = S / t, busbw = algbw x factor."""
        stats = Stats.of(samples_us)
        algbw = busbw = None
        if busbw_factor is not None and stats.median > 0:
            algbw = size_bytes / (stats.median * 1e-6) / 1e9
            busbw = algbw * busbw_factor
        return cls(
            size_bytes=size_bytes,
            time_us=stats.median,
            algbw_gbps=algbw,
            busbw_gbps=busbw,
            min_us=stats.min,
            q1_us=stats.q1,
            q3_us=stats.q3,
            p95_us=stats.p95,
            max_us=stats.max,
            mean_us=stats.mean,
            stddev_us=stats.stddev,
            cv=stats.cv,
            n=stats.n,
            outliers=stats.outliers,
            samples_us=list(samples_us),
            **kw,
        )

    @classmethod
    def not_run(cls, *, check: str, note: str, **kw: Any) -> ResultRow:
        """A point that could not be measured here; kept so it shows, never silently dropped."""
        nan = math.nan
        return cls(
            time_us=nan,
            algbw_gbps=None,
            busbw_gbps=None,
            check=check,
            min_us=nan,
            q1_us=nan,
            q3_us=nan,
            p95_us=nan,
            max_us=nan,
            mean_us=nan,
            stddev_us=nan,
            cv=nan,
            n=0,
            note=note,
            **kw,
        )


_NAN_WHEN_NULL = {
    "time_us",
    "min_us",
    "q1_us",
    "q3_us",
    "p95_us",
    "max_us",
    "mean_us",
    "stddev_us",
    "cv",
}

_time = number_in(0, MAX_TIME_US)
_bw = number_in(0, MAX_GBPS)
_count = integer_in(0, MAX_COUNT)
_FIELD_READERS: dict[str, Conv[Any]] = {
    "op": string,
    "strategy": string,
    "dtype": string,
    "reduce_op": string,
    "world_size": integer_in(1, MAX_WORLD_SIZE),
    "size_bytes": integer_in(0, MAX_SIZE_BYTES),
    "count": _count,
    "time_us": _time,
    "algbw_gbps": _bw,
    "busbw_gbps": _bw,
    "check": string,
    "min_us": _time,
    "q1_us": _time,
    "q3_us": _time,
    "p95_us": _time,
    "max_us": _time,
    "mean_us": _time,
    "stddev_us": _time,
    "cv": number_in(0, MAX_COUNT),
    "n": _count,
    "outliers": _count,
    "warmup": _count,
    "in_place": boolean,
    "requested_bytes": integer_in(0, MAX_SIZE_BYTES),
    "note": string,
    "samples_us": list_of(_time),
}
_NULLABLE = {"algbw_gbps", "busbw_gbps"}
_FIELD_NAMES = tuple(f.name for f in fields(ResultRow))
_REQUIRED = tuple(
    f.name
    for f in fields(ResultRow)
    if f.default is dataclasses_missing and f.default_factory is dataclasses_missing
)

# results.csv column order: the columns the issue fixes first, then the rest of the stats.
CSV_COLUMNS = [
    "op",
    "strategy",
    "dtype",
    "reduce_op",
    "world_size",
    "size_bytes",
    "count",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "check",
    "min_us",
    "q1_us",
    "q3_us",
    "p95_us",
    "max_us",
    "mean_us",
    "stddev_us",
    "cv",
    "n",
    "outliers",
    "warmup",
    "in_place",
    "requested_bytes",
    "note",
]
