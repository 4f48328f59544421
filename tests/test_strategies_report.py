"""The measured-vs-model comparison, from synthetic rows (no launch)."""

from __future__ import annotations

import json

import pytest

from commbench.collectives.specs import STRATEGIES
from commbench.results.exporters import Format
from commbench.results.schema import ResultRow
from commbench.strategies.model import Params, predict_one
from commbench.strategies.report import comparison_records, render_comparison
from tests.factories import allreduce_factor, make_row

TRUTH = Params(alpha_us=100.0, bw_gbps=1.0, backend="gloo")
SIZES = [1024, 1 << 20]


def row(strategy: str, size: int, t: float, n: int = 4, spread: float = 0.01) -> ResultRow:
    samples = [t * (1 - spread), t, t * (1 + spread)]
    return make_row(
        size, samples, busbw_factor=allreduce_factor(n), strategy=strategy, world_size=n
    )


def model_rows(slower: dict[str, float] | None = None) -> list[ResultRow]:
    slower = slower or {}
    return [
        row(s, size, predict_one(s, 4, size, TRUTH).time_us * slower.get(s, 1.0))
        for s in STRATEGIES
        for size in SIZES
    ]


def test_records_ratio_fastest_and_model() -> None:
    records = comparison_records(model_rows({"ring": 2.0}), backend="gloo")
    assert len(records) == len(STRATEGIES) * len(SIZES)
    for rec in records:
        direct = next(
            r for r in records if r["strategy"] == "direct" and r["size_bytes"] == rec["size_bytes"]
        )
        assert rec["vs_direct"] == pytest.approx(rec["time_us"] / direct["time_us"])
        expected = 2.0 if rec["strategy"] == "ring" else 1.0
        assert rec["measured_vs_model"] == pytest.approx(expected, rel=1e-6)
        assert rec["factor"]
    for size in SIZES:
        at = [r for r in records if r["size_bytes"] == size]
        assert sum(r["fastest"] for r in at) == 1
    # the model says ring_naive (3 steps) wins at 1 KiB: 1 of 5 fastest per size
    small = [r for r in records if r["size_bytes"] == 1024]
    assert next(r for r in small if r["fastest"])["strategy"] == "ring_naive"


def test_table_marks_fastest_and_disagreement() -> None:
    text = render_comparison(model_rows({"ring": 2.0}), Format.table, backend="gloo")
    assert "all_reduce strategies  float32  op=sum  4 ranks" in text
    assert "ring_naive *" in text
    assert "2.00x!" in text  # ring measured at twice the model
    assert "fitted to 2 direct all_reduce points" in text
    assert "alpha 100.00 us/step" in text
    assert "through the root" in text


def test_overlapping_spreads_are_not_a_clear_win() -> None:
    rows = [row("direct", s, 100.0, spread=0.5) for s in SIZES]
    rows += [row("ring", s, 99.0, spread=0.5) for s in SIZES]
    text = render_comparison(rows, Format.table, backend="gloo")
    assert "ring ~" in text and "ring *" not in text


def test_one_size_says_why_there_is_no_model() -> None:
    rows = [row("direct", 1024, 100.0), row("ring", 1024, 150.0)]
    text = render_comparison(rows, Format.md, backend="gloo")
    assert "model not fitted" in text and "2 sizes or more" in text
    assert "| 1.50x |" in text


def test_plain_all_reduce_is_the_reference_without_direct() -> None:
    rows = [row("", s, 100.0) for s in SIZES] + [row("ring", s, 200.0) for s in SIZES]
    records = comparison_records(rows, backend="gloo")
    assert [r["vs_direct"] for r in records] == [2.0, 2.0]


def test_json_and_csv_are_records() -> None:
    rows = model_rows()
    data = json.loads(render_comparison(rows, Format.json, backend="gloo"))
    assert data["backend"] == "gloo"
    assert len(data["rows"]) == len(rows)
    csv_text = render_comparison(rows, Format.csv, backend="gloo")
    assert csv_text.splitlines()[0].startswith("dtype,reduce_op,world_size,size_bytes,strategy")


def test_no_strategy_rows_renders_nothing() -> None:
    assert render_comparison([row("", 1024, 1.0)], Format.table) == ""
