"""Change points in a series of runs (commbench.history.changes): a persistent step is one, one
slow run is none, the targets of issue 42 hold on seeded synthetic series (benchmarks/
change_points.py measures them on many more), and update() ends where detect() does."""

from __future__ import annotations

import ast
import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from commbench.history import changes
from commbench.history.changes import DETECTOR, MIN_RUNS, Change, Detector, detect, update
from tests.change_series import NOISY, SHAPED, Score, series, step_ratio

QUIET = replace(SHAPED, name="quiet link", outlier_rate=0.0)
"""The shaped link without its outlier runs: what a change reports, apart from what finds it."""


def test_a_persistent_step_is_one_change_with_its_size() -> None:
    s = series(random.Random(1), QUIET, runs=30, ratios=[0.9], at=[12])
    [change] = detect(s.values)
    assert change.index == 12
    assert change.ratio == pytest.approx(change.after / change.before)
    assert change.ratio == pytest.approx(0.9, abs=0.03)
    assert change.ratio_low <= 0.9 <= change.ratio_high
    assert change.ratio_low <= change.ratio <= change.ratio_high
    assert change.p_value < DETECTOR.alpha
    assert change.before == pytest.approx(statistics.median(s.values[:12]), rel=1e-12)
    assert change.after == pytest.approx(statistics.median(s.values[12:]), rel=1e-12)


@pytest.mark.parametrize("where", [0, 1, 14, 28, 29])
def test_one_slow_run_is_no_change(where: int) -> None:
    """A run 2x slower (half the busbw), anywhere, even at either end, is an outlier."""
    rng = random.Random(where)
    values = [10.0 * math.exp(rng.gauss(0, 0.02)) for _ in range(30)]
    values[where] /= 2
    assert detect(values) == []


def test_one_slow_run_in_identical_figures_is_no_change() -> None:
    values = [3.0] * 20
    values[9] = 1.5
    assert detect(values) == []


def test_a_step_is_a_change_from_its_third_run_on() -> None:
    """One slow run is an outlier, two may be; from the third on, a step."""
    s = series(random.Random(10), QUIET, runs=33, ratios=[0.8], at=[30])
    found = detect(s.values[:31])
    assert found == []
    found = update(s.values[:32], found)
    assert found == []
    found = update(s.values, found)
    assert [c.index for c in found] == [30]


def test_two_steps_are_two_changes() -> None:
    s = series(random.Random(2), SHAPED, runs=40, ratios=[0.75, 1.25], at=[12, 27])
    found = [c.index for c in detect(s.values)]
    assert len(found) == 2
    assert abs(found[0] - 12) <= 1
    assert abs(found[1] - 27) <= 1


def test_identical_figures_that_step_once() -> None:
    """Quantised figures measure no noise: the floor keeps every run from being cut apart."""
    [change] = detect([10.0] * 15 + [9.0] * 15)
    assert (change.index, change.before, change.after) == (15, 10.0, 9.0)
    assert change.ratio_low == pytest.approx(0.9) == change.ratio_high


@pytest.mark.parametrize(
    "values",
    [[], [5.0], [1.0, 1.0, 1.0, 2.0, 2.0], [3.0] * 50, [3.0] * 12_000],
    ids=["empty", "one", "five runs", "all equal", "all equal, long"],
)
def test_no_changes_in_short_or_flat_series(values: list[float]) -> None:
    assert len(values) < MIN_RUNS or len(set(values)) == 1
    assert detect(values) == []
    assert update(values, []) == []


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_a_value_that_is_no_positive_number_is_refused(bad: float) -> None:
    values = [1.0] * 10
    values[7] = bad
    with pytest.raises(ValueError, match="value 7 is"):
        detect(values)
    with pytest.raises(ValueError, match="value 7 is"):
        update(values, [])


def test_previous_changes_outside_the_series_are_refused() -> None:
    change = Change(
        index=40, before=1, after=2, ratio=2, ratio_low=1.9, ratio_high=2.1, p_value=1e-6
    )
    with pytest.raises(ValueError, match="inside the series of 30 runs"):
        update([1.0] * 30, [change])
    with pytest.raises(ValueError, match="in order"):
        update([1.0] * 50, [change, replace(change, index=10)])


@pytest.mark.parametrize(
    "wrong",
    [{"alpha": 0}, {"alpha": 1.5}, {"min_effect": -0.1}, {"penalty": 0}, {"reach": 2},
     {"window": 100, "reach": 60}],
)  # fmt: skip
def test_a_detector_setting_out_of_range_is_refused(wrong: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Detector(**wrong)  # type: ignore[arg-type]


def scored(noise_kind: str, size: float | None, count: int, seed: int) -> Score:
    noise = {"shaped": SHAPED, "noisy": NOISY}[noise_kind]
    rng = random.Random(seed)
    score = Score()
    for _ in range(count):
        s = series(rng, noise, ratios=[] if size is None else [step_ratio(rng, size)])
        score.add(s.steps, [c.index for c in detect(s.values)])
    return score


def test_shaped_link_steps_of_10_percent_are_found_where_they_are() -> None:
    """Issue 42's target: precision and recall >= 0.9, each within 1 run."""
    score = scored("shaped", 0.10, count=100, seed=3)
    assert score.precision >= 0.9
    assert score.recall >= 0.9


def test_shaped_link_series_without_a_step_have_no_change() -> None:
    """Issue 42's target: false changes in <= 2% of series."""
    assert scored("shaped", None, count=100, seed=4).alarmed <= 2


def test_a_2x_drop_on_noisy_loopback_is_found_more_often_than_not_claimed() -> None:
    """The noisy machine's runs differ by 20-40% and often 2-6x: no target, but a change found
    there is mostly real, and a flat series rarely has one (the benchmark reports the rates)."""
    flat = scored("noisy", None, count=40, seed=5)
    assert flat.false_alarm_rate <= 0.1
    drop = Score()
    rng = random.Random(6)
    for _ in range(40):
        s = series(rng, NOISY, ratios=[0.5])
        drop.add(s.steps, [c.index for c in detect(s.values)])
    assert drop.precision >= 0.5
    assert drop.recall >= 0.25


def test_update_run_by_run_ends_where_detect_does() -> None:
    """A series longer than the window, fed one run at a time: the changes settled before the
    window are kept, the tail is recomputed, and the end is what detect() finds at once."""
    small = Detector(reach=30, window=60)
    s = series(random.Random(7), SHAPED, runs=150, ratios=[0.8, 1.15, 0.9], at=[40, 95, 125])
    found = detect(s.values[: small.window], detector=small)
    for n in range(small.window + 1, len(s.values) + 1):
        found = update(s.values[:n], found, detector=small)
    assert found == detect(s.values, detector=small)
    assert [c.index for c in found] == [40, 95, 125]


def test_update_keeps_settled_changes_as_they_are() -> None:
    small = Detector(reach=30, window=60)
    s = series(random.Random(8), SHAPED, runs=150, ratios=[0.8], at=[40])
    before = detect(s.values[:149], detector=small)
    after = update(s.values, before, detector=small)
    assert after[0] is before[0]


def test_update_on_a_short_series_is_detect() -> None:
    s = series(random.Random(9), SHAPED, runs=40, ratios=[1.2], at=[20])
    assert update(s.values, []) == detect(s.values)


def test_numpy_scipy_and_ruptures_are_imported_only_when_used() -> None:
    """`import commbench` and `commbench --help` never import them (tests/test_import_map.py
    holds the package to it): this module imports them inside its functions only."""
    tree = ast.parse(Path(changes.__file__).read_text())
    top = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = {alias.name.split(".")[0] for node in top for alias in node.names}
    names |= {
        node.module.split(".")[0]
        for node in top
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not names & {"numpy", "scipy", "ruptures"}
