"""The regression gate: compare a new run with a baseline, point by point, and say whether it
is worse, judged against how far a point's median moves between runs.

A point is keyed by (op, strategy, dtype, reduce op, world size, size, in-place, skew): an
all_to_allv point of one skew is never held to another's. Its figure is the median of its
samples (`ResultRow.sample_median_us`): the samples decide, never a stats block that
disagrees with them.

Why between runs: a gate asks whether the next run's median is where the last ones were, and
that is set by how far a median moves from run to run, not by the tails of the iterations
inside one run (a few slow iterations say nothing about where the next median lands; a noise
band built from them once excused a 95% drop). That spread (`Spread`, the standard deviation
of the log of a point's median) comes from:

- a history (`commbench history`, `compare --history`) of at least `MIN_HISTORY` comparable
  runs since the point's series last changed: the medians of those runs, their robust spread
  (MAD), and their median as the reference (`Basis.history_spread`);
- without one, the baseline itself: its iterations in time order, cut into `BLOCKS` blocks,
  short runs whose medians move as a run's median does; a slow iteration moves one block's
  median a little, never the limit (`Basis.block_spread`). One run cannot show a point that
  switches mode from run to run (its blocks agree); only a history, or measuring again
  (`run --confirm`), can.

Each point's spread is at least its series' typical spread (the median over the points of its
op and dtype, `pooled`): a point whose few blocks or runs happened to agree is not held to a
limit tighter than its neighbours'. A drop fails (worse) when it is beyond the largest of the
tolerance (the latency tolerance at latency-bound points) and `Z_LIMIT` spreads of the
difference, and significant: the one-sided Mann-Whitney U test on the samples (pairwise), or
the z of the new median against the history's (with a history). Such a drop fails wherever it
is: at one size (a protocol threshold) as at all of them. A one-off (a point that ran in a
slow mode on a loaded machine) looks the same in one run; `commbench run --confirm K`
measures the points that look worse again before the verdict (`suites/confirm.py`).

Only the baseline (or the history) sets a limit: a new run's own noise is no reason to pass
it. A speed-up is better when significant and beyond the same limits on the fast side. A point
present in the baseline but missing, failed or not run in the new run always regresses. Runs
whose comparability context differs are refused unless asked otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from commbench.errors import EXIT_FAILED, EXIT_OK, UserError
from commbench.results.names import (
    DEFAULT_ALPHA,
    DEFAULT_LATENCY_TOLERANCE,
    DEFAULT_NOISY_CV,
    DEFAULT_TOLERANCE,
)
from commbench.results.record import RunContext
from commbench.results.runs import Run
from commbench.results.schema import CHECK_FAILED, ROW_KEY, KeyedPoint, ResultRow, RowKey
from commbench.results.summary import SeriesKey, bandwidth_bound, series_key, series_peaks

if TYPE_CHECKING:
    import pandas

# Fewer samples than this on either side, or too few for the test to decide (`decisive`): no
# test, the ratio alone decides.
MIN_SAMPLES = 3
MIN_HISTORY = 5
"""Comparable runs a history needs before its spread replaces the baseline's blocks: fewer
than 5 medians say little about how far the next one lands."""
HISTORY_RUNS = 20
"""The most recent runs of a series (after its last change) a history reference takes."""
BLOCKS = 8
"""Blocks a baseline point's iterations are cut into, in time order, when there is no
history: their medians stand for the medians of short runs."""
MIN_BLOCKS = 4
"""Fewer blocks (iterations) than this give no spread: the tolerance and the ratio decide."""
Z_LIMIT = 4.0
"""How many spreads of the difference of two medians a drop must pass to fail: at 4, a
comparison of 15 points fails a repeat of the same work about once in 1,000 when the spread
is right (docs/ci.md: the power and false failures measured on links of known truth)."""
MIN_SPREAD = 0.002
"""The smallest spread a point is held to (0.2%): a median that never moved in a handful of
runs did not stop moving."""
MAD_TO_SIGMA = 1.4826
"""MAD x 1.4826 estimates the standard deviation of normal values."""

PointKey = RowKey
KEY_FIELDS = ROW_KEY

# comparable() keys, as the refusal message names them.
_CONTEXT_LABELS = {
    "backend": "backend",
    "device": "device type",
    "device_names": "GPU model",
    "world_size": "world size",
    "nnodes": "node count",
    "topology_links": "topology",
}


class Mark(str, Enum):
    better = "better"
    worse = "worse"
    same = "same"
    noisy = "noisy"
    missing = "missing"
    new = "new"
    """Only in the new run: shown, never judged."""


FAILING = (Mark.worse, Mark.missing)


class Basis(str, Enum):
    """Which rule set a point's limit: the largest of them applies."""

    tolerance = "tolerance"
    latency_tolerance = "latency tolerance"
    """The point is latency-bound (`latency_bound`)."""
    block_spread = "between-block spread"
    """`Z_LIMIT` spreads of the baseline's block medians (no history)."""
    history_spread = "between-run spread"
    """`Z_LIMIT` spreads of the history's medians of the point."""


@dataclass(kw_only=True, slots=True)
class GateSettings:
    """How strict the gate is. The defaults pass a repeat on a noisy shared machine."""

    tolerance: float = DEFAULT_TOLERANCE
    """Largest busbw drop (fraction) accepted at bandwidth-bound points."""
    latency_tolerance: float = DEFAULT_LATENCY_TOLERANCE
    """Largest drop accepted at latency-bound points (small messages)."""
    alpha: float = DEFAULT_ALPHA
    """Significance level of the one-sided test (Mann-Whitney on the samples, or the z
    against a history)."""
    noisy_cv: float = DEFAULT_NOISY_CV
    """Robust spread (`dispersion`, IQR / 1.349 median) above which a point, or a whole
    baseline, is called noisy, in the notes and warnings. It moves no limit: how far the
    point's median moves between runs (`Spread`) does. Named for the coefficient of
    variation it stands in for."""
    allow_mismatch: bool = False
    """Compare runs whose comparability context differs, instead of refusing."""

    def __post_init__(self) -> None:
        # The tolerances are fractions already, parsed and checked where they entered (a
        # `Fraction` field of the request, the suite's `compare` keys, suite.json as read);
        # alpha and noisy_cv have no kind of their own yet, and are checked here.
        if not 0 < self.alpha < 1:
            raise UserError("--alpha must be between 0 and 1")
        if not math.isfinite(self.noisy_cv) or self.noisy_cv <= 0:
            raise UserError("--noisy-cv must be a positive number")


# -- statistics -----------------------------------------------------------------------------


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of `values`, and the sizes of the groups of ties."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        average = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = average
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided p-value of the Mann-Whitney U test that `x` tends to be greater than `y`.

    Normal approximation with the tie correction of the variance and a continuity
    correction (as scipy's `mannwhitneyu(x, y, alternative="greater", method="asymptotic")`).
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples must be non-empty")
    ranks, ties = _ranks([*x, *y])
    u1 = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:
        return 1.0  # every value tied: no evidence either way
    z = (u1 - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def decisive(n1: int, n2: int, alpha: float) -> bool:
    """Whether samples of n1 and n2 iterations can show a change at `alpha` at all: the test
    on a complete separation (every one of one side above every one of the other) would.
    Three against three never can (p = 0.04 at best), so a test there would excuse a 20x
    drop as chance; below this, and under `MIN_SAMPLES`, the ratio alone decides, as it does
    for points without samples."""
    if min(n1, n2) < MIN_SAMPLES:
        return False
    return (
        mann_whitney_greater([float(n2 + i) for i in range(n1)], [float(i) for i in range(n2)])
        < alpha
    )


# -- the comparison ---------------------------------------------------------------------------


def _key_fields(key: PointKey) -> dict[str, Any]:
    return dict(zip(KEY_FIELDS, key))


def _measured(row: ResultRow) -> bool:
    return row.check != CHECK_FAILED and math.isfinite(row.time_us) and row.time_us > 0


def dispersion(row: ResultRow) -> float | None:
    """A point's robust spread, IQR / (1.349 x median): `Stats.spread`."""
    return row.stats.spread()


def is_noisy(spread: float | None, threshold: float = DEFAULT_NOISY_CV) -> bool:
    """Whether a robust spread (a point's, or a run's `noise_index`) is too wide to trust its
    median: the one noise rule of the gate's notes, the command line and the reports."""
    return spread is not None and spread > threshold


def noisy_warning(rows: Sequence[ResultRow], threshold: float = DEFAULT_NOISY_CV) -> str | None:
    """One sentence on the points whose robust spread is past `threshold`, or None: the
    same words on the command line and in reports."""
    noisy = [r for r in rows if r.stats.n and is_noisy(dispersion(r), threshold)]
    if not noisy:
        return None
    return (
        f"{len(noisy)} of {len(rows)} points are noisy (robust spread, IQR/1.349 median, "
        f"> {threshold:.0%}); the median is robust, but compare such points with care or "
        "raise --min-time"
    )


def noise_index(rows: Iterable[ResultRow]) -> float | None:
    """The run's own dispersion: the median robust spread of its measured points."""
    spreads = [d for r in rows if _measured(r) and (d := dispersion(r)) is not None]
    return statistics.median(spreads) if spreads else None


def block_medians(samples: Sequence[float], blocks: int = BLOCKS) -> list[float]:
    """The medians of `samples` cut, in the order they were taken, into `blocks` contiguous
    blocks of nearly equal size (one per sample when there are fewer)."""
    n = len(samples)
    blocks = min(blocks, n)
    return [
        statistics.median(samples[i * n // blocks : (i + 1) * n // blocks]) for i in range(blocks)
    ]


def robust_sigma(values: Sequence[float]) -> float:
    """The standard deviation of normal values, estimated robustly: MAD x 1.4826. One wild
    value among eight moves it little; the standard deviation it would multiply."""
    center = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - center) for v in values)


def _logs(values: Iterable[float]) -> list[float]:
    return [math.log(v) for v in values if math.isfinite(v) and v > 0]


@dataclass(kw_only=True, slots=True, frozen=True)
class Spread:
    """How far a point's median moves between runs: the standard deviation of its log (0.02:
    about 2%), and what it was measured from."""

    sigma: float
    basis: Basis
    """`Basis.history_spread` or `Basis.block_spread`."""
    count: int
    """The runs (history) or blocks (baseline) it was measured from."""
    own: float
    """The point's own estimate, before its series' typical spread (`pooled`) raised it."""

    @classmethod
    def of_history(cls, medians_us: Sequence[float]) -> Spread | None:
        """From the medians of a point in the history's runs; None with fewer than
        `MIN_HISTORY` of them."""
        logs = _logs(medians_us)
        if len(logs) < MIN_HISTORY:
            return None
        own = robust_sigma(logs)
        return cls(sigma=max(own, MIN_SPREAD), basis=Basis.history_spread, count=len(logs), own=own)

    @classmethod
    def of_blocks(cls, samples_us: Sequence[float]) -> Spread | None:
        """From the baseline point's blocks of iterations in time order (`block_medians`):
        the robust spread of the block medians. A block is a short run, and how far its
        median moves over the run stands for how far a run's median moves between runs: a
        slow minute inside the run shows, a few slow iterations do not. (The batch-means
        error of the run's median, this over the square root of the blocks, was measured too
        small: on a shaped link a point's median moved between runs several times as far as
        the run's own blocks said, and repeats failed 26 of 50 pairs; docs/ci.md.) None with
        fewer than `MIN_BLOCKS` samples."""
        logs = _logs(samples_us)
        if len(logs) < MIN_BLOCKS:
            return None
        blocks = block_medians(logs)
        own = robust_sigma(blocks)
        return cls(sigma=max(own, MIN_SPREAD), basis=Basis.block_spread, count=len(blocks), own=own)

    @property
    def scale(self) -> float:
        """The spread of the difference the gate tests, as a multiple of `sigma`: two
        medians of runs (pairwise), or a run's against the median of `count` runs (a history:
        a median of k runs varies about pi/2 / k as much as one)."""
        if self.basis is Basis.history_spread:
            return math.sqrt(1 + math.pi / 2 / self.count)
        return math.sqrt(2)

    @property
    def limit(self) -> float:
        """The change of log time beyond which a point's median has moved more than the runs
        do: `Z_LIMIT` spreads of the difference."""
        return Z_LIMIT * self.sigma * self.scale

    def z(self, log_ratio: float) -> float:
        """A change of log time in spreads of the difference."""
        return log_ratio / (self.sigma * self.scale)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sigma": self.sigma,
            "basis": self.basis.value,
            "count": self.count,
            "own": self.own,
        }


def pooled(
    spreads: dict[PointKey, Spread], series: dict[PointKey, SeriesKey]
) -> dict[PointKey, Spread]:
    """Each point's spread raised to its series' typical one (the median of the series' own
    estimates): a point whose few runs or blocks happened to agree is held to its neighbours'
    spread, never to a tighter one of chance."""
    by_series: dict[SeriesKey, list[float]] = {}
    for key, spread in spreads.items():
        by_series.setdefault(series[key], []).append(spread.own)
    typical = {s: statistics.median(v) for s, v in by_series.items()}
    return {
        key: replace(spread, sigma=max(spread.sigma, typical[series[key]]))
        for key, spread in spreads.items()
    }


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


@dataclass(kw_only=True, slots=True, frozen=True)
class PointResult(KeyedPoint):
    """One point's verdict. `ratio` is new speed / baseline speed: 0.8 = 20% slower."""

    mark: Mark
    reason: str
    skew: str = ""
    """The row's skew (`ResultRow.skew`): '' for every op but all_to_allv."""
    base_busbw_gbps: float | None = None
    new_busbw_gbps: float | None = None
    base_time_us: float | None = None
    new_time_us: float | None = None
    ratio: float | None = None
    p_value: float | None = None
    """One-sided p of the move (slower for drops, faster for gains): the Mann-Whitney test on
    the samples (pairwise), or the normal tail of the new median's z against the history's;
    None where nothing could test it."""
    threshold: float | None = None
    """The limit the point was held to, as a busbw change (fraction), on the side it moved:
    -0.05 for a point no faster than the baseline that had to drop more than 5% to count,
    +0.43 for a faster one that had to gain more than 43% to be better."""
    basis: Basis | None = None
    """Which rule set `threshold` (the largest of them applies)."""
    latency_bound: bool = False
    base_cv: float | None = None
    new_cv: float | None = None
    spread: float | None = None
    """The between-run spread the point was judged against (`Spread.sigma`: the standard
    deviation of the log of its median); None where none could be measured."""
    z: float | None = None
    """The change in spreads of the difference (`Spread.z`), slower positive."""
    confirmed: str | None = None
    """What measuring the point again said (`run --confirm`): how many of the confirmations
    were worse too; None when it was not measured again."""

    @property
    def failing(self) -> bool:
        return self.mark in FAILING

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mark"] = self.mark.value
        data["basis"] = self.basis.value if self.basis else None
        return data


@dataclass(kw_only=True, slots=True)
class Comparison:
    """Everything the gate decided; the CLI renders it, `exit_code` says how to leave."""

    baseline: str
    new: str
    settings: GateSettings
    points: list[PointResult]
    mismatches: list[str] = field(default_factory=list)
    """Context differences that were allowed with --allow-mismatch."""
    baseline_noise: float | None = None
    new_noise: float | None = None
    noisy_baseline: bool = False
    """The baseline's iterations are noisy (`noise_index` past `noisy_cv`): said in a note."""
    reference: str = "baseline"
    """What the limits came from: the baseline's blocks of iterations, or the history."""
    history_runs: list[str] = field(default_factory=list)
    """The history's runs the reference was taken from (oldest first); [] without one."""
    notes: list[str] = field(default_factory=list)
    incomplete: str | None = None
    """Why the new run cannot pass whatever its points say: it failed, was interrupted, or
    is (or was left) running. Its points are still compared and shown."""

    def marked(self, *marks: Mark) -> list[PointResult]:
        return [p for p in self.points if p.mark in marks]

    @property
    def regressions(self) -> list[PointResult]:
        return [p for p in self.points if p.failing]

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.regressions or self.incomplete else EXIT_OK

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK

    def to_frame(self) -> pandas.DataFrame:
        """A row per compared point (its key, mark, reason, both sides' busbw and time, the
        ratio and p-value) as a pandas DataFrame."""
        import pandas

        return pandas.DataFrame(
            [p.to_dict() for p in self.points], columns=[f.name for f in fields(PointResult)]
        )

    @property
    def verdict(self) -> str:
        worse, missing = len(self.marked(Mark.worse)), len(self.marked(Mark.missing))
        noisy = len(self.marked(Mark.noisy))
        judged = len([p for p in self.points if p.mark is not Mark.new])
        if self.incomplete:
            return f"FAIL: {self.incomplete}; {worse} worse, {missing} missing of {judged} points"
        if worse or missing:
            parts = [f"{worse} worse"] if worse else []
            parts += [f"{missing} missing"] if missing else []
            return f"REGRESSION: {', '.join(parts)} of {judged} points"
        if noisy:
            return f"PASS with warnings: {noisy} of {judged} points too noisy to judge"
        return f"PASS: no regression in {judged} points"

    def to_dict(self) -> dict[str, Any]:
        counts = {m.value: len(self.marked(m)) for m in Mark}
        return {
            "baseline": self.baseline,
            "new": self.new,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "settings": asdict(self.settings),
            "baseline_noise": self.baseline_noise,
            "new_noise": self.new_noise,
            "noisy_baseline": self.noisy_baseline,
            "reference": self.reference,
            "history_runs": self.history_runs,
            "mismatches": self.mismatches,
            "notes": self.notes,
            "incomplete": self.incomplete,
            "counts": counts,
            "points": [p.to_dict() for p in self.points],
        }


def _differs(a: Any, b: Any) -> bool:
    if a in (None, [], "") or b in (None, [], ""):
        return False  # unknown on one side (an imported log, no NVML): nothing to refuse on
    if isinstance(a, list) and isinstance(b, list):
        return sorted(map(str, a)) != sorted(map(str, b))
    return bool(a != b)


def context_mismatches(base: RunContext, new: RunContext) -> list[str]:
    """What breaks comparability between two runs' contexts, one line per difference."""
    a, b = base.comparable(), new.comparable()
    out = []
    for key, label in _CONTEXT_LABELS.items():
        if _differs(a.get(key), b.get(key)):
            if key == "topology_links":
                out.append(f"{label} differs (GPU link matrix)")
            else:
                out.append(f"{label} differs: {a.get(key)} vs {b.get(key)}")
    return out


def as_drop(spread: float) -> float:
    """A spread of times as a busbw drop (fraction): +f in time is -f/(1+f) in busbw."""
    return spread / (1 + spread)


def latency_bound(row: ResultRow, peak: float) -> bool:
    """Whether the gate holds a baseline point to the latency tolerance: it has no busbw
    (barrier), or its busbw is under half its series' `peak` (the summary's
    `bandwidth_bound`, so both name the same points)."""
    if row.busbw_gbps is None or not math.isfinite(row.busbw_gbps):
        return True  # barrier: nothing but latency
    return peak > 0 and not bandwidth_bound(row.busbw_gbps, peak)


def judge_point(
    base: ResultRow,
    new: ResultRow | None,
    settings: GateSettings,
    *,
    peak: float = 0.0,
    spread: Spread | None = None,
    center_us: float | None = None,
) -> PointResult:
    """The gate's decision on one measured baseline point, the one place it is made.

    `new` is the new run's point with the same key (None: absent); `peak` the highest busbw
    of the baseline point's series (`results.summary.series_peaks`); `spread` how far the
    point's median moves between runs (`Spread`: the history's, or the baseline's blocks);
    `center_us` the history's median of the point, which then stands for the baseline's.
    The new point is missing when absent, wrong or not measured. Otherwise its limit is the
    largest of the tolerance (the latency tolerance below half the peak) and the spread's
    (`Spread.limit`). A drop past the limit is worse when it is significant (the one-sided
    Mann-Whitney test on the samples below `alpha`, or with a history the normal tail of its
    z; with neither, the ratio alone), noisy when not; a drop past the tolerance but within
    the spread is noisy; a gain past the limit on the fast side is better when significant.
    Every figure is the samples' (`ResultRow.sample_median_us`).
    """
    key = base.key
    if new is None:
        return _bare(key, Mark.missing, "not in the new run", base)
    if new.check == CHECK_FAILED:
        return _bare(key, Mark.missing, "wrong result in the new run", base)
    if not _measured(new):
        return _bare(key, Mark.missing, new.note or "not measured in the new run", base)
    return _judge_measured(
        base, new, settings, latency=latency_bound(base, peak), spread=spread, center_us=center_us
    )


_Limit = tuple[float, Basis]
"""A limit on a point's move, as a fraction, and the rule that set it."""


def _judge_measured(
    base: ResultRow,
    new: ResultRow,
    settings: GateSettings,
    *,
    latency: bool,
    spread: Spread | None,
    center_us: float | None,
) -> PointResult:
    """`judge_point` on a point the new run measured: its move against the reference median,
    that move's test, and the mark they give. Apart from the missing cases so that everything
    here has two medians to compare; `latency`: held to the latency tolerance."""
    tolerance, drop, gain = _limits(latency, settings, spread)
    base_us = center_us if center_us is not None else base.sample_median_us()
    new_us = new.sample_median_us()
    ratio = base_us / new_us
    log_ratio = math.log(new_us / base_us)  # > 0: slower
    moved = (ratio < 1 - tolerance, ratio > 1 + tolerance)  # past the tolerance: down, up
    z = spread.z(log_ratio) if spread is not None else None
    p_value: float | None
    if center_us is not None and spread is not None:  # the new median against the history's
        p_value = normal_sf(abs(spread.z(log_ratio)))
        how = f"z={z:+.1f} against {spread.count} runs, p={p_value:.2g}"
    else:
        p_value, how = _samples_test(base, new, settings.alpha, moved)
    significant = p_value is None or p_value < settings.alpha
    mark, reason, (limit, basis) = _marked(base, ratio, drop, gain, moved, significant, how)
    return PointResult(
        **_key_fields(base.key),
        mark=mark,
        reason=reason,
        base_busbw_gbps=_reference_busbw(base, center_us),
        new_busbw_gbps=new.sample_busbw_gbps(),
        base_time_us=base_us,
        new_time_us=new_us,
        ratio=ratio,
        p_value=p_value,
        threshold=limit,
        basis=basis,
        latency_bound=latency,
        base_cv=base.stats.cv if math.isfinite(base.stats.cv) else None,
        new_cv=new.stats.cv if math.isfinite(new.stats.cv) else None,
        spread=spread.sigma if spread is not None else None,
        z=z,
    )


def _limits(
    latency: bool, settings: GateSettings, spread: Spread | None
) -> tuple[float, _Limit, _Limit]:
    """The point's tolerance (the latency tolerance when it is latency-bound), and its limits
    on the slow and the fast side: each the largest of the tolerance and the spread's
    (`Spread.limit`). Apart from `judge_point` so that where each limit comes from is read in
    one place; the first of equal limits names the rule (max() keeps the first largest)."""
    tolerance = (
        (settings.latency_tolerance, Basis.latency_tolerance)
        if latency
        else (settings.tolerance, Basis.tolerance)
    )
    drops, gains = [tolerance], [tolerance]
    if spread is not None:
        drops.append((1 - math.exp(-spread.limit), spread.basis))
        gains.append((math.exp(spread.limit) - 1, spread.basis))
    return tolerance[0], max(drops, key=_first), max(gains, key=_first)


def _samples_test(
    base: ResultRow, new: ResultRow, alpha: float, moved: tuple[bool, bool]
) -> tuple[float | None, str]:
    """The p-value of a move past the tolerance (`moved`: down, up) from the samples, by the
    one-sided Mann-Whitney test in the direction it moved, and how it was found, for the
    reason. Without a history the samples are all the gate has; too few to decide leave the
    ratio alone (no p-value)."""
    if not decisive(len(base.samples_us), len(new.samples_us), alpha):
        return None, "too few samples to test: ratio alone"
    if not (moved[0] or moved[1]):
        return None, ""
    x, y = (new.samples_us, base.samples_us) if moved[0] else (base.samples_us, new.samples_us)
    p_value = mann_whitney_greater(x, y)
    return p_value, f"p={p_value:.2g}"


def _marked(
    base: ResultRow,
    ratio: float,
    drop: _Limit,
    gain: _Limit,
    moved: tuple[bool, bool],
    significant: bool,
    how: str,
) -> tuple[Mark, str, _Limit]:
    """A measured point's mark, its reason, and the limit that reason names (`drop` on the
    slow side, `gain` on the fast; `moved`: past the tolerance, down and up; `how`: the test,
    which found the move `significant` or not). One chain from the slow side to the fast, each
    mark written beside its reason: past the limit, worse (noisy when not significant); past
    the tolerance within the spread, noisy; on the fast side better (same when not
    significant), else same. The change is in busbw where the baseline has one, else in time."""
    busbw = base.busbw_gbps is not None and math.isfinite(base.busbw_gbps)
    change = f"{ratio - 1:+.1%} busbw" if busbw else f"{1 / ratio - 1:+.1%} time"
    limit, basis = (-drop[0], drop[1]) if ratio <= 1 else gain
    tested = how if significant else f"not significant ({how})"
    beyond = f"{change} beyond {limit:+.0%} ({basis.value}), {tested}"
    within = f"{change}, within the {basis.value} ({limit:+.0%})"
    if ratio < 1 - drop[0]:
        return (Mark.worse if significant else Mark.noisy), beyond, (limit, basis)
    if moved[0]:
        return Mark.noisy, within, (limit, basis)
    if ratio > 1 + gain[0]:
        return (Mark.better if significant else Mark.same), beyond, (limit, basis)
    if moved[1]:
        return Mark.same, within, (limit, basis)
    return Mark.same, change, (limit, basis)


def _reference_busbw(base: ResultRow, center_us: float | None) -> float | None:
    """The baseline point's busbw at the reference median: its own, or, when the history's
    median stands for the baseline's (`center_us`), scaled to that median, so the busbw shown
    beside the reference time is the one that time gives."""
    base_busbw = base.sample_busbw_gbps()
    if center_us is not None and base_busbw is not None:
        base_busbw *= base.sample_median_us() / center_us
    return base_busbw


def _first(limit: _Limit) -> float:
    return limit[0]


def _index(rows: list[ResultRow]) -> dict[PointKey, ResultRow]:
    out: dict[PointKey, ResultRow] = {}
    for row in rows:
        out.setdefault(row.key, row)
    return out


def _bare(key: PointKey, mark: Mark, reason: str, row: ResultRow) -> PointResult:
    return PointResult(
        **_key_fields(key),
        mark=mark,
        reason=reason,
        base_busbw_gbps=row.sample_busbw_gbps() if mark is not Mark.new else None,
        new_busbw_gbps=row.sample_busbw_gbps() if mark is Mark.new else None,
        base_time_us=row.sample_median_us() if mark is not Mark.new else None,
        new_time_us=row.sample_median_us() if mark is Mark.new else None,
    )


HistoryMedians = Mapping[PointKey, Sequence[float]]
"""A history's reference: for each point, its median time (µs) in each comparable run since
its series last changed, oldest first (`commbench.history`'s `Reference.medians_us`)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Reference:
    """What each point of a comparison is held to: its spread, and with a history the
    history's median of it (which then stands for the baseline's)."""

    spreads: dict[PointKey, Spread]
    centers_us: dict[PointKey, float]

    @classmethod
    def of(cls, base: Mapping[PointKey, ResultRow], history: HistoryMedians | None) -> Reference:
        """Each measured baseline point's spread: the history's where it holds at least
        `MIN_HISTORY` runs of the point (the baseline's median among them, if it is not one of
        them already), else its blocks'; then raised to its series' typical one (`pooled`)."""
        spreads: dict[PointKey, Spread] = {}
        centers: dict[PointKey, float] = {}
        for key, row in base.items():
            medians = [m for m in (history or {}).get(key, ()) if math.isfinite(m) and m > 0]
            spread = Spread.of_history(medians) if history is not None else None
            if spread is not None:
                centers[key] = statistics.median(medians)
            else:
                spread = Spread.of_blocks(row.samples_us)
            if spread is not None:
                spreads[key] = spread
        series = {key: series_key(base[key]) for key in spreads}
        return cls(spreads=pooled(spreads, series), centers_us=centers)


def compare_rows(
    base_rows: list[ResultRow] | None,
    new_rows: list[ResultRow],
    settings: GateSettings,
    history: HistoryMedians | None = None,
) -> tuple[list[PointResult], Reference]:
    """Judge every point; returns the points and what they were held to. Without
    `base_rows` (a gate against a history alone) the new run's points are judged against the
    history's medians where it holds `MIN_HISTORY` runs of them, and shown as new where not."""
    new = _index(new_rows)
    alone = base_rows is None
    base = new if base_rows is None else _index(base_rows)
    measured = {key: row for key, row in base.items() if _measured(row)}
    reference = Reference.of(measured, history)
    if alone:  # no baseline to fall back on: only the history's points are judged
        measured = {k: r for k, r in measured.items() if k in reference.centers_us}
    peaks = series_peaks(measured.values())
    points: list[PointResult] = []
    for key, b in measured.items():
        points.append(
            judge_point(
                b,
                new.get(key),
                settings,
                peak=peaks.get(series_key(b), 0.0),
                spread=reference.spreads.get(key),
                center_us=reference.centers_us.get(key),
            )
        )
    for key, n in new.items():
        if key not in measured and _measured(n):
            why = f"fewer than {MIN_HISTORY} comparable runs in the history"
            points.append(_bare(key, Mark.new, why if alone else "not in the baseline", n))
    return points, reference


def compare_runs(
    base: Run,
    new: Run,
    settings: GateSettings | None = None,
    *,
    history: HistoryMedians | None = None,
    history_runs: Sequence[str] = (),
) -> Comparison:
    """Compare two stored runs, judged against the baseline's blocks of iterations, or with
    `history` (its points' medians in `history_runs`) against how far they moved between
    those runs. Raises UserError when they cannot be compared."""
    settings = settings or GateSettings()
    if base.kind.family is not new.kind.family:  # no point of one is a point of the other
        raise UserError(
            f"{base.path} and {new.path} are not comparable: a {base.kind.value} run and a "
            f"{new.kind.value} run measure different things"
        )
    mismatches = context_mismatches(base.context, new.context)
    if mismatches and not settings.allow_mismatch:
        raise UserError(
            f"{base.path} and {new.path} are not comparable: "
            + "; ".join(mismatches)
            + " (pass --allow-mismatch to compare anyway)"
        )
    if not any(_measured(r) for r in base.rows):
        raise UserError(f"{base.path}: the baseline has no measured points")
    points, reference = compare_rows(base.rows, new.rows, settings, history)
    base_noise = noise_index(base.rows)
    notes = []
    if base.unfinished:
        notes.append(f"the baseline {base.unfinished}")
    incomplete = None
    if new.unfinished:
        incomplete = f"the new run {new.unfinished}"
    judged = [p for p in points if p.mark is not Mark.new]
    from_history = sum(1 for s in reference.spreads.values() if s.basis is Basis.history_spread)
    if history is not None:
        described = f"a history of {len(history_runs)} run(s)" + (
            f" ({from_history} of {len(judged)} points with {MIN_HISTORY} or more)"
        )
        if from_history < len(judged):
            notes.append(
                f"{len(judged) - from_history} point(s) have fewer than {MIN_HISTORY} comparable "
                "runs in the history: judged against the baseline's blocks of iterations"
            )
    else:
        described = f"the baseline's iterations in {BLOCKS} blocks over time"
    noisy_baseline = is_noisy(base_noise, settings.noisy_cv)
    if noisy_baseline:
        notes.append(
            f"the baseline's iterations are noisy (median spread {base_noise:.3f} > "
            f"{settings.noisy_cv:g}); the limits come from how far its medians move, and a "
            "point that ran in a slow mode once fails like a regression: confirm with "
            "`commbench run --confirm 3`, or judge against a history"
        )
    if any(not r.samples_us for r in base.rows + new.rows if _measured(r)):
        notes.append("points without per-iteration samples are judged on the ratio alone")
    return Comparison(
        baseline=str(base.path),
        new=str(new.path),
        settings=settings,
        points=points,
        mismatches=mismatches,
        baseline_noise=base_noise,
        new_noise=noise_index(new.rows),
        noisy_baseline=noisy_baseline,
        reference=described,
        history_runs=list(history_runs),
        notes=notes,
        incomplete=incomplete,
    )


def compare_history(
    new: Run,
    history: HistoryMedians,
    history_runs: Sequence[str],
    settings: GateSettings | None = None,
) -> Comparison:
    """Judge a new run against a history alone (`run --gate --history`): each point against
    the median of its comparable runs since its series last changed, and how far those moved
    (`Basis.history_spread`); a point with fewer than `MIN_HISTORY` of them is shown, not
    judged."""
    settings = settings or GateSettings()
    points, _ = compare_rows(None, new.rows, settings, history)
    judged = sum(1 for p in points if p.mark is not Mark.new)
    notes = []
    if judged < len(points):
        notes.append(
            f"{len(points) - judged} point(s) have fewer than {MIN_HISTORY} comparable runs in "
            "the history: shown, not judged"
        )
    return Comparison(
        baseline=f"history ({len(history_runs)} runs)",
        new=str(new.path),
        settings=settings,
        points=points,
        new_noise=noise_index(new.rows),
        reference=f"a history of {len(history_runs)} run(s)",
        history_runs=list(history_runs),
        notes=notes,
        incomplete=f"the new run {new.unfinished}" if new.unfinished else None,
    )


@dataclass(slots=True)
class Gate:
    """The regression gate's decision on a new run (or suite) against its baseline: one
    `Comparison` per run compared, named as a suite names its entries (a run against a run
    is one comparison). What `commbench compare` prints and exits with, and what
    `commbench.compare` returns."""

    comparisons: list[tuple[str, Comparison]]

    def __iter__(self) -> Iterator[tuple[str, Comparison]]:
        return iter(self.comparisons)

    def __len__(self) -> int:
        return len(self.comparisons)

    def __getitem__(self, name: str) -> Comparison:
        for entry, comparison in self.comparisons:
            if entry == name:
                return comparison
        raise KeyError(name)

    @property
    def exit_code(self) -> int:
        """1 when any comparison failed (a regression, or an incomplete new run), else 0."""
        return max((c.exit_code for _, c in self.comparisons), default=EXIT_OK)

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK

    @property
    def verdict(self) -> str:
        """Each comparison's verdict line, named when there are several."""
        if len(self.comparisons) == 1:
            return self.comparisons[0][1].verdict
        return "; ".join(f"{name}: {c.verdict}" for name, c in self.comparisons)

    def to_frame(self) -> pandas.DataFrame:
        """Every compared point of every comparison, with its `entry` name first."""
        import pandas

        frames = [c.to_frame().assign(entry=name) for name, c in self.comparisons]
        columns = ["entry", *(f.name for f in fields(PointResult))]
        if not frames:
            return pandas.DataFrame(columns=columns)
        return pandas.concat(frames, ignore_index=True)[columns]
