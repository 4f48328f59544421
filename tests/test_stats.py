import math
import statistics

import pytest

from commbench.stats import Stats, quantile


def test_stats_match_the_standard_library() -> None:
    samples = [5.0, 1.0, 4.0, 2.0, 3.0, 100.0]
    s = Stats.of(samples)
    assert s.n == 6 and s.min == 1.0 and s.max == 100.0
    assert s.median == statistics.median(samples)
    assert s.mean == pytest.approx(statistics.mean(samples))
    assert s.stddev == pytest.approx(statistics.stdev(samples))
    assert s.cv == pytest.approx(statistics.stdev(samples) / statistics.mean(samples))
    assert s.outliers == 1  # 100 is far outside the IQR fences


def test_quantiles_interpolate_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert quantile(values, 0.25) == 1.75
    assert quantile(values, 0.95) == pytest.approx(3.85)
    assert math.isnan(quantile([], 0.5))


def test_single_sample() -> None:
    s = Stats.of([7.0])
    assert (s.median, s.stddev, s.cv, s.p95) == (7.0, 0.0, 0.0, 7.0)


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError):
        Stats.of([])
