"""The p2p result row: one measured copy (or a step's copies together) with its verdict.

Rows are written to `results.json` (with the per-iteration samples) and `results.csv`
(without), next to `run.json` whose `kind` is `"p2p"`. The fields are documented in
`commbench.p2p`'s module docstring and on `P2PRow` below.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from commbench.p2p.expect import Expectation, Verdict, judge
from commbench.p2p.plan import Step
from commbench.results.store import dicts_to_csv
from commbench.stats import Stats

SCHEMA_VERSION = 1
KIND = "p2p"

CHECK_OK = "ok"
CHECK_FAILED = "failed"
CHECK_SKIPPED = "skipped"

_NAN_WHEN_NULL = (
    "time_ms",
    "min_ms",
    "q1_ms",
    "q3_ms",
    "p95_ms",
    "max_ms",
    "mean_ms",
    "stddev_ms",
    "cv",
)


@dataclass(kw_only=True, slots=True)
class P2PRow:
    """One measured copy. `time_ms` is the median of `samples_ms`, the headline number."""

    step: int
    """Index of the measurement (0, 1, ...): rows of one step were timed together."""
    test: str
    """`bandwidth`, or `latency` (small copies; read `time_ms` x 1000 as microseconds)."""
    mode: str
    """`concurrent` (timed while the step's other copies ran) or `sequential` (alone)."""
    direction: str
    """`uni`, or `bi` when the pair was copied both ways at once."""
    copy: str
    """`p2p`, `d2d` (within one GPU), `h2d`, `d2h`, or `total` (the step's copies together)."""
    src: int | None
    """Source GPU (CUDA ordinal); None for pinned host memory, or a total over several sources."""
    dst: int | None
    """Destination GPU; None for pinned host memory, or for a total."""
    pair: str
    """`0->1`, `host->0`, `0->host`, `0->0`; a total: `0->{1,2,4}` or `0<->1`."""
    size_bytes: int
    """Bytes per copy (a total moves this times the number of copies)."""
    dtype: str
    """Element type of the copied tensor: float32, or uint8 for sizes not a multiple of 4."""
    time_ms: float
    """Median time of the copy; for a total, of the slowest copy (they start together)."""
    bw_gbps: float | None
    """Bandwidth at the median time, GB/s (1e9 B/s); a total sums the bytes of its copies.
    None for latency rows, as are the peak, ceiling, expected and efficiency figures."""
    peak_gbps: float | None
    """Theoretical peak of the copy alone (a total: the sum of its copies' peaks)."""
    ceiling_gbps: float | None
    """Theoretical GB/s in this step, after sharing with the copies that ran at once."""
    expected_gbps: float | None
    """What such a copy typically reaches in this step (`commbench.p2p.expect`)."""
    efficiency: float | None
    """bw_gbps / peak_gbps."""
    link: str
    """nvidia-smi label of the pair (`NV2`, `PIX`, `SYS`, ...), `PCIe` for host copies,
    `local` within one GPU."""
    nvlinks: int
    p2p: bool | None
    """Whether the pair supports P2P (None: unknown, or not a GPU pair)."""
    path: str
    """`nvlink`, `pcie`, `staged` (no P2P: through host memory), `host`, `local`, `total`."""
    suspicious: bool
    """Faster than the theoretical peak: the number cannot be right as it stands."""
    diagnosis: str
    """One line: the verdict on the measurement, then the topology's explanation."""
    check: str
    """`ok` / `failed`: the copied data compared after timing (a total: all its copies);
    `skipped` when not checked."""
    min_ms: float
    q1_ms: float
    q3_ms: float
    p95_ms: float
    max_ms: float
    mean_ms: float
    stddev_ms: float
    cv: float
    n: int
    """Timed iterations."""
    outliers: int = 0
    warmup: int = 0
    samples_ms: list[float] = field(default_factory=list)
    """Per-iteration times in milliseconds (CUDA events on the copy's own stream)."""

    @property
    def key(self) -> tuple[str, str, str, str, str, int]:
        """What identifies a row across runs."""
        return (self.test, self.mode, self.direction, self.copy, self.pair, self.size_bytes)

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not samples:
            data.pop("samples_ms")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> P2PRow:
        known = {f.name for f in fields(cls)}
        # JSON has no NaN: files store null where a row has no time.
        values: dict[str, Any] = {
            k: (math.nan if v is None and k in _NAN_WHEN_NULL else v)
            for k, v in data.items()
            if k in known
        }
        return cls(**values)

    @classmethod
    def measured(
        cls,
        *,
        index: int,
        step: Step,
        exp: Expectation,
        samples_ms: list[float],
        dtype: str,
        check: str,
        warmup: int,
    ) -> P2PRow:
        """Stats, bandwidth and verdict of one copy (or a step's total) from its samples."""
        stats = Stats.of(samples_ms)
        copies = len(step.copies) if exp.copy == "total" else 1
        bw = _bw(step.size_bytes * copies, stats.median)
        # Small copies measure latency: bandwidth figures and their verdict mean nothing there.
        latency = step.test == "latency"
        verdict = Verdict(efficiency=None, suspicious=False, text="") if latency else judge(exp, bw)
        diagnosis = "; ".join(t for t in (verdict.text, exp.diagnosis) if t)
        return cls(
            step=index,
            test=step.test,
            mode=step.mode,
            direction=step.direction,
            copy=exp.copy,
            src=exp.src,
            dst=exp.dst,
            pair=exp.pair,
            size_bytes=step.size_bytes,
            dtype=dtype,
            time_ms=stats.median,
            bw_gbps=None if latency else bw,
            peak_gbps=None if latency else exp.peak_gbps,
            ceiling_gbps=None if latency else exp.ceiling_gbps,
            expected_gbps=None if latency else exp.expected_gbps,
            efficiency=verdict.efficiency,
            link=exp.link,
            nvlinks=exp.nvlinks,
            p2p=exp.p2p,
            path=exp.path,
            suspicious=verdict.suspicious,
            diagnosis=diagnosis,
            check=check,
            min_ms=stats.min,
            q1_ms=stats.q1,
            q3_ms=stats.q3,
            p95_ms=stats.p95,
            max_ms=stats.max,
            mean_ms=stats.mean,
            stddev_ms=stats.stddev,
            cv=stats.cv,
            n=stats.n,
            outliers=stats.outliers,
            warmup=warmup,
            samples_ms=list(samples_ms),
        )


def _bw(nbytes: int, ms: float | None) -> float | None:
    if ms is None or math.isnan(ms) or ms <= 0:
        return None
    return nbytes / (ms * 1e-3) / 1e9


# results.csv column order: what the issue names first, then the rest of the stats.
CSV_COLUMNS = [
    "step",
    "test",
    "mode",
    "direction",
    "copy",
    "src",
    "dst",
    "pair",
    "size_bytes",
    "dtype",
    "time_ms",
    "bw_gbps",
    "peak_gbps",
    "ceiling_gbps",
    "expected_gbps",
    "efficiency",
    "link",
    "nvlinks",
    "p2p",
    "path",
    "suspicious",
    "check",
    "diagnosis",
    "min_ms",
    "q1_ms",
    "q3_ms",
    "p95_ms",
    "max_ms",
    "mean_ms",
    "stddev_ms",
    "cv",
    "n",
    "outliers",
    "warmup",
]


def rows_to_csv(rows: list[P2PRow]) -> str:
    return dicts_to_csv([row.to_dict(samples=False) for row in rows], CSV_COLUMNS)
