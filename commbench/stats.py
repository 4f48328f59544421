"""Summary statistics of one measurement's per-iteration samples.

The median is the headline: on shared machines iteration times are skewed and bimodal, so
the mean follows the slow mode. The samples are kept next to the summary because the
regression gate tests them, not the summary.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return sorted_values[lo]
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


NAN = math.nan

IQR_TO_SIGMA = 1.349
"""IQR / 1.349 estimates the standard deviation of normal samples, so `Stats.spread` reads
like a coefficient of variation and the same thresholds apply to it."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Stats:
    """Summary of n samples (any unit; a result row's are in microseconds).

    A figure that is not known is NaN: `Stats()` is a point that could not run, and an
    imported nccl-tests line, which prints only one time, knows its median, mean and n."""

    n: int = 0
    min: float = NAN
    q1: float = NAN
    median: float = NAN
    q3: float = NAN
    p95: float = NAN
    max: float = NAN
    mean: float = NAN
    stddev: float = NAN
    """Sample standard deviation (n-1)."""
    cv: float = NAN
    """Coefficient of variation, stddev / mean, as nccl-tests users expect it. The gate
    judges noise by the robust spread instead (`commbench.compare.dispersion`): one
    descheduled iteration moves the cv, not the interquartile range."""
    outliers: int = 0
    """Samples outside the 1.5 x IQR fences (Tukey), as hyperfine and pytest-benchmark count them."""

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        if not samples:
            raise ValueError("no samples")
        values = sorted(samples)
        n = len(values)
        mean = math.fsum(values) / n
        var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
        stddev = math.sqrt(var)
        q1, q3 = quantile(values, 0.25), quantile(values, 0.75)
        iqr = q3 - q1
        lo_fence, hi_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
        return cls(
            n=n,
            min=values[0],
            q1=q1,
            median=quantile(values, 0.5),
            q3=q3,
            p95=quantile(values, 0.95),
            max=values[-1],
            mean=mean,
            stddev=stddev,
            cv=stddev / mean if mean > 0 else 0.0,
            outliers=sum(1 for v in values if v < lo_fence or v > hi_fence),
        )

    def spread(self) -> float | None:
        """The robust spread: IQR / (1.349 x median). Equal to the cv for well-behaved
        samples, but a few outliers do not move it (one 100x iteration among 200 sends the cv
        to 3.7 and would hide a real 30% slowdown). The noise warning, the regression gate and
        the tables all use it. Fewer than 4 samples (no quartiles to speak of) fall back to the
        cv; None when there is neither."""
        quartiles = (self.q1, self.q3, self.median)
        if self.n >= 4 and all(math.isfinite(v) for v in quartiles) and self.median > 0:
            return (self.q3 - self.q1) / (IQR_TO_SIGMA * self.median)
        return self.cv if self.n >= 2 and math.isfinite(self.cv) else None

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


TIMES = ("min", "q1", "median", "q3", "p95", "max", "mean", "stddev")
"""The figures of `Stats` that carry the samples' unit."""
