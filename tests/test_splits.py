"""An all_to_all's uneven splits (issue 34, item 3), without launching anything: the
capture's conversion to elements, the trace's compact form and its reader's refusals (each
one line through the command, exit 2, nothing written), traces written before splits were
recorded, and the program a replay runs from them (each rank's own splits in the sequence,
the busiest rank's size and the skew in the rows, even where splits cannot map)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from commbench.cli import app
from commbench.launch.heartbeat import Heartbeat
from commbench.launch.watchdog import Seen, Watch
from commbench.record.capture import _all_to_all_splits, _Op
from commbench.replay import compiled
from commbench.replay.program import build_program, rank_sequence
from commbench.replay.run import points_of
from commbench.replay.settings import ReplaySettings
from commbench.traces import splits
from commbench.traces.plan import build_plan, render_plan
from commbench.traces.reader import read_trace
from commbench.traces.records import MANIFEST_FILE, SCHEMA_VERSION, Call
from tests.factories import trace_call, write_trace

F32 = 4

# A mixture-of-experts step on 2 ranks: rank 0 routes 30 tokens to itself and 10 to rank 1,
# rank 1 routes 4 to rank 0 and 20 to itself (elements of float32); then the same back.
DISPATCH = {0: ((30, 10), (30, 4)), 1: ((4, 20), (10, 20))}
"""rank -> (in_splits, out_splits), elements."""


def all_to_all(in_splits: tuple[int, ...], out_splits: tuple[int, ...], **kw: Any) -> Call:
    """An all_to_all of float32 with these splits (the trace's compact form: even ones out)."""
    total_in, total_out = sum(in_splits), sum(out_splits)
    call = trace_call("all_to_all", total_in * F32, out_bytes=total_out * F32, **kw)
    return replace(
        call,
        count=total_in,
        in_splits=splits.compact(in_splits, total_in),
        out_splits=splits.compact(out_splits, total_out),
    )


def moe_trace(directory: Path, steps: int = 2) -> Path:
    """Per step: an even all_to_all of the counts (2 elements), the dispatch, the combine."""
    per_rank = {}
    for rank, (ins, outs) in DISPATCH.items():
        calls = []
        for step in range(1, steps + 1):
            calls += [
                all_to_all((1, 1), (1, 1), step=step),
                all_to_all(ins, outs, step=step),
                all_to_all(outs, ins, step=step),
            ]
        per_rank[rank] = calls
    return write_trace(directory, per_rank)


def lines(directory: Path, rank: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (directory / f"rank-{rank}.jsonl").read_text().splitlines()]


def rewrite(directory: Path, rank: int, docs: list[dict[str, Any]]) -> None:
    (directory / f"rank-{rank}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))


def as_schema_1(directory: Path) -> Path:
    """The trace as commbench wrote it before splits: schema 1, no split fields."""
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    (directory / MANIFEST_FILE).write_text(json.dumps({**manifest, "schema_version": 1}))
    for rank in (0, 1):
        docs = lines(directory, rank)
        for d in docs:
            d.pop("in_splits", None)
            d.pop("out_splits", None)
        rewrite(directory, rank, docs)
    return directory


# -- the splits and their compact form -----------------------------------------------------------


def test_even_splits_are_left_out_and_uneven_ones_kept() -> None:
    assert splits.even(8, 2) == (4, 4) and splits.even(7, 2) is None
    assert splits.compact([4, 4], 8) is None
    assert splits.compact([0, 8], 8) == (0, 8)
    assert splits.compact([3, 4], 7) == (3, 4)  # no even split of 7: kept


def test_the_capture_counts_splits_in_elements() -> None:
    """all_to_all_single's split sizes count rows of dim 0: a row of 8 elements makes a
    split of 3 rows 24 elements; the list form's splits are its tensors' sizes."""
    out, inp = torch.zeros(5, 8), torch.zeros(4, 8)
    base = _Op("alltoall_base_")
    args = (out, inp, None, [2, 3], [3, 1])
    assert _all_to_all_splits(base, args, {}, [inp], [out]) == ((24, 8), (16, 24))
    even = (torch.zeros(4, 8), torch.zeros(4, 8), None, [], [])  # empty lists: even
    assert _all_to_all_splits(base, even, {}, [even[1]], [even[0]]) == (None, None)
    listed = _Op("alltoall_")
    ins, outs = [torch.zeros(3), torch.zeros(5)], [torch.zeros(4), torch.zeros(4)]
    assert _all_to_all_splits(listed, (outs, ins, None), {}, ins, outs) == ((3, 5), None)


def test_splits_round_trip_and_an_even_call_has_none(tmp_path: Path) -> None:
    trace = read_trace(moe_trace(tmp_path))
    assert trace.manifest.schema_version == SCHEMA_VERSION >= 2
    assert trace.manifest.records_splits
    counts, dispatch, combine = trace.calls[1][:3]
    assert (counts.in_splits, counts.out_splits) == (None, None)
    assert (dispatch.in_splits, dispatch.out_splits) == DISPATCH[1]
    assert (combine.in_splits, combine.out_splits) == DISPATCH[1][::-1]
    first = lines(tmp_path, 1)[0]
    assert "in_splits" not in first and "out_splits" not in first  # even: left out
    assert lines(tmp_path, 1)[1]["in_splits"] == [4, 20]


# -- what the reader refuses -------------------------------------------------------------------


def _edit(field: str, value: Any, *, rank: int = 0, line: int = 1, **more: Any) -> Any:
    def edit(directory: Path) -> None:
        docs = lines(directory, rank)
        docs[line][field] = value
        docs[line].update(more)
        rewrite(directory, rank, docs)

    return edit


def _to_all_reduce(directory: Path) -> None:
    for rank in (0, 1):
        docs = lines(directory, rank)
        docs[0].update(op="all_reduce", in_splits=[2, 0])
        rewrite(directory, rank, docs)


def _world_group(directory: Path) -> None:
    """Groups whose ranks are not said (the whole world), and a rank with 3 splits."""
    for rank in (0, 1):
        docs = lines(directory, rank)
        for d in docs:
            d["group"]["ranks"] = []
        if rank == 0:
            docs[1]["in_splits"] = [30, 10, 0]
        rewrite(directory, rank, docs)


REFUSED = {
    "a sum other than the input": (
        _edit("in_splits", [30, 11]),
        "rank-0.jsonl: line 2: in_splits: the splits sum to 41 elements (164 bytes), but the "
        "call's input is 160 bytes",
    ),
    "a sum other than the output": (
        _edit("out_splits", [4, 31]),
        "rank-0.jsonl: line 2: out_splits: the splits sum to 35 elements",
    ),
    "a negative split": (
        _edit("in_splits", [-2, 42]),
        "rank-0.jsonl: line 2: in_splits[0]: -2 is outside 0..",
    ),
    "longer than the group": (
        _edit("in_splits", [30, 10, 0]),
        "rank-0.jsonl: line 2: in_splits: 3 splits for a group of 2 rank(s)",
    ),
    "longer than the world": (
        _world_group,
        "rank-0.jsonl: line 2: in_splits: 3 splits for a group of 2 rank(s)",
    ),
    "not a list": (_edit("out_splits", "34"), "line 2: out_splits: expected a list"),
    "splits on another op": (
        _to_all_reduce,
        "rank-0.jsonl: line 1: in_splits: only an all_to_all has splits",
    ),
    "members that disagree": (
        _edit("out_splits", [20, 10], rank=1, line=1),
        "all_to_all 1: rank 0 sends rank 1 10 elements, which receives 20 from it",
    ),
    "an uneven size without its splits": (
        _edit("in_splits", None, count=41, in_bytes=164),
        "all_to_all 1 on rank 0: no in_splits (an even split), but its input of 164 bytes "
        "does not split evenly over 2 ranks",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_splits_are_refused_in_one_line(case: str, tmp_path: Path) -> None:
    edit, words = REFUSED[case]
    trace = moe_trace(tmp_path / "trace")
    edit(trace)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["replay", str(trace), "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert words in line and "Traceback" not in result.stderr, line
    assert not out.exists()


# -- traces without splits ---------------------------------------------------------------------


def test_a_trace_written_before_splits_replays_even_with_a_note(tmp_path: Path) -> None:
    """Schema 1 kept only each rank's total: every rank issues the busiest rank's size,
    split evenly, so that the backend's sizes agree (its own total, split evenly, made
    gloo abort), and the notes say so."""
    trace = read_trace(as_schema_1(moe_trace(tmp_path)))
    assert not trace.manifest.records_splits
    program = build_program(trace)
    assert any("records no all_to_all splits" in n for n in program.notes)
    assert all(r.splits is None and r.skew is None for r in program.rows)
    seqs = [rank_sequence(trace, program, rank) for rank in (0, 1)]
    for step in range(2):
        zero, one = seqs[0][step], seqs[1][step]
        assert [i.size_bytes for i in zero] == [i.size_bytes for i in one] == [8, 160, 160]
        assert all(i.in_splits is None and i.out_splits is None for i in zero + one)


def test_a_dry_run_of_an_old_trace_says_it_is_replayed_even(tmp_path: Path) -> None:
    trace = as_schema_1(moe_trace(tmp_path / "trace"))
    result = CliRunner().invoke(app, ["replay", str(trace), "--dry-run"])
    assert result.exit_code == 0, result.stderr
    assert "all_to_allv" not in result.stdout
    assert "records no all_to_all splits" in result.stdout


# -- the program ---------------------------------------------------------------------------------


def test_each_rank_issues_its_recorded_splits(tmp_path: Path) -> None:
    trace = read_trace(moe_trace(tmp_path))
    program = build_program(trace)
    for rank, (ins, outs) in DISPATCH.items():
        for step in rank_sequence(trace, program, rank):
            counts, dispatch, combine = step
            assert (counts.in_splits, counts.out_splits) == (None, None)
            assert (dispatch.in_splits, dispatch.out_splits) == (ins, outs)
            assert (combine.in_splits, combine.out_splits) == (outs, ins)
    # the compiled program carries them to the workers
    compiled.write(trace, program, tmp_path / "program")
    back = compiled.read(tmp_path / "program")
    assert back.sequence(1)[0][1].in_splits == DISPATCH[1][0]
    assert [r.splits for r in back.rows] == [r.splits for r in program.rows]


def test_an_all_to_allv_row_names_the_busiest_rank_and_the_skew(tmp_path: Path) -> None:
    """Rank 0 holds 40 elements in and 34 out, rank 1 24 and 30: the row's size is rank 0's
    160 bytes, its skew 40 / 35; dispatch and combine share the size, and the row says it
    times the first of their two splits."""
    program = build_program(read_trace(moe_trace(tmp_path)))
    (row,) = [r for r in program.rows if r.splits is not None]
    assert row.size_bytes == 160 and row.calls == 4
    assert row.splits == ((30, 10), (4, 20)) and row.patterns == 2
    assert row.skew == pytest.approx(40 / 35)
    (even,) = [r for r in program.rows if r.splits is None]
    assert even.size_bytes == 8 and even.skew is None
    plan = render_plan(program.plan)
    assert "all_to_allv" in plan and "all_to_allv: 4 all_to_all call(s) with uneven" in plan


def test_group_order_is_the_replays_sorted_ranks(tmp_path: Path) -> None:
    """A group listed as [1, 0] (rank 1 is its group rank 0): its splits are in that order,
    and the replay's group has the sorted order."""
    per_rank = {
        0: [all_to_all((10, 30), (4, 30), ranks=(1, 0), group="g", step=1)],
        1: [all_to_all((20, 4), (20, 10), ranks=(1, 0), group="g", step=1)],
    }
    trace = read_trace(write_trace(tmp_path, per_rank))
    program = build_program(trace)
    (zero,), (one,) = rank_sequence(trace, program, 0)[0], rank_sequence(trace, program, 1)[0]
    assert (zero.in_splits, zero.out_splits) == ((30, 10), (30, 4))
    assert (one.in_splits, one.out_splits) == ((4, 20), (10, 20))


def test_another_world_replays_the_whole_worlds_splits_even(tmp_path: Path) -> None:
    trace = read_trace(moe_trace(tmp_path))
    program = build_program(trace, world=4)
    assert any("--world 4: the splits of 4 uneven all_to_all" in n for n in program.notes)
    sizes = {
        rank: [(i.size_bytes, i.in_splits) for i in rank_sequence(trace, program, rank)[0]]
        for rank in range(4)
    }
    assert all(s == [(16, None), (320, None), (320, None)] for s in sizes.values())
    assert all(r.splits is None for r in program.rows)


def test_a_subgroups_splits_map_to_each_copy(tmp_path: Path) -> None:
    """Expert-parallel pairs {0,1} and {2,3}: on 8 ranks, each copy's pair issues them."""
    per_rank = {}
    for rank in range(4):
        pair = (0, 1) if rank < 2 else (2, 3)
        ins, outs = DISPATCH[rank % 2]
        per_rank[rank] = [all_to_all(ins, outs, ranks=pair, group=f"ep{pair[0]}", step=1)]
    trace = read_trace(write_trace(tmp_path, per_rank))
    program = build_program(trace, world=8)
    assert not any("--world" in n for n in program.notes)
    for rank in range(8):
        (issue,) = rank_sequence(trace, program, rank)[0]
        assert (issue.in_splits, issue.out_splits) == DISPATCH[rank % 2]
        assert program.groups[issue.group] == (rank - rank % 2, rank - rank % 2 + 1)


def test_the_plan_counts_an_all_to_allv_once_per_size(tmp_path: Path) -> None:
    plan = build_plan(read_trace(moe_trace(tmp_path)))
    rows = [(r.label, r.size_bytes, r.calls) for s in plan.steps for r in s.rows]
    assert rows == [("all_to_all", 8, 1), ("all_to_allv", 160, 2)] * 2


# -- the results ---------------------------------------------------------------------------------


# -- a failure in the sequence names the sequence -----------------------------------------------


def test_a_rank_entering_the_sequence_says_so_at_once(tmp_path: Path) -> None:
    """A rank the backend aborts at the sequence's first call beats no more: its beat must
    be on file already, or the launcher names the last row it beat from. And the sequence
    is no size."""
    trace = read_trace(moe_trace(tmp_path / "trace"))
    program = build_program(trace)
    points = points_of(program, ReplaySettings(trace=str(tmp_path / "trace")))
    hb = Heartbeat(tmp_path / "ranks" / "rank1.json", 1, "host")
    try:
        hb.point, hb.phase = len(program.rows), "sequence"
        hb.write_now()
        beat = json.loads((tmp_path / "ranks" / "rank1.json").read_text())
        assert (beat["point"], beat["phase"]) == (len(program.rows), "sequence")
    finally:
        hb.stop()
    watch = Watch(tmp_path, points)
    where = watch.where(Seen(rank=1, point=len(program.rows), phase="sequence", mtime=0.0))
    assert where == "replay sequence (sequence, iteration 0)"
