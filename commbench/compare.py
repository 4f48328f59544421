"""The regression gate: compare two runs point by point and say whether the new one is worse.

A point is keyed by (op, strategy, dtype, reduce op, world size, size, in-place, skew): an
all_to_allv point of one skew is never held to another's, and a row stored before rows named
their skew has none, the key it always had. It
regresses when its bus bandwidth drops by more than its limit AND a one-sided Mann-Whitney U
test on the stored per-iteration samples says the drop is not chance. The limit is the
largest of:

- the tolerance, or the latency tolerance at latency-bound points (busbw under half the best
  of their series, or no busbw at all): their times are a few microseconds of launch and
  wake-up jitter;
- the noise floor: the baseline's own dispersion, the median robust spread (IQR / 1.349
  median) of its points;
- the noise bands: what the baseline itself produced, its iteration times from the 5th to
  the 95th percentile as multiples of their point's median (`NoiseBand`), at the point and
  pooled over the whole baseline. A new median inside a band is a time the baseline's own
  iterations took: on a noisy machine a median moves between two runs of the same work about
  as far as the machine's iterations stray, more than one point's few samples show, so such
  a drop is noise (a warning). A significant drop beyond every band fails. On a quiet
  machine the bands are narrower than the tolerance and change nothing.

On a noisy baseline (`baseline_is_noisy`) one more rule, of breadth, judges the run as a
whole: a significant drop beyond the bands at fewer than half of the points of its series
and fewer than a quarter of all the points is isolated, a warning ("rerun to confirm"), not a
failure. On such a machine a whole point now and then runs in a slow mode (a rank waiting
for a core) that its baseline never showed, 6-60x slower; a regression of the code or the
machine is shared by a series or by the run. A quiet baseline keeps the per-point rule, so a
single-size regression fails there.

Only the baseline excuses a drop: a new run's own noise is no reason to pass it. A speed-up
is better when it is significant and beyond the same limits on the fast side (the bands'
5th percentile). The spread is the interquartile range rather than the standard deviation
because a few outliers (a descheduled iteration) inflate the latter without making the
median less sure.

A point present in the baseline but missing, failed or not run in the new run always
regresses. Runs whose comparability context differs are refused unless asked otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

from commbench.errors import EXIT_FAILED, EXIT_OK, UserError, quoted
from commbench.numbers import parse_number
from commbench.results.record import RunContext, RunKind
from commbench.results.runs import Run
from commbench.results.schema import CHECK_FAILED, ROW_KEY, ResultRow, RowKey
from commbench.results.summary import SeriesKey, bandwidth_bound, series_key, series_peaks
from commbench.stats import quantile

if TYPE_CHECKING:
    import pandas

DEFAULT_TOLERANCE = 0.05
DEFAULT_LATENCY_TOLERANCE = 0.15
DEFAULT_ALPHA = 0.01
# The same limit `commbench collectives` warns at: above it, one run's median is not a
# reliable estimate of the next run's.
DEFAULT_NOISY_CV = 0.2
# Fewer samples than this on either side, or too few for the test to decide (`decisive`): no
# test, the ratio alone decides.
MIN_SAMPLES = 3
BAND_QUANTILES = (0.05, 0.95)
"""The quantiles of a baseline's iteration times (each over its point's median) that bound
its noise band: a new median between them is a time the baseline itself produced."""

SLOW_TAIL = 2.0
"""A baseline whose pooled band reaches this multiple of its points' medians (one iteration
in twenty took at least twice its point's median) is noisy whatever its spread: the machine
takes a rank's core away, and can take a whole point's."""
ISOLATED_SERIES = 0.5
"""On a noisy baseline, a drop beyond the bands is isolated at fewer than this fraction of the
points of its series ..."""
ISOLATED_RUN = 0.25
"""... and fewer than this fraction of all the points compared (`isolate`)."""

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
    noise_floor = "noise floor"
    """The baseline's median robust spread (`noise_index`)."""
    point_band = "point's noise band"
    """The band of the baseline point's own samples."""
    baseline_band = "baseline's noise band"
    """The band of all the baseline's samples, pooled."""
    isolated = "isolated drop on a noisy baseline"
    """The drop was beyond the limit its reason names (a band), but at too few points of its
    series and of the run to fail on a noisy baseline (`isolate`): a warning."""


def parse_fraction(text: str | float, what: str = "tolerance") -> float:
    """`5%` or `0.05` -> 0.05. A bare number of 1 or more is refused as ambiguous."""
    expected = "expected a percentage like 5% or a fraction like 0.05"
    if isinstance(text, bool):
        raise UserError(f"{what}: {expected}")
    raw = str(text).strip()
    percent = raw.endswith("%")
    try:  # ASCII digits and finite: float() would take a fullwidth 5, 'nan' and 'inf'
        number = parse_number(raw[:-1] if percent else raw, what)
    except UserError:
        raise UserError(f"{what}: {expected}, got {quoted(str(text))}") from None
    value = number / 100 if percent else number
    if not percent and value >= 1:
        raise UserError(f"{what}: {raw} is ambiguous; write {raw}% or {value / 100:g}")
    if not 0 <= value < 1:
        raise UserError(f"{what}: must be between 0% and 100%, got {raw}")
    return value


@dataclass(kw_only=True, slots=True)
class GateSettings:
    """How strict the gate is. The defaults pass a repeat on a noisy shared machine."""

    tolerance: float = DEFAULT_TOLERANCE
    """Largest busbw drop (fraction) accepted at bandwidth-bound points."""
    latency_tolerance: float = DEFAULT_LATENCY_TOLERANCE
    """Largest drop accepted at latency-bound points (small messages)."""
    alpha: float = DEFAULT_ALPHA
    """Significance level of the one-sided Mann-Whitney test."""
    noisy_cv: float = DEFAULT_NOISY_CV
    """Robust spread (`dispersion`, IQR / 1.349 median) above which a point, or a whole
    baseline, is called noisy, in the notes and warnings; a noisy baseline (this, or a slow
    tail: `baseline_is_noisy`) also gets the breadth rule (`isolate`). It moves no limit: the
    noise bands (`NoiseBand`) do that, measured rather than switched on. Named for the
    coefficient of variation it stands in for."""
    allow_mismatch: bool = False
    """Compare runs whose comparability context differs, instead of refusing."""

    def __post_init__(self) -> None:
        for name in ("tolerance", "latency_tolerance"):
            if not 0 <= getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be between 0% and 100%")
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


@dataclass(kw_only=True, slots=True, frozen=True)
class NoiseBand:
    """What a baseline produced: the `BAND_QUANTILES` of its iteration times, each divided by
    its point's median. A new median between `low` and `high` times the baseline's median is
    a time the baseline's own iterations took; beyond them, it is not."""

    low: float
    """The 5th percentile, as a multiple of the median (at most 1)."""
    high: float
    """The 95th percentile, as a multiple of the median (at least 1)."""
    samples: int
    """How many iteration times it was measured from."""

    @classmethod
    def of(cls, rows: Iterable[ResultRow]) -> NoiseBand | None:
        """The band of the measured rows' samples, pooled; None without samples."""
        every = (s / r.time_us for r in rows if _measured(r) for s in r.samples_us)
        # a zero time is a clock's resolution, not a speed; an infinite ratio no band at all
        ratios = sorted(x for x in every if 0 < x < math.inf)
        if not ratios:
            return None
        low, high = (quantile(ratios, q) for q in BAND_QUANTILES)
        return cls(low=min(low, 1.0), high=max(high, 1.0), samples=len(ratios))

    @property
    def drop(self) -> float:
        """The busbw drop (fraction) at its slow edge."""
        return as_drop(self.high - 1)

    @property
    def gain(self) -> float:
        """The busbw gain (fraction) at its fast edge."""
        return 1 / self.low - 1

    def to_dict(self) -> dict[str, Any]:
        return {"quantiles": list(BAND_QUANTILES), **asdict(self)}


def baseline_is_noisy(
    spread: float | None, band: NoiseBand | None, threshold: float = DEFAULT_NOISY_CV
) -> bool:
    """Whether a baseline is noisy, from its own samples: its median robust spread
    (`noise_index`) is past `threshold`, or its pooled band reaches `SLOW_TAIL` (a body too
    wide, or a tail too slow, to trust one run's median of a point). A quiet GPU node is
    neither (spread 0.02, band 0.97x-1.03x); the shared 2-core VM both, or at least the tail
    (spread 0.17-0.49, band top 3.8x-20x)."""
    return is_noisy(spread, threshold) or (band is not None and band.high >= SLOW_TAIL)


@dataclass(kw_only=True, slots=True)
class PointResult:
    """One point's verdict. `ratio` is new speed / baseline speed: 0.8 = 20% slower."""

    op: str
    strategy: str
    dtype: str
    reduce_op: str
    world_size: int
    size_bytes: int
    in_place: bool
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
    """One-sided Mann-Whitney p (slower for drops, faster for gains); None without samples."""
    threshold: float | None = None
    """The limit the point was held to, as a busbw change (fraction), on the side it moved:
    -0.05 for a point no faster than the baseline that had to drop more than 5% to count,
    +0.43 for a faster one that had to gain more than 43% to be better."""
    basis: Basis | None = None
    """Which rule set `threshold` (the largest of them applies)."""
    latency_bound: bool = False
    base_cv: float | None = None
    new_cv: float | None = None

    @property
    def key(self) -> PointKey:
        return cast(PointKey, tuple(getattr(self, name) for name in KEY_FIELDS))

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
    """The baseline is noisy (`baseline_is_noisy`): said in a note; isolated drops warn."""
    baseline_band: NoiseBand | None = None
    """The whole baseline's noise band, under every point's limit; None without samples."""
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
            "baseline_band": self.baseline_band.to_dict() if self.baseline_band else None,
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
    floor: float = 0.0,
    band: NoiseBand | None = None,
) -> PointResult:
    """The gate's decision on one measured baseline point, the one place it is made.

    `new` is the new run's point with the same key (None: absent); `peak` the highest busbw
    of the baseline point's series (`results.summary.series_peaks`), `floor` the baseline's
    own dispersion (`noise_index`) and `band` the whole baseline's `NoiseBand`. The new point
    is missing when absent, wrong or not measured. Otherwise its limit is the largest of the
    tolerance (the latency tolerance below half the peak), the floor, the point's own band and
    `band`. A drop past the limit is worse when it is significant (one-sided Mann-Whitney
    below `alpha`, or no samples to test), noisy when not; a drop past the tolerance and the
    floor but inside a band is noisy; a gain past the limit on the fast side is better when
    significant. Only the baseline's noise widens a limit.
    """
    key = base.key
    if new is None:
        return _bare(key, Mark.missing, "not in the new run", base)
    if new.check == CHECK_FAILED:
        return _bare(key, Mark.missing, "wrong result in the new run", base)
    if not _measured(new):
        return _bare(key, Mark.missing, new.note or "not measured in the new run", base)
    latency = latency_bound(base, peak)
    tolerance = (
        (settings.latency_tolerance, Basis.latency_tolerance)
        if latency
        else (settings.tolerance, Basis.tolerance)
    )
    drops = [tolerance, (as_drop(floor), Basis.noise_floor)]
    gains = [tolerance, (floor, Basis.noise_floor)]
    bands = [(NoiseBand.of([base]), Basis.point_band), (band, Basis.baseline_band)]
    # The first of equal limits names the rule: max() keeps the first largest.
    plain_drop, plain_gain = max(drops, key=_first), max(gains, key=_first)
    drop = max([*drops, *((b.drop, why) for b, why in bands if b)], key=_first)
    gain = max([*gains, *((b.gain, why) for b, why in bands if b)], key=_first)

    ratio = base.time_us / new.time_us
    base_cv = base.stats.cv if math.isfinite(base.stats.cv) else None
    new_cv = new.stats.cv if math.isfinite(new.stats.cv) else None
    moved_down = ratio < 1 - plain_drop[0]
    moved_up = ratio > 1 + plain_gain[0]
    tested = decisive(len(base.samples_us), len(new.samples_us), settings.alpha)
    p_value: float | None = None
    if tested and (moved_down or moved_up):
        x, y = (
            (new.samples_us, base.samples_us) if moved_down else (base.samples_us, new.samples_us)
        )
        p_value = mann_whitney_greater(x, y)
    significant = p_value is None or p_value < settings.alpha
    how = f"p={p_value:.2g}" if p_value is not None else "too few samples to test: ratio alone"
    change = f"{ratio - 1:+.1%} busbw" if base.busbw_gbps else f"{1 / ratio - 1:+.1%} time"
    limit, basis = (-drop[0], drop[1]) if ratio <= 1 else gain
    beyond = f"beyond {limit:+.0%} ({basis.value})"

    if ratio < 1 - drop[0]:
        mark = Mark.worse if significant else Mark.noisy
        reason = f"{change} {beyond}, " + (how if significant else f"not significant ({how})")
    elif moved_down:
        mark, reason = Mark.noisy, f"{change}, within the {basis.value} ({limit:+.0%})"
    elif ratio > 1 + gain[0]:
        mark = Mark.better if significant else Mark.same
        reason = f"{change} {beyond}, " + (how if significant else f"not significant ({how})")
    elif moved_up:
        mark, reason = Mark.same, f"{change}, within the {basis.value} ({limit:+.0%})"
    else:
        mark, reason = Mark.same, change

    return PointResult(
        **_key_fields(key),
        mark=mark,
        reason=reason,
        base_busbw_gbps=base.busbw_gbps,
        new_busbw_gbps=new.busbw_gbps,
        base_time_us=base.time_us,
        new_time_us=new.time_us,
        ratio=ratio,
        p_value=p_value,
        threshold=limit,
        basis=basis,
        latency_bound=latency,
        base_cv=base_cv,
        new_cv=new_cv,
    )


def _first(limit: tuple[float, Basis]) -> float:
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
        base_busbw_gbps=row.busbw_gbps if mark is not Mark.new else None,
        new_busbw_gbps=row.busbw_gbps if mark is Mark.new else None,
        base_time_us=row.time_us if mark is not Mark.new else None,
        new_time_us=row.time_us if mark is Mark.new else None,
    )


def compare_rows(
    base_rows: list[ResultRow],
    new_rows: list[ResultRow],
    settings: GateSettings,
) -> tuple[list[PointResult], float | None, NoiseBand | None]:
    """Judge every point; returns (points, the baseline's noise index, its noise band)."""
    base, new = _index(base_rows), _index(new_rows)
    base_noise = noise_index(base.values())
    floor = base_noise or 0.0
    band = NoiseBand.of(base.values())
    peaks = series_peaks(row for row in base.values() if _measured(row))

    points: list[PointResult] = []
    series: dict[PointKey, SeriesKey] = {}
    for key, b in base.items():
        if not _measured(b):
            continue  # nothing to hold the new run to
        series[key] = series_key(b)
        peak = peaks.get(series[key], 0.0)
        points.append(judge_point(b, new.get(key), settings, peak=peak, floor=floor, band=band))
    if baseline_is_noisy(base_noise, band, settings.noisy_cv):
        points = isolate(points, series)
    for key, n in new.items():
        if key not in base and _measured(n):
            points.append(_bare(key, Mark.new, "not in the baseline", n))
    return points, base_noise, band


def isolate(points: list[PointResult], series: dict[PointKey, SeriesKey]) -> list[PointResult]:
    """The breadth rule of a noisy baseline: each worse point whose drop is isolated, at fewer
    than `ISOLATED_SERIES` of the judged points of its series (`series`: each judged point's
    series key) while the run has worse points at fewer than `ISOLATED_RUN` of all it judged,
    becomes noisy, its reason saying so. Missing points are judged and counted, never
    excused.

    Why breadth: on a loaded machine a point sometimes runs wholly in a slow mode its baseline
    never showed (a rank waiting for a core), 6-60x slower and significant, at 1-2 points
    of a series of 8 and at most 2 of 40 in 270 repeat comparisons on the 2-core VM
    (results/reference/gate-false-positives-cpu.md); a regression of the code or the
    machine is shared by its series or by the run (the issue's 50 of 100 points, a throttled
    run's 10 of 10). A point cannot tell the two apart; the run can."""
    judged = [p for p in points if p.mark is not Mark.new]
    worse = [p for p in judged if p.mark is Mark.worse]
    if not worse or len(worse) >= ISOLATED_RUN * len(judged):
        return points
    size = Counter(series[p.key] for p in judged)
    hit = Counter(series[p.key] for p in worse)
    out = []
    for p in points:
        if p.mark is Mark.worse and hit[series[p.key]] < ISOLATED_SERIES * size[series[p.key]]:
            p = replace(
                p,
                mark=Mark.noisy,
                basis=Basis.isolated,
                reason=(
                    f"{p.reason}; isolated: {hit[series[p.key]]} of {size[series[p.key]]} "
                    f"points of its series ({len(worse)} of {len(judged)} in all) on a noisy "
                    "baseline; rerun to confirm"
                ),
            )
        out.append(p)
    return out


def _family(kind: RunKind) -> RunKind:
    """What a run's points measure: an nccl-tests import times the same collectives as a
    collectives run (comparing the two is what an import is for); p2p copies and diagnose's
    tests are of their own kinds."""
    return RunKind.COLLECTIVES if kind is RunKind.NCCL_TESTS else kind


def compare_runs(base: Run, new: Run, settings: GateSettings | None = None) -> Comparison:
    """Compare two stored runs. Raises UserError when they cannot be compared."""
    settings = settings or GateSettings()
    if _family(base.kind) != _family(new.kind):  # no point of one is a point of the other
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
    points, base_noise, band = compare_rows(base.rows, new.rows, settings)
    notes = []
    if base.unfinished:
        notes.append(f"the baseline {base.unfinished}")
    incomplete = None
    if new.unfinished:
        incomplete = f"the new run {new.unfinished}"
    noisy_baseline = baseline_is_noisy(base_noise, band, settings.noisy_cv)
    if noisy_baseline and band is not None:
        why = (
            f"median spread {base_noise:.3f} > {settings.noisy_cv:g}"
            if is_noisy(base_noise, settings.noisy_cv)
            else f"5% of its iterations took {SLOW_TAIL:g}x their point's median or more"
        )
        notes.append(
            f"the baseline is noisy ({why}): its iterations took {band.low:.2f}x to "
            f"{band.high:.2f}x their point's median, so a change within {-band.drop:+.0%} to "
            f"{band.gain:+.0%} busbw is noise here, and a drop beyond that at fewer than "
            f"{ISOLATED_SERIES:.0%} of its series' points and {ISOLATED_RUN:.0%} of all is "
            "isolated (a warning: rerun to confirm); gate on a quieter machine or raise "
            "--min-time to judge smaller changes"
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
        baseline_band=band,
        notes=notes,
        incomplete=incomplete,
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
