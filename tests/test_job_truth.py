"""The harness of tests/test_jobs_record.py (tests/job_truth.py), without launching a job: a
job's truth lines are read wherever they land, and a recording is compared with them call
for call, every difference naming the rank, the call's place, the recorded call and the
truth."""

from __future__ import annotations

import json
from pathlib import Path

from commbench.traces.reader import read_trace
from tests.factories import trace_call, write_trace
from tests.job_truth import JobSpec, compare, parse_truth


def line(rank: int, op: str = "all_reduce", step: int | None = 1, **fields: object) -> str:
    truth = {"rank": rank, "step": step, "op": op, "bytes": 1024, "out_bytes": 1024,
             "dtype": "float32", "group": [0, 1], "peer": None, "async": None,
             "in_splits": None, "out_splits": None, **fields}  # fmt: skip
    return "truth: " + json.dumps(truth)


def test_truth_lines_are_read_per_rank_even_inside_another_ranks_line() -> None:
    """Unbuffered, a `print` writes its text and its newline apart: another rank's truth
    line, one write, can land between them."""
    stdout = "\n".join(
        [
            line(0),
            "job: 3 steps, loss 0.1" + line(1, "barrier", None, bytes=0, out_bytes=0, dtype=""),
            "",
            "unrelated output",
            line(1, step=2),
        ]
    )
    truth = parse_truth(stdout)
    assert sorted(truth) == [0, 1]
    assert [(t.op, t.step) for t in truth[1]] == [("barrier", None), ("all_reduce", 2)]
    assert truth[0][0].group == (0, 1) and truth[0][0].in_bytes == 1024


def test_every_difference_names_rank_call_recorded_and_truth(tmp_path: Path) -> None:
    calls = [trace_call("all_reduce", 1024, step=1), trace_call("broadcast", 1024, peer=0)]
    trace = read_trace(write_trace(tmp_path / "t", {0: calls, 1: calls}))
    truth = parse_truth(
        "\n".join(
            [
                line(0),
                line(0, "broadcast", peer=0, step=None),
                line(1),
                line(1, "broadcast", peer=1, step=1),
                line(1, "barrier", None, bytes=0, out_bytes=0, dtype=""),
            ]
        )
    )
    found = compare(trace, truth)
    assert [(m.rank, m.index, m.field) for m in found] == [
        (1, 1, "peer"),
        (1, 1, "step"),
        (1, 2, "missing"),
    ]
    said = str(found[0])
    assert said.startswith("rank 1, call 1: peer differs")
    assert "recorded: peer=0: broadcast" in said and "truth:    peer=1: broadcast" in said


def test_splits_are_compared_where_the_truth_says_them(tmp_path: Path) -> None:
    calls = [trace_call("all_to_all", 16, out_bytes=16, step=1)]  # recorded even
    trace = read_trace(write_trace(tmp_path / "t", {0: calls, 1: calls}))
    uneven = line(0, "all_to_all", bytes=16, out_bytes=16, in_splits=[1, 3], out_splits=[3, 1])
    even = line(1, "all_to_all", bytes=16, out_bytes=16)
    found = compare(trace, parse_truth(uneven + "\n" + even))
    assert [(m.rank, m.field) for m in found] == [(0, "in_splits"), (0, "out_splits")]


def test_a_job_is_named_with_its_ranks_and_arguments() -> None:
    spec = JobSpec.parse("moe=moe_uneven_job.py:4 --steps 3")
    assert (spec.name, spec.script, spec.nproc, spec.args) == (
        "moe",
        "moe_uneven_job.py",
        4,
        ("--steps", "3"),
    )
    assert spec.path.parent.name == "jobs"
    assert JobSpec.parse("/x/pipeline_job.py") == JobSpec("pipeline_job", "/x/pipeline_job.py")
