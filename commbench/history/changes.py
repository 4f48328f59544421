"""Change points in a series of runs: where a point's per-run figure stepped, by how much, how
surely.

The library is ruptures 1.1.10 (BSD-2-Clause; Requires-Dist: numpy, scipy; Requires-Python >=3.9,
<3.14 until ruptures#360 ships). Its alternatives, read from their wheels' metadata: apache-otava
0.8.0 (Hunter) pins numpy==2.2.0.* and scipy<1.17 and requires google-cloud-bigquery, slack-sdk
and pg8000; MongoDB's signal-processing-algorithms 2.1.6 requires Python 3.11 only, numpy<2,
gevent and setuptools<71. Either would hold back the numpy and scipy of the whole environment.

The method, on the logs of the values, so that a ratio is a shift whatever the link's speed:
1. Candidates: ruptures' Pelt with the L2 cost (`KernelCPD`, linear kernel: the same optimum, in
   C; 10,000 runs take 0.1-0.5 s, where its Python `Pelt` takes 4 s for 1,000), penalised in units
   of the noise's variance, sigma being the MAD of first differences (neither a step nor an
   outlier moves it). Pelt reads the series with its outlier runs replaced, a run far from both
   the runs before it and the runs after it: otherwise one slow run's L2 gain buys it a segment.
2. Judging, as Otava prunes E-divisive's candidates with a t-test: each candidate's neighbouring
   segments (at most `reach` runs each side) are compared by Mann-Whitney on the values as they
   are, whose ranks count an outlier run as one rank, not by its size. The weakest candidate (not
   significant, or a shift under `min_effect`) is dropped and its neighbours judged again, until
   every one left stands.
3. Each change: the medians either side, their ratio, and as its 95% interval the Hodges-Lehmann
   (Moses) distribution-free interval of the shift in logs, taken back to a ratio.
`benchmarks/change_points.py` measures precision, recall, the interval's coverage and the time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Array = NDArray[np.float64]
    """A series as an array (the figures, or their logs)."""

MIN_SEGMENT = 3
"""Runs on each side of a change, at the least: one or two slow runs are outliers, not a step."""

MIN_RUNS = 2 * MIN_SEGMENT
"""Below this a series has no changes: there is no room for two segments."""

NOISE_FLOOR = 1e-3
"""The least noise (sigma of the logs, about a 0.1% spread) the penalty assumes: a series of
identical or quantised figures measures no spread, and a zero penalty would cut every run apart."""

OUTLIER_SIGMAS = 3.0
"""A run further than this many sigmas from the runs on either side of it is an outlier: Pelt
reads it replaced (the judging reads the values as they are)."""

SIDE = 3
"""The runs on each side whose median an outlier is measured from: with MIN_SEGMENT, a step
needs 3 runs to be one."""

TAIL_GUARD = 10
"""update(): a previous change this close after the recomputed tail's start is kept, and the tail
starts at it: Pelt would see too little of the segment before it to place it again."""

Z_975 = 1.959963984540054
"""The standard normal's 97.5% quantile: a two-sided 95% interval."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """A step in a series: the runs from `index` on differ from the runs before it."""

    index: int
    """Index in the values of the first run after the change."""
    before: float
    """Median of the segment before the change (at most `reach` runs; the values' unit)."""
    after: float
    """Median of the segment after the change (at most `reach` runs)."""
    ratio: float
    """after / before: below 1 a drop in busbw, a regression."""
    ratio_low: float
    """Low end of the ratio's 95% confidence interval."""
    ratio_high: float
    """High end of the ratio's 95% confidence interval."""
    p_value: float
    """Mann-Whitney's two-sided p-value of the segments either side (selected by Pelt, so read it
    as a strength, not as an exact false-alarm rate)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Detector:
    """How changes are found and judged. The defaults are the setting that
    benchmarks/change_points.py measures: its table says what the others cost and buy."""

    alpha: float = 0.005
    """A change stands when its p-value is below this: Mann-Whitney's least two-sided p-value for
    3 runs against 12 is 0.0044, so a clean step 3 runs from the end of a short series can stand."""
    min_effect: float = 0.05
    """... and its medians differ by at least this fraction (in logs, either way): a smaller step
    may be real, but it is not worth an alert (the benchmark's "min effect 2%" row shows what
    finding 5% steps costs)."""
    penalty: float = 12.0
    """Pelt's cost of one more change, in units of the noise's variance: low enough that a 10%
    step 3 runs from either end is a candidate on 3% noise, high enough that noise rarely is."""
    reach: int = 100
    """Runs on each side of a change, at most, that judge it and give its medians: a change is
    judged against its neighbourhood, and a run far away can no longer alter it."""
    window: int = 300
    """update() recomputes the changes among the last `window` runs and keeps those before."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be between 0 and 1, not {self.alpha}")
        if not 0 <= self.min_effect < 1:
            raise ValueError(f"min_effect must be at least 0 and below 1, not {self.min_effect}")
        if not self.penalty > 0:
            raise ValueError(f"penalty must be positive, not {self.penalty}")
        if self.reach < MIN_SEGMENT:
            raise ValueError(f"reach must be at least {MIN_SEGMENT} runs, not {self.reach}")
        if self.window < 2 * self.reach:
            raise ValueError(f"window ({self.window}) must be at least twice reach ({self.reach})")


DETECTOR = Detector()


def detect(values: Sequence[float], *, detector: Detector = DETECTOR) -> list[Change]:
    """The changes in a series of positive per-run figures, oldest first.

    Raises ValueError on a value that is not a positive finite number: the caller keeps failed
    runs out of a series, so such a value is a bug upstream, not a change."""
    figures, logs = _checked(values)
    return _find(figures, logs, 0, detector)


def update(
    values: Sequence[float], previous: Sequence[Change], *, detector: Detector = DETECTOR
) -> list[Change]:
    """The changes of `values`, given `previous`, the changes found when it was shorter.

    As Otava's incremental mode does, only the tail is recomputed: the last `detector.window`
    runs, judged against the runs back to the last change kept (within `reach`). The changes
    before the tail are kept as they are: by then each has more than `reach` runs after it, all
    that judges it, so detect() on the whole series judges it on the same runs. Adding a run to a
    series of 10,000 costs what a series of `window` runs does. Raises ValueError as detect()
    does, and on previous changes out of order or outside the series (another series' changes)."""
    figures, logs = _checked(values)
    n = len(logs)
    indices = [c.index for c in previous]
    if indices != sorted(set(indices)) or any(not 0 < i < n for i in indices):
        raise ValueError(
            f"previous changes must be in order, each inside the series of {n} runs: {indices}"
        )
    start = n - detector.window
    if start <= 0:
        return _find(figures, logs, 0, detector)
    settled = [c for c in previous if c.index < start + TAIL_GUARD]
    if settled and settled[-1].index >= start:
        start = settled[-1].index
    # what the tail's changes are judged on: back to the last settled change, within reach
    context = max(settled[-1].index if settled else 0, start - detector.reach)
    found = _find(figures[context:], logs[context:], start - context, detector)
    return settled + [replace(c, index=c.index + context) for c in found]


def _checked(values: Sequence[float]) -> tuple[Array, Array]:
    """The values as an array and their natural logs, or ValueError naming the first value that
    has none."""
    import numpy as np

    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"values must be a flat sequence of numbers, not of shape {array.shape}")
    bad = np.flatnonzero(~(np.isfinite(array) & (array > 0)))
    if bad.size:
        raise ValueError(
            f"values must be positive finite numbers: value {bad[0]} is {float(array[bad[0]])}"
        )
    return array, np.log(array)


def _noise(logs: Array) -> float:
    """sigma of the logs' run-to-run noise: the MAD of first differences, scaled to a normal's
    standard deviation (/ 0.6745 for the MAD, / sqrt 2 for a difference of two runs). A step
    moves one difference and an outlier two, so neither widens it."""
    import numpy as np

    diffs = np.diff(logs)
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return max(mad / (0.6745 * math.sqrt(2)), NOISE_FLOOR)


def _outliers_replaced(logs: Array, sigma: float) -> Array:
    """The logs with each outlier run replaced by the nearer of its neighbours' medians. A run is
    an outlier when it lies more than OUTLIER_SIGMAS sigmas from both the median of the SIDE runs
    before it and that of the SIDE runs after it (at either end, from the one side there is):
    the last run before a step is near the runs before it, the first after it near the runs
    after, and a slow run between them is near neither."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    n = len(logs)
    before, after = np.full(n, np.inf), np.full(n, np.inf)
    if n > SIDE:
        medians = np.median(sliding_window_view(logs, SIDE), axis=1)  # of logs[j : j + SIDE]
        before[SIDE:] = medians[: n - SIDE]
        after[: n - SIDE] = medians[1:]
    for i in range(1, min(SIDE, n)):
        before[i] = np.median(logs[:i])
    for i in range(max(n - SIDE, 0), n - 1):
        after[i] = np.median(logs[i + 1 :])
    nearer = np.where(np.abs(logs - before) <= np.abs(logs - after), before, after)
    return np.where(np.abs(logs - nearer) > OUTLIER_SIGMAS * sigma, nearer, logs)


def _find(figures: Array, logs: Array, start: int, detector: Detector) -> list[Change]:
    """The changes in logs[start:], judged against the runs from logs[0] on (a change kept
    before them, or the series' start)."""
    import numpy as np
    import ruptures

    if len(logs) - start < MIN_RUNS or float(np.ptp(logs[start:])) == 0.0:
        return []
    clean = _outliers_replaced(logs, _noise(logs))
    sigma = _noise(clean[start:])
    pelt = ruptures.KernelCPD(kernel="linear", min_size=MIN_SEGMENT)
    ends = pelt.fit(clean[start:]).predict(pen=detector.penalty * sigma**2)
    candidates = [start + int(end) for end in ends[:-1]]
    return _judge(figures, logs, candidates, 0, detector)


@dataclass(frozen=True, slots=True)
class _Judged:
    """One candidate judged against its neighbouring segments, logs[lo:at] and logs[at:hi]."""

    lo: int
    at: int
    hi: int
    p_value: float
    shift: float
    """The difference of the segments' medians, in logs."""
    stands: bool

    @property
    def weakness(self) -> tuple[bool, float]:
        """What orders the candidates to drop: any that does not stand before any that does,
        then the least significant."""
        return (not self.stands, self.p_value)


def _judge(
    figures: Array, logs: Array, candidates: list[int], lo: int, detector: Detector
) -> list[Change]:
    """The candidates that stand, as Changes: drop the weakest and judge its neighbours again
    (their segments have grown into its place), until every one left stands. Segments are
    bounded by the neighbouring candidates, `lo` (the last change kept before them, or 0) and
    the series' end, and by `detector.reach`."""
    points = list(candidates)

    def judged(i: int) -> _Judged:
        left = points[i - 1] if i > 0 else lo
        right = points[i + 1] if i + 1 < len(points) else len(logs)
        return _judged(logs, left, points[i], right, detector)

    verdicts = [judged(i) for i in range(len(points))]
    while verdicts:
        worst = max(range(len(verdicts)), key=lambda i: verdicts[i].weakness)
        if verdicts[worst].stands:
            break
        del points[worst], verdicts[worst]
        for i in (worst - 1, worst):
            if 0 <= i < len(points):
                verdicts[i] = judged(i)
    return [_change(figures, logs, verdict) for verdict in verdicts]


def _judged(logs: Array, left: int, at: int, right: int, detector: Detector) -> _Judged:
    """The candidate at `at` between its neighbours at `left` and `right`."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    lo, hi = max(left, at - detector.reach), min(right, at + detector.reach)
    before, after = logs[lo:at], logs[at:hi]
    shift = float(np.median(after) - np.median(before))
    if np.ptp(logs[lo:hi]) == 0.0:
        p_value = 1.0  # all equal: Mann-Whitney's statistic has no spread to divide by
    else:
        p_value = float(mannwhitneyu(after, before, alternative="two-sided").pvalue)
    stands = p_value < detector.alpha and abs(shift) >= math.log1p(detector.min_effect)
    return _Judged(lo=lo, at=at, hi=hi, p_value=p_value, shift=shift, stands=stands)


def _change(figures: Array, logs: Array, verdict: _Judged) -> Change:
    """The Change a standing candidate reports: medians and their ratio in the values' unit, and
    Moses' interval of the Hodges-Lehmann shift: the order statistics of all pairwise
    differences (after - before) that Mann-Whitney's 95% critical value picks out."""
    import numpy as np

    before, after = logs[verdict.lo : verdict.at], logs[verdict.at : verdict.hi]
    differences = np.sort(np.subtract.outer(after, before), axis=None)
    n1, n2 = len(before), len(after)
    k = math.floor(n1 * n2 / 2 - Z_975 * math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12))
    low, high = (
        (differences[0], differences[-1]) if k < 1 else (differences[k - 1], differences[-k])
    )
    # the medians of the figures themselves: of an even count, the logs' would be a geometric mean
    median_before = float(np.median(figures[verdict.lo : verdict.at]))
    median_after = float(np.median(figures[verdict.at : verdict.hi]))
    return Change(
        index=verdict.at,
        before=median_before,
        after=median_after,
        ratio=median_after / median_before,
        ratio_low=math.exp(float(low)),
        ratio_high=math.exp(float(high)),
        p_value=verdict.p_value,
    )
