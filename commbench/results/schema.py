"""The result file schema: one row per measured (op, strategy, dtype, size) point.

Files written by commbench carry `schema_version`. Readers accept the versions they can
migrate and refuse newer ones with a message, so an old commbench never misreads a new run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from commbench.stats import Stats

SCHEMA_VERSION = 1

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
        data = asdict(self)
        if not samples:
            data.pop("samples_us")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultRow:
        """Rebuild a row from a file; a field of the wrong type is a ValueError naming it."""
        if not isinstance(data, dict):
            raise ValueError("a row must be an object")
        kwargs: dict[str, Any] = {}
        for name, kinds in _FIELD_TYPES.items():
            if name not in data:
                continue
            value = data[name]
            if value is None and name in _NAN_WHEN_NULL:
                value = math.nan  # JSON has no NaN: files store null where a point has no time
            if value is None and type(None) in kinds:
                kwargs[name] = None
                continue
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ValueError(f"field {name!r} has the wrong type ({type(value).__name__})")
            if isinstance(value, list) and not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
            ):
                raise ValueError("field 'samples_us' must be a list of numbers")
            kwargs[name] = value
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

_NUM = (int, float)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "op": (str,),
    "strategy": (str,),
    "dtype": (str,),
    "reduce_op": (str,),
    "world_size": (int,),
    "size_bytes": (int,),
    "count": (int,),
    "time_us": _NUM,
    "algbw_gbps": (*_NUM, type(None)),
    "busbw_gbps": (*_NUM, type(None)),
    "check": (str,),
    "min_us": _NUM,
    "q1_us": _NUM,
    "q3_us": _NUM,
    "p95_us": _NUM,
    "max_us": _NUM,
    "mean_us": _NUM,
    "stddev_us": _NUM,
    "cv": _NUM,
    "n": (int,),
    "outliers": (int,),
    "warmup": (int,),
    "in_place": (bool,),
    "requested_bytes": (int,),
    "note": (str,),
    "samples_us": (list,),
}

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
