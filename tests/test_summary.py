"""The run summary: peak and average bus bandwidth per series, and the devices used."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.results.runs import load_run
from commbench.results.schema import CHECK_FAILED
from commbench.results.summary import (
    LATENCY_BOUND_FRACTION,
    bandwidth_bound,
    devices,
    render,
    summarise,
)
from tests.factories import row_at

FIXTURES = Path(__file__).parent / "fixtures"


def test_peak_size_and_average_over_the_bandwidth_bound_sizes() -> None:
    # 1K and 4K are under half the peak (10): latency-bound, left out of the average
    rows = [
        row_at(1024, 1.0),
        row_at(4096, 4.9),
        row_at(16384, 6.0),
        row_at(65536, 10.0),
        row_at(1 << 20, 8.0),
    ]
    (s,) = summarise(rows).series
    assert (s.peak_busbw_gbps, s.peak_size_bytes) == (10.0, 65536)
    assert s.bandwidth_bound == (16384, 65536, 1 << 20)
    assert s.avg_busbw_gbps == pytest.approx(8.0)
    assert s.points == 5


def test_the_rule_is_the_gates_half_the_peak() -> None:
    assert LATENCY_BOUND_FRACTION == 0.5
    assert bandwidth_bound(5.0, 10.0) and not bandwidth_bound(4.99, 10.0)
    assert not bandwidth_bound(None, 10.0) and not bandwidth_bound(1.0, 0.0)


def test_series_are_kept_apart_by_strategy_dtype_and_in_place_in_the_order_measured() -> None:
    rows = [
        row_at(1024, 2.0, strategy="ring"),
        row_at(1024, 3.0, strategy="tree"),
        row_at(1024, 4.0, dtype="bfloat16"),
        row_at(1024, 5.0, in_place=True),
        row_at(2048, 6.0, strategy="ring"),
    ]
    series = summarise(rows).series
    assert [(s.name, s.dtype, s.in_place, s.peak_busbw_gbps) for s in series] == [
        ("ring", "float32", False, 6.0),
        ("tree", "float32", False, 3.0),
        ("all_reduce", "bfloat16", False, 4.0),
        ("all_reduce", "float32", True, 5.0),
    ]


def test_failed_points_and_barrier_have_no_bandwidth_to_summarise() -> None:
    rows = [
        row_at(1024, 99.0, check=CHECK_FAILED),
        row_at(2048, 3.0),
        row_at(0, None, op="barrier", reduce_op=""),
    ]
    ring, barrier = summarise(rows).series
    assert ring.peak_busbw_gbps == 3.0 and ring.bandwidth_bound == (2048,)
    assert barrier.peak_busbw_gbps is None and barrier.avg_busbw_gbps is None
    assert "barrier" not in render(summarise(rows))


def test_devices_come_from_the_context_in_rank_order_skipping_entries_without_a_rank() -> None:
    ranks = [
        {"rank": 1, "host": "n2", "device": "cuda:0", "device_name": "H100", "node": 1},
        {"rank": 0, "host": "n1", "device": "cuda:0", "device_name": "H100", "node": 0},
        {"host": "junk"},
    ]
    found = devices(ranks)
    assert [(d.rank, d.host, d.node) for d in found] == [(0, "n1", 0), (1, "n2", 1)]


def test_render_shows_devices_then_the_summary_in_fixed_decimals() -> None:
    rows = [row_at(1024, 0.00008), row_at(1 << 20, 0.0002)]
    text = render(
        summarise(rows, [{"rank": 0, "host": "box", "device": "cpu", "device_name": "cpu"}])
    )
    lines = text.splitlines()
    assert lines[0] == "# Using devices"
    assert lines[1].split() == ["rank", "host", "device", "model"]
    assert lines[2].split() == ["0", "box", "cpu", "cpu"]
    assert "Bus bandwidth: peak, and average over the bandwidth-bound sizes" in text
    row = lines[-1]
    assert row.startswith("all_reduce float32 sum 2 ranks")
    assert "0.00020" in row and "1M" in row and "1 (1M)" in row
    assert "e-0" not in text
    md = render(summarise(rows), markdown=True)
    assert md.startswith("### Bus bandwidth") and "| all_reduce float32 sum 2 ranks |" in md


def test_a_stored_run_summarises_its_rows_and_its_devices() -> None:
    run = load_run(FIXTURES / "runs" / "cpu-gloo-a")
    summary = summarise(run.rows, run.context.ranks)
    assert summary.series and all(s.points for s in summary.series)
    for s in summary.series:
        if s.peak_busbw_gbps is not None:
            assert s.peak_size_bytes in s.bandwidth_bound
            assert s.avg_busbw_gbps is not None and s.avg_busbw_gbps <= s.peak_busbw_gbps
    assert len(summary.devices) == len(run.context.ranks)
