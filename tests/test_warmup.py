"""The adaptive warm-up's plan: the count comes from a warm iteration's pace, and the run's first
point warms the device for longer (an idle GPU's clocks ramp only under sustained load)."""

from __future__ import annotations

import pytest

from commbench.launch.worker import (
    FIRST_WARMUP_MAX,
    FIRST_WARMUP_TIME_US,
    WARMUP_MAX,
    WARMUP_MIN,
    WARMUP_TIME_US,
    plan_warmup,
)


@pytest.mark.parametrize("pace_us", [1.0, 20.0, 2_500.0, 50_000.0, 1e7])
def test_a_point_warms_for_about_the_budget_within_bounds(pace_us: float) -> None:
    n = plan_warmup(pace_us)
    assert WARMUP_MIN <= n <= WARMUP_MAX
    if WARMUP_MIN < n < WARMUP_MAX:
        assert (n - 1) * pace_us < WARMUP_TIME_US <= n * pace_us


@pytest.mark.parametrize("pace_us", [1.0, 20.0, 2_500.0, 50_000.0, 1e7])
def test_the_first_point_warms_longer(pace_us: float) -> None:
    first, later = plan_warmup(pace_us, first_point=True), plan_warmup(pace_us)
    assert WARMUP_MIN <= first <= FIRST_WARMUP_MAX and first >= later
    if WARMUP_MIN < first < FIRST_WARMUP_MAX:
        assert (first - 1) * pace_us < FIRST_WARMUP_TIME_US <= first * pace_us


def test_a_20us_op_on_an_idle_device_gets_a_quarter_second() -> None:
    # the GPU reference's case: a 1 KiB all_reduce at ~20 us, 2 warm-ups then timed at 86 us
    assert plan_warmup(20.0, first_point=True) * 20.0 >= FIRST_WARMUP_TIME_US
    assert plan_warmup(20.0) == WARMUP_MAX


def test_an_unknown_pace_takes_the_most() -> None:
    assert plan_warmup(0.0) == WARMUP_MAX
    assert plan_warmup(0.0, first_point=True) == FIRST_WARMUP_MAX
