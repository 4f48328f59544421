"""Synthetic series of runs for change-point detection, and how a detector's answer is scored:
what tests/test_history_changes.py asserts and benchmarks/change_points.py measures.

A series is one point's median busbw, one figure a run. Two kinds of noise, as the issue measured
them (issue 42): a link shaped by tc, whose runs differ by 1-3% and now and then one is 1.5-3x
slower; and plain loopback on a loaded 2-core machine, whose runs differ by 20-40% and often one
is 2-6x slower. A slow run has less busbw, so an outlier divides its value.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Noise:
    """The between-run spread of one kind of machine."""

    name: str
    sigma: tuple[float, float]
    """The spread of the logs (about a relative spread), drawn uniformly per series."""
    outlier_rate: float
    """The chance that a run is an outlier."""
    outlier_slowdown: tuple[float, float]
    """How many times slower an outlier run is, drawn uniformly."""


SHAPED = Noise(name="shaped link", sigma=(0.01, 0.03), outlier_rate=0.03, outlier_slowdown=(1.5, 3))
NOISY = Noise(name="noisy loopback", sigma=(0.2, 0.4), outlier_rate=0.15, outlier_slowdown=(2, 6))
EDGE = 3
"""Runs at either end where no step is put: a step needs runs on both sides to be seen."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """A series and the truth about it."""

    values: list[float]
    steps: list[int]
    """The index of the first run after each true step."""
    ratios: list[float]
    """Each step's ratio, new level / old."""


def series(
    rng: random.Random,
    noise: Noise,
    *,
    runs: int = 30,
    ratios: Sequence[float] = (),
    at: Sequence[int] | None = None,
) -> Series:
    """`runs` values of busbw with `noise`, stepping by each of `ratios` in turn (new / old),
    at the indices `at` (in order) or, by default, at random runs at least EDGE from either end
    (and from one another)."""
    if at is None:
        at = _places(rng, runs, len(ratios))
    sigma = rng.uniform(*noise.sigma)
    level = math.log(rng.uniform(1.0, 100.0))  # GB/s: any link speed; a ratio is what matters
    values = []
    steps = dict(zip(at, ratios, strict=True))
    for i in range(runs):
        level += math.log(steps.get(i, 1.0))
        value = math.exp(level + rng.gauss(0.0, sigma))
        if rng.random() < noise.outlier_rate:
            value /= rng.uniform(*noise.outlier_slowdown)
        values.append(value)
    return Series(values=values, steps=list(at), ratios=list(ratios))


def _places(rng: random.Random, runs: int, count: int) -> list[int]:
    """`count` step indices in [EDGE, runs - EDGE], at least EDGE apart."""
    while True:
        places = sorted(rng.sample(range(EDGE, runs - EDGE + 1), count))
        if all(b - a >= EDGE for a, b in itertools.pairwise(places)):
            return places


def step_ratio(rng: random.Random, size: float) -> float:
    """A step of `size` (0.1: 10%) in a random direction: a drop to 1 - size of the busbw, or a
    rise to 1 + size."""
    return 1 - size if rng.random() < 0.5 else 1 + size


@dataclass(slots=True)
class Score:
    """Found changes against true steps, added up over many series."""

    tolerance: int = 1
    """A change found this many runs from a true step finds it."""
    series: int = 0
    steps: int = 0
    found: int = 0
    """Changes reported."""
    hits: int = 0
    """True steps found, each once."""
    errors: int = 0
    """The runs between each hit and its step, summed."""
    exact: int = 0
    """Hits at the step's very run."""
    alarmed: int = 0
    """Series with a change found that matches no step (what a series with no step counts)."""
    covered: int = 0
    """Hits whose confidence interval holds the step's true ratio."""

    def add(
        self,
        truth: Sequence[int],
        found: Sequence[int],
        *,
        ratios: Sequence[float] = (),
        intervals: Sequence[tuple[float, float]] = (),
    ) -> None:
        """Score one series: each true step takes the nearest unclaimed change within
        `tolerance`; a change that no step takes is a false one. With the steps' `ratios` and
        the found changes' confidence `intervals` (in the order of `found`), count the hits whose
        interval holds the true ratio."""
        unclaimed = list(range(len(found)))
        for i, step in enumerate(truth):
            near = [j for j in unclaimed if abs(found[j] - step) <= self.tolerance]
            if near:
                best = min(near, key=lambda j: abs(found[j] - step))
                unclaimed.remove(best)
                self.hits += 1
                self.errors += abs(found[best] - step)
                self.exact += found[best] == step
                if intervals:
                    low, high = intervals[best]
                    self.covered += low <= ratios[i] <= high
        self.series += 1
        self.steps += len(truth)
        self.found += len(found)
        self.alarmed += bool(unclaimed)

    @property
    def precision(self) -> float:
        """Changes found that are true steps; 1 when none was found (no claim, no false one)."""
        return self.hits / self.found if self.found else 1.0

    @property
    def recall(self) -> float:
        """True steps found; NaN without steps."""
        return self.hits / self.steps if self.steps else math.nan

    @property
    def location_error(self) -> float:
        """Mean runs between a hit and its step."""
        return self.errors / self.hits if self.hits else math.nan

    @property
    def coverage(self) -> float:
        """Hits whose interval holds the true ratio (about 0.95 for a 95% interval)."""
        return self.covered / self.hits if self.hits else math.nan

    @property
    def false_alarm_rate(self) -> float:
        """Series with a change that is no step."""
        return self.alarmed / self.series if self.series else math.nan
