"""How well `commbench.history.changes` finds steps in series of runs, and how fast.

    python benchmarks/change_points.py                  # 200 series a case, every setting
    python benchmarks/change_points.py --series 50 --only default

Series are synthetic (tests/change_series.py): 30 runs of one point's busbw, on a link shaped by
tc (runs 1-3% apart, now and then one 1.5-3x slower) or on a loaded machine's loopback (20-40%,
often 2-6x slower), with one step at a random run (not in the first or last 3) or none. Each
detector setting meets the same series. A change found within 1 run of the step finds it.
Prints markdown: per setting and case, precision, recall, the mean location error in runs, the
share found at the step's very run, the share of series with a false change, and the time per
series; then detect() on 10,000 runs, update() adding one run to them, and whether update(),
fed one run at a time, ends where detect() does on longer series. The issue's targets (42, item
4): on the shaped link, steps of 10% or more at precision and recall >= 0.9 within 1 run, and
false changes in <= 2% of series without a step; adding a run to 10,000 well under a second.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from commbench.history.changes import DETECTOR, Detector, detect, update  # noqa: E402
from commbench.tables import fixed, text_table  # noqa: E402
from tests.change_series import NOISY, SHAPED, Noise, Score, series, step_ratio  # noqa: E402

SETTINGS: dict[str, Detector] = {
    "default": DETECTOR,
    "alpha 0.001": replace(DETECTOR, alpha=0.001),
    "alpha 0.01": replace(DETECTOR, alpha=0.01),
    "penalty 4": replace(DETECTOR, penalty=4.0),
    "penalty 24": replace(DETECTOR, penalty=24.0),
    "min effect 2%": replace(DETECTOR, min_effect=0.02),
}
"""The default and its neighbours, one knob moved each."""


@dataclass(frozen=True, slots=True)
class Case:
    """A kind of series: its noise and its step (a size, drawn up or down, or an exact ratio;
    neither: no step)."""

    name: str
    noise: Noise
    size: float | None = None
    ratio: float | None = None

    def ratios(self, rng: random.Random) -> list[float]:
        if self.ratio is not None:
            return [self.ratio]
        return [] if self.size is None else [step_ratio(rng, self.size)]


CASES = [
    Case("shaped, no step", SHAPED),
    Case("shaped, 5% step", SHAPED, size=0.05),
    Case("shaped, 10% step", SHAPED, size=0.10),
    Case("shaped, 25% step", SHAPED, size=0.25),
    Case("shaped, 2x drop", SHAPED, ratio=0.5),
    Case("noisy, no step", NOISY),
    Case("noisy, 2x drop", NOISY, ratio=0.5),
]


def score(
    detector: Detector, case: Case, count: int, runs: int, seed: int
) -> tuple[Score, Score, float]:
    """The detector's score over `count` series of the case, within 1 run and within 3, and the
    seconds it took."""
    rng = random.Random(f"{seed}/{case.name}")  # the same series for every setting
    made = [series(rng, case.noise, runs=runs, ratios=case.ratios(rng)) for _ in range(count)]
    near, loose = Score(tolerance=1), Score(tolerance=3)
    started = time.perf_counter()
    found = [detect(s.values, detector=detector) for s in made]
    took = time.perf_counter() - started
    for s, changes in zip(made, found, strict=True):
        indices = [c.index for c in changes]
        intervals = [(c.ratio_low, c.ratio_high) for c in changes]
        near.add(s.steps, indices, ratios=s.ratios, intervals=intervals)
        loose.add(s.steps, indices)
    return near, loose, took


HEADERS = [
    "setting", "series", "precision", "recall", "location error", "exact", "false",
    "recall ±3", "false ±3", "CI covers", "ms/series",
]  # fmt: skip


def quality_table(names: list[str], count: int, runs: int, seed: int) -> list[str]:
    """One row a setting and case: precision and recall within 1 run, the mean runs between a
    found step and the truth, the share found at its very run, the share of series with a
    change that is no step; recall and false changes again within 3 runs (noise moves a step's
    apparent place); the share of found steps whose 95% interval holds the true ratio;
    milliseconds of detect() a series."""
    rows = []
    for name in names:
        for case in CASES:
            s, loose, took = score(SETTINGS[name], case, count, runs, seed)
            stepped = bool(s.steps)
            rows.append(
                [
                    name,
                    case.name,
                    fixed(s.precision) if stepped else "-",
                    fixed(s.recall) if stepped else "-",
                    fixed(s.location_error) if s.hits else "-",
                    f"{s.exact / s.hits:.0%}" if s.hits else "-",
                    f"{s.false_alarm_rate:.1%}",
                    fixed(loose.recall) if stepped else "-",
                    f"{loose.false_alarm_rate:.1%}",
                    f"{s.coverage:.0%}" if s.hits else "-",
                    fixed(1000 * took / count),
                ]
            )
    return text_table(HEADERS, rows, left={0, 1})


def long_series(seed: int, runs: int, *, steps: bool = True) -> list[float]:
    """A shaped link's series of `runs` runs that steps 10-50% (up or down) every 300 to 1,500
    runs, or never."""
    rng = random.Random(seed)
    at: list[int] = []
    ratios: list[float] = []
    i = 0
    while steps and (i := i + rng.randint(300, 1500)) < runs - 10:
        at.append(i)
        ratios.append(step_ratio(rng, rng.uniform(0.1, 0.5)))
    return series(rng, SHAPED, runs=runs, ratios=ratios, at=at).values


def clocked(repeats: int, work: Callable[[], object]) -> list[float]:
    """The seconds of each of `repeats` calls of `work`, sorted."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return sorted(times)


def timing_lines(seed: int) -> list[str]:
    """detect() on 10,000 runs, with steps and without (Pelt's worst case: nothing prunes), and
    update() adding the 10,001st run to them: the median and the slowest of its repeats."""
    lines = []
    for steps in (True, False):
        values = long_series(seed, 10_001, steps=steps)
        old = values[:-1]
        previous = detect(old)
        whole = clocked(3, partial(detect, old))
        added = clocked(21, partial(update, values, previous))
        kind = "with a step every 300-1,500 runs" if steps else "without a step"
        lines += [
            f"- 10,000 runs {kind}: detect() {whole[1]:.3f} s (median of 3; "
            f"{len(previous)} changes); update() adding a run {1000 * added[10]:.1f} ms "
            f"(median of 21, slowest {1000 * added[-1]:.1f} ms)"
        ]
    return lines


def agreement_lines(seed: int, count: int, runs: int) -> list[str]:
    """update() fed one run at a time from DETECTOR.window runs on, against detect() on the
    whole, for series longer than the window (shorter ones update() hands to detect())."""
    same = near = identical = updates = 0
    spent = 0.0
    for k in range(count):
        values = long_series(seed * 1000 + k, runs)
        changes = detect(values[: DETECTOR.window])
        started = time.perf_counter()
        for n in range(DETECTOR.window + 1, runs + 1):
            changes = update(values[:n], changes)
            updates += 1
        spent += time.perf_counter() - started
        full = detect(values)
        ours, theirs = [c.index for c in changes], [c.index for c in full]
        identical += changes == full
        same += ours == theirs
        near += len(ours) == len(theirs) and all(abs(a - b) <= 1 for a, b in zip(ours, theirs))
    return [
        f"- update() run by run ({1000 * spent / updates:.1f} ms a run) vs detect(), {count} "
        f"shaped series of {runs} runs with steps: {identical} end with identical changes, "
        f"{same} at the same runs, {near} within 1 run of each"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=200, help="series per case (200)")
    parser.add_argument("--runs", type=int, default=30, help="runs per series (30)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", choices=sorted(SETTINGS), help="a setting")
    parser.add_argument("--agreement", type=int, default=5, help="long series for update (5)")
    args = parser.parse_args()
    started = time.perf_counter()
    detect([1.0, 2.0] * 5)
    first = time.perf_counter() - started
    names = args.only or list(SETTINGS)
    print(f"## Change points: {args.series} series of {args.runs} runs per case\n")
    print("\n".join(quality_table(names, args.series, args.runs, args.seed)))
    print("\n## Timing\n")
    print(f"- the first call, which imports numpy, scipy and ruptures: {first:.2f} s")
    print("\n".join(timing_lines(args.seed)))
    if args.agreement:
        print("\n".join(agreement_lines(args.seed, args.agreement, 1500)))
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
