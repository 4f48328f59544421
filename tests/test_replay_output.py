"""What `commbench replay` shows of its rows and steps (issue 43, item 11): a call that carries
no dtype (a barrier: the trace records none) has none in the replay's rows, in every output
(table, CSV, JSON, the rows that dominate), though the worker runs it with a float32 at hand;
and the ratio of the summary's median row is the median of the per-step ratios, each step's
replayed over its recorded as a user compares them, not the ratio of the two medians."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import UserError
from commbench.replay.explain import STEPS_NOTE, explanation, rows_table, step_table
from commbench.replay.program import build_program
from commbench.results.exporters import Format, export
from commbench.results.replay import ReplayRecord
from commbench.results.schema import NO_DTYPE, ResultRow
from commbench.traces.formats import load_any
from tests.factories import make_row, trace_call, write_trace

RECORDED = [4.42e-3, 15e-3, 20.2e-3]
WAITING = [214e-6, 375e-6, 174e-6]
REPLAYED = [3.42e-3, 8.57e-3, 7.13e-3]
"""README's example: per-step ratios 0.77, 0.57, 0.35 (median 0.57); the medians' ratio is
7.13 / 15 = 0.48."""
BARRIER = {
    "op": "barrier", "dtype": NO_DTYPE, "reduce_op": "", "busbw_factor": None, "count": 0,
    "check": "n/a",
}  # fmt: skip
"""A barrier's row as a replay writes it."""


def barrier_trace(directory: Path) -> Path:
    """Per step an all_reduce and a barrier (dtype '', as the capture records it), 2 ranks,
    with times."""
    calls = []
    for step in range(1, 3):
        t = step * 1_000_000
        calls += [
            trace_call("all_reduce", 4096, step=step, issued_ns=t, completed_ns=t + 5000),
            trace_call("barrier", 0, step=step, issued_ns=t + 6000, completed_ns=t + 9000),
        ]
    return write_trace(directory, {0: calls, 1: calls})


def test_the_median_ratio_is_the_median_of_the_per_step_ratios() -> None:
    replay = ReplayRecord(
        trace="t",
        traced_world=2,
        world=2,
        steps=3,
        complete=True,
        recorded_comm_s_per_step=RECORDED,
        recorded_wait_s_per_step=WAITING,
        replayed_comm_s_per_step=REPLAYED,
        step_numbers=[1, 2, 3],
    )
    headers, cells = step_table(replay)
    median = cells[-1]
    assert median[0] == "median"
    ratio = statistics.median(rep / rec for rep, rec in zip(REPLAYED, RECORDED, strict=True))
    assert median[headers.index("replayed / recorded")] == f"{ratio:.2f}" == "0.57"
    less = statistics.median(
        rep / (rec - w) for rep, rec, w in zip(REPLAYED, RECORDED, WAITING, strict=True)
    )
    assert median[headers.index("replayed / (recorded - waiting)")] == f"{less:.2f}"
    said = explanation(replay, [], "gloo")
    assert said.steps_note == STEPS_NOTE and "median of the per-step ratios" in STEPS_NOTE


def test_a_barrier_row_carries_no_dtype(tmp_path: Path) -> None:
    """The program runs the barrier with a dtype at hand, but its row names none."""
    program = build_program(load_any(barrier_trace(tmp_path / "t")))
    by_op = {r.op: r for r in program.rows}
    assert by_op["barrier"].traced_dtype == "" and by_op["barrier"].result_dtype == NO_DTYPE
    assert by_op["all_reduce"].result_dtype == "float32"


@pytest.mark.parametrize("fmt", list(Format))
def test_a_row_without_dtype_shows_none_in_every_format(fmt: Format) -> None:
    barrier = make_row(0, **BARRIER)
    out = export([barrier, make_row(4096)], fmt)
    if fmt is Format.csv:
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [r["dtype"] for r in rows] == ["", "float32"]
    elif fmt is Format.json:
        assert [r["dtype"] for r in json.loads(out)["rows"]] == ["", "float32"]
    else:
        assert "barrier  2 ranks" in out, out
        assert "barrier  float32" not in out
    again = ResultRow.from_dict(json.loads(json.dumps(barrier.to_dict())))
    assert again.dtype == NO_DTYPE


def test_only_an_op_that_moves_nothing_may_have_no_dtype() -> None:
    row = make_row(4096).to_dict() | {"dtype": ""}
    with pytest.raises(UserError, match="dtype"):
        ResultRow.from_dict(row)


def test_the_rows_that_dominate_show_no_dtype_for_a_barrier() -> None:
    from commbench.replay.explain import explain

    barrier = make_row(0, **BARRIER, calls=2)
    headers, cells = rows_table(explain([barrier], None))
    assert cells[0][headers.index("dtype")] == "-"


@pytest.mark.integration
def test_a_replayed_barrier_has_no_dtype_in_its_outputs(tmp_path: Path) -> None:
    trace = barrier_trace(tmp_path / "t")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["replay", str(trace), "--device", "cpu", "--iters", "2", "--warmup", "1",
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    (run_dir,) = out.iterdir()
    stored = json.loads((run_dir / "results.json").read_text())["rows"]
    assert {r["op"]: r["dtype"] for r in stored} == {"all_reduce": "float32", "barrier": ""}
    with (run_dir / "results.csv").open() as fh:
        assert {r["op"]: r["dtype"] for r in csv.DictReader(fh)}["barrier"] == ""
    assert "barrier  float32" not in result.stdout and "barrier  2 ranks" in result.stdout
    assert "median of the per-step ratios" in result.stdout
    # what the progress counted ([k/3]: the two rows and the step sequence) is what it says
    # it measured, not "2 rows" after a counter that went to 3 (issue 43, item 15)
    assert "[1/3" in result.stderr and "[2/3" in result.stderr, result.stderr
    assert "complete: 2 rows, the step sequence in " in result.stderr, result.stderr
