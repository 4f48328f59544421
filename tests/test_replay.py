"""`commbench replay` without launching anything (issue 26): DDP's bucket assignment against
hand-worked examples, the program a trace becomes (rows, their instances, each rank's
sequence, --world), the recorded step time from hand-set issue and completion times, the
`calls` column and run.json's `replay` record, and every bad input refused in one line."""

from __future__ import annotations

import json
import pickle
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import UserError
from commbench.replay import compiled
from commbench.replay import program as program_module
from commbench.replay.buckets import FIRST_BUCKET_BYTES, Reducer, assign_buckets
from commbench.replay.explain import explain, fit_rows, op_cost, predict_buckets_s
from commbench.replay.pace import DEFAULT_MAX_GAP_S
from commbench.replay.program import (
    WORLD,
    Groups,
    Issue,
    Program,
    build_program,
    rank_sequence,
    recorded_step_times,
)
from commbench.replay.settings import max_gap_for
from commbench.results.csv_rows import csv_columns, csv_record
from commbench.results.record import RunKind, RunRecord, RunStatus
from commbench.results.replay import RebucketCap, ReplayRecord
from commbench.results.schema import ResultRow
from commbench.traces.formats import load_any
from commbench.traces.records import MANIFEST_FILE, Call, Parameter, Trace
from commbench.traces.splits import Exchanges
from tests.factories import ddp_trace, make_row, trace_call, write_trace

KiB, MiB = 1 << 10, 1 << 20


def f32(nbytes: int) -> Parameter:
    return Parameter(numel=nbytes // 4, dtype="float32")


# -- DDP's buckets -----------------------------------------------------------------------------


def test_a_cap_given_is_the_first_buckets_limit_too() -> None:
    """torch 2.13's `_BucketCapacityConfig`: a `bucket_cap_mb` given is the first bucket's
    limit too (a DDP job of 4 x 1.05 MB layers at bucket_cap_mb=2 all-reduced 2.1 MB twice a
    step, not 1.05, 2.1 and 1.05): the advisor, which tells a job the cap to give, assumed
    a 1 MiB first bucket at every cap."""
    layer = [f32(MiB), f32(2 * KiB)]
    buckets = assign_buckets(layer * 4, 2 * MiB)
    assert [b.nbytes for b in buckets] == [2 * (MiB + 2 * KiB)] * 2
    assert [b.params for b in buckets] == [(7, 6, 5, 4), (3, 2, 1, 0)]


def test_without_a_cap_the_first_bucket_is_1_mib_then_the_cap_applies() -> None:
    # reversed: 512K, 512K (1 MiB reached: the first bucket closes), 2M, 2M, 1M
    params = [f32(MiB), f32(2 * MiB), f32(2 * MiB), f32(512 * KiB), f32(512 * KiB)]
    buckets = assign_buckets(params, 4 * MiB, first_bytes=FIRST_BUCKET_BYTES)
    assert [b.params for b in buckets] == [(4, 3), (2, 1), (0,)]
    assert [b.nbytes for b in buckets] == [MiB, 4 * MiB, MiB]
    assert [b.limit for b in buckets] == [FIRST_BUCKET_BYTES, 4 * MiB, 4 * MiB]


def test_a_parameter_larger_than_the_cap_gets_its_own_bucket() -> None:
    params = [f32(64 * KiB), f32(10 * MiB), f32(2 * MiB)]
    buckets = assign_buckets(params, MiB)
    # 2M alone fills the first bucket; 10M alone past the cap; 64K is left over
    assert [b.params for b in buckets] == [(2,), (1,), (0,)]
    assert [b.nbytes for b in buckets] == [2 * MiB, 10 * MiB, 64 * KiB]


def test_dtypes_never_share_a_bucket() -> None:
    params = [
        Parameter(numel=MiB // 2, dtype="bfloat16"),  # 1 MiB
        f32(256 * KiB),
        Parameter(numel=128 * KiB, dtype="bfloat16"),  # 256 KiB
        f32(256 * KiB),
    ]
    buckets = assign_buckets(params, 25 * MiB, first_bytes=FIRST_BUCKET_BYTES)
    # reversed: f32 256K, bf16 256K, f32 256K, bf16 1M (bf16 reaches 1.25M: closed)
    assert [(b.dtype, b.params) for b in buckets] == [
        ("bfloat16", (2, 0)),
        ("float32", (3, 1)),
    ]
    assert [b.nbytes for b in buckets] == [MiB + 256 * KiB, 512 * KiB]


def test_finding_unused_parameters_buckets_in_definition_order_then_reverses() -> None:
    """find_unused_parameters: the constructor's buckets, never rebuilt: filled in
    definition order, sorted by their first parameter, reversed (tests/jobs/ddp_unused_job.py
    checks the rule against DDP's own buckets)."""
    params = [f32(MiB), f32(2 * KiB)] * 4 + [f32(32 * KiB)]
    buckets = assign_buckets(params, 2 * MiB, find_unused=True)
    assert [b.params for b in buckets] == [(7, 8), (3, 4, 5, 6), (0, 1, 2)]
    assert [b.nbytes for b in buckets] == [34 * KiB, 2 * MiB + 4 * KiB, 2 * MiB + 2 * KiB]
    # without it, the rebuilt buckets fill from the last parameter
    rebuilt = assign_buckets(params, 2 * MiB)
    assert [b.params for b in rebuilt] == [(8, 7, 6, 5, 4), (3, 2, 1, 0)]


def test_finding_unused_parameters_is_read_from_the_trace_and_adds_the_used_map(
    tmp_path: Path,
) -> None:
    """DDP's local-used map, one int32 per parameter all-reduced each syncing step, is how a
    trace shows find_unused_parameters; the advisor's step then has it after the buckets."""
    params = [f32(MiB), f32(2 * KiB), f32(MiB)]
    calls = [
        trace_call("all_reduce", 2 * MiB + 2 * KiB, step=1),
        trace_call("all_reduce", 12, dtype="int32", step=1),
    ]
    trace = load_any(_with_parameters(write_trace(tmp_path / "t", {0: calls, 1: calls}), params))
    reducer = Reducer.of(trace)
    assert reducer.find_unused and reducer.parameters == tuple(params)
    assert reducer.reductions(MiB) == [("float32", MiB + 2 * KiB), ("float32", MiB),
                                       ("int32", 12)]  # fmt: skip
    assert len(reducer.buckets(MiB)) == 2
    # 3 parameters, a map of 4: another int32 all-reduce, not DDP's map
    other = [trace_call("all_reduce", 16, dtype="int32", step=1)]
    trace = load_any(_with_parameters(write_trace(tmp_path / "u", {0: other, 1: other}), params))
    assert not Reducer.of(trace).find_unused


def test_a_cap_below_one_byte_is_refused() -> None:
    with pytest.raises(UserError, match="at least 1 byte"):
        assign_buckets([f32(4)], 0)


# -- the program -------------------------------------------------------------------------------


def tp_trace_calls(rank: int) -> list[Call]:
    """Rank `rank`'s calls of `tp_trace`."""
    pair = (0, 1) if rank < 2 else (2, 3)
    calls = []
    for step in range(2):
        calls.append(trace_call("all_reduce", 64 * KiB, ranks=(0, 1, 2, 3), step=step))
        calls.append(
            trace_call(
                "all_gather",
                8 * KiB,
                out_bytes=16 * KiB,
                ranks=pair,
                group=f"tp{pair[0]}",
                step=step,
                async_op=True,
            )
        )
    return calls


def tp_trace(directory: Path) -> Path:
    """4 ranks: a world all_reduce per step, and a tensor-parallel all_gather in {0,1},{2,3}."""
    return write_trace(directory, {rank: tp_trace_calls(rank) for rank in range(4)})


def test_rows_are_the_plans_with_their_instances(tmp_path: Path) -> None:
    program = build_program(load_any(tp_trace(tmp_path)))
    assert tuple(program.groups) == ((0, 1), (2, 3))
    rows = {r.op: r for r in program.rows}
    assert rows["all_reduce"].shapes == (WORLD,) and rows["all_reduce"].calls == 2
    gather = rows["all_gather"]
    assert (gather.size_bytes, gather.group_size, gather.groups) == (16 * KiB, 2, 2)
    assert gather.shapes == (0, 1) and gather.timed == 2  # disjoint: both timed at once
    assert gather.calls == 4  # 2 steps x 2 instances, as the plan counts them


def test_each_rank_replays_its_own_calls_with_the_async_flag(tmp_path: Path) -> None:
    trace = load_any(tp_trace(tmp_path))
    program = build_program(trace)
    steps = rank_sequence(trace, program, 3)
    assert len(steps) == 2
    assert [(i.op, i.group, i.async_op) for i in steps[0]] == [
        ("all_reduce", WORLD, False),
        ("all_gather", 1, True),
    ]


def test_world_8_replicates_the_subgroups_and_scales_nothing_else(tmp_path: Path) -> None:
    trace = load_any(tp_trace(tmp_path))
    program = build_program(trace, world=8)
    assert sorted(program.groups) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    rows = {r.op: r for r in program.rows}
    assert rows["all_reduce"].group_size == 8 and rows["all_reduce"].size_bytes == 64 * KiB
    assert rows["all_gather"].groups == 4
    steps = rank_sequence(trace, program, 6)  # plays traced rank 2 in the second copy
    assert program.groups[steps[0][1].group] == (6, 7)


@pytest.mark.parametrize("world", [None, 8])
def test_the_rows_are_the_plans_rows_with_the_plans_calls(
    tmp_path: Path, world: int | None
) -> None:
    """The program's rows are keyed as the plan's (`PlanRow.key`), one row per replayable
    plan row, and each counts the calls the plan counts for it."""
    program = build_program(load_any(tp_trace(tmp_path)), world=world)
    plan_calls = program.plan.calls_by_key()
    keys = {
        (
            "send" if r.op == "sendrecv" else r.op,
            r.size_bytes,
            r.traced_dtype,
            r.group_size,
            r.spans_world,
            r.splits is not None,
        ): r.calls
        for r in program.rows
    }
    assert len(keys) == len(program.rows) == 2
    assert keys == plan_calls


def test_world_scales_a_world_all_gather(tmp_path: Path) -> None:
    calls = [trace_call("all_gather", 4 * KiB, out_bytes=8 * KiB, step=0)]
    trace = load_any(write_trace(tmp_path, {0: calls, 1: calls}))
    program = build_program(trace, world=4)
    (row,) = program.rows
    assert (row.size_bytes, row.group_size) == (16 * KiB, 4)  # the shard kept: S/2 x 4
    assert rank_sequence(trace, program, 3)[0][0].size_bytes == 16 * KiB


def test_sends_replay_as_sendrecv_rows_and_peers_map(tmp_path: Path) -> None:
    send = trace_call("send", KiB, peer=1, step=0)
    recv = trace_call("recv", KiB, peer=0, step=0)
    trace = load_any(write_trace(tmp_path, {0: [send], 1: [recv]}))
    program = build_program(trace, world=4)
    (row,) = program.rows
    assert (row.op, row.group_size, row.groups) == ("sendrecv", 2, 2)
    assert rank_sequence(trace, program, 3)[0][0].peer == 2


def test_a_group_cut_by_the_world_is_refused(tmp_path: Path) -> None:
    per_rank = {}
    for rank in range(4):  # groups {0,2} and {1,3}: data-parallel across a 4-rank world
        pair = (rank % 2, rank % 2 + 2)
        per_rank[rank] = [trace_call("all_reduce", KiB, ranks=pair, group=f"dp{pair[0]}", step=0)]
    trace = load_any(write_trace(tmp_path, per_rank))
    with pytest.raises(UserError, match="past the 2 replayed"):
        build_program(trace, world=2)


def test_a_huge_world_is_built_per_call_not_per_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--world 1048576 of a 4-rank trace (tensor-parallel pairs, a pipeline send): the
    groups and rows are arithmetic on the trace's own, so building the program maps no call
    onto any rank and allocates about what the traced world does (it took 12-50 s and 230 MB
    when every rank's calls were mapped: world x calls)."""
    per_rank = {
        rank: [
            *tp_trace_calls(rank),
            trace_call(
                "send" if rank % 2 == 0 else "recv", KiB, ranks=range(4), peer=rank ^ 1, step=1
            ),
        ]
        for rank in range(4)
    }
    trace = load_any(write_trace(tmp_path, per_rank))
    mapped: list[int] = []
    real_map = program_module.map_call

    def counted_map(call: Call, groups: Groups, table: Exchanges) -> Issue | None:
        mapped.append(call.rank)
        return real_map(call, groups, table)

    monkeypatch.setattr(program_module, "map_call", counted_map)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        build_program(trace)
        traced_bytes = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        huge = build_program(trace, world=1 << 20)
        huge_bytes = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert mapped == []  # no call was mapped onto a rank to build it
    assert huge_bytes < 2 * traced_bytes + 64 * KiB, (huge_bytes, traced_bytes)
    # what it holds is the whole world's, by arithmetic
    assert len(huge.groups) == (1 << 20) // 2  # the TP pairs, which the sends share
    rows = {r.op: r for r in huge.rows}
    assert rows["all_gather"].groups == rows["sendrecv"].groups == (1 << 20) // 2
    last = (1 << 20) - 1  # plays traced rank 3 in the last copy
    steps = rank_sequence(trace, huge, last)
    assert mapped == [3] * len(per_rank[3])  # its own calls only
    gather, recv = steps[0][1], steps[1][-1]
    assert huge.groups[gather.group] == (last - 1, last)
    assert (recv.op, recv.peer) == ("recv", last - 1)


def test_the_compiled_program_is_a_file_per_traced_rank_at_any_world(tmp_path: Path) -> None:
    """The launcher wrote a file per replay rank (a million at --world 1048576) before the
    launch; now one per traced rank, and each worker reads its own calls back as the
    launcher maps them."""
    trace = load_any(tp_trace(tmp_path / "trace"))
    for world, ranks in ((8, range(8)), (1 << 20, (0, 5, (1 << 20) - 3, (1 << 20) - 1))):
        program = build_program(trace, world=world)
        out = tmp_path / f"program-{world}"
        compiled.write(trace, program, out)
        assert sorted(f.name for f in out.iterdir()) == [
            "program.json",
            *(f"rank-{r}.jsonl" for r in range(4)),
        ]
        read = compiled.read(out)
        assert read.groups == program.groups and read.rows == program.rows
        for rank in ranks:
            assert read.sequence(rank) == rank_sequence(trace, program, rank), rank


def test_long_traces_replay_the_first_20_steps(tmp_path: Path) -> None:
    trace = load_any(ddp_trace(tmp_path, world=2, steps=25))
    program = build_program(trace)
    assert program.steps == tuple(range(20)) and program.total_steps == 25
    assert any("first 20" in n for n in program.notes)
    assert len(build_program(trace, steps=25).steps) == 25


# -- the recorded step time --------------------------------------------------------------------


def test_recorded_time_is_the_union_of_each_ranks_calls_then_the_max(tmp_path: Path) -> None:
    us = 1000
    rank0 = [  # [0, 10] and [5, 20] overlap (20 us), [30, 40]: 30 us in all
        trace_call("all_reduce", KiB, step=0, issued_ns=0 * us, completed_ns=10 * us),
        trace_call("all_reduce", KiB, step=0, issued_ns=5 * us, completed_ns=20 * us),
        trace_call("all_reduce", KiB, step=0, issued_ns=30 * us, completed_ns=40 * us),
    ]
    rank1 = [  # 45 us, and a call never seen complete (zero-length)
        trace_call("all_reduce", KiB, step=0, issued_ns=0, completed_ns=45 * us),
        trace_call("all_reduce", KiB, step=0, issued_ns=50 * us, completed_ns=None),
        trace_call("all_reduce", KiB, step=0, issued_ns=60 * us, completed_ns=61 * us),
    ]
    trace = load_any(write_trace(tmp_path, {0: rank0, 1: rank1}))
    times, notes = recorded_step_times(trace, [0])
    assert times == [pytest.approx(46e-6)]
    assert notes and "1 recorded call(s) were never seen complete" in notes[0]


def test_the_aligned_time_leaves_out_the_wait_for_a_late_peer(tmp_path: Path) -> None:
    us = 1000
    # rank 1 reaches both collectives 30 us after rank 0: rank 0 waits for it each time
    rank0 = [
        trace_call("all_reduce", KiB, step=0, issued_ns=0, completed_ns=40 * us),
        trace_call("all_reduce", KiB, step=0, issued_ns=50 * us, completed_ns=90 * us),
    ]
    rank1 = [
        trace_call("all_reduce", KiB, step=0, issued_ns=30 * us, completed_ns=40 * us),
        trace_call("all_reduce", KiB, step=0, issued_ns=80 * us, completed_ns=90 * us),
    ]
    trace = load_any(write_trace(tmp_path, {0: rank0, 1: rank1}))
    total, _ = recorded_step_times(trace, [0])
    aligned, _ = recorded_step_times(trace, [0], aligned=True)
    assert total == [pytest.approx(80e-6)]  # rank 0: [0, 40] and [50, 90]
    assert aligned == [pytest.approx(20e-6)]  # every rank: [30, 40] and [80, 90]


def test_each_issue_knows_its_offset_from_the_steps_first_call(tmp_path: Path) -> None:
    us = 1000
    rank0 = [
        trace_call("all_reduce", KiB, step=0, issued_ns=1000 * us, completed_ns=1010 * us),
        trace_call("all_reduce", KiB, step=1, issued_ns=2000 * us, completed_ns=2010 * us),
    ]
    rank1 = [
        trace_call("all_reduce", KiB, step=0, issued_ns=1004 * us, completed_ns=1010 * us),
        trace_call("all_reduce", KiB, step=1, issued_ns=1990 * us, completed_ns=2010 * us),
    ]
    trace = load_any(write_trace(tmp_path, {0: rank0, 1: rank1}))
    program = build_program(trace)
    offsets = {
        r: [[i.offset_s for i in s] for s in rank_sequence(trace, program, r)] for r in (0, 1)
    }
    # each step's origin is its first issue on any rank: rank 0 in step 0, rank 1 in step 1
    assert offsets[0] == [[0.0], [pytest.approx(10e-6)]]
    assert offsets[1] == [[pytest.approx(4e-6)], [0.0]]


def test_pace_replays_the_cpu_time_recorded_between_calls_on_cpus(tmp_path: Path) -> None:
    """`Issue.busy_s`: the process CPU time recorded between a rank's call and its previous
    one, on any step (what --pace computes before issuing it); 0 for the first call, a call
    without the record, or one made on a GPU, whose host only launched the device's work."""
    ms = 10**6
    rank0 = [
        trace_call("all_reduce", KiB, step=0, issued_ns=0, device="cpu", cpu_ns=5 * ms),
        trace_call("all_reduce", KiB, step=0, issued_ns=100 * ms, device="cpu", cpu_ns=85 * ms),
        trace_call("all_reduce", KiB, step=1, issued_ns=200 * ms, device="cpu", cpu_ns=88 * ms),
        trace_call("all_reduce", KiB, step=1, issued_ns=300 * ms, device="cuda:0", cpu_ns=99 * ms),
        trace_call("all_reduce", KiB, step=1, issued_ns=400 * ms, device="cpu"),
    ]
    rank1 = [replace(c, cpu_ns=None) for c in rank0]
    trace = load_any(write_trace(tmp_path, {0: rank0, 1: rank1}))
    program = build_program(trace, pace=True)
    busy = {r: [[i.busy_s for i in s] for s in rank_sequence(trace, program, r)] for r in (0, 1)}
    assert busy[0] == [[0.0, pytest.approx(0.080)], [pytest.approx(0.003), 0.0, 0.0]]
    assert busy[1] == [[0.0, 0.0], [0.0, 0.0, 0.0]]
    # and the compiled program the workers read keeps it
    directory = tmp_path / "program"
    compiled.write(trace, program, directory)
    assert [[i.busy_s for i in s] for s in compiled.read(directory).sequence(0)] == busy[0]


def test_a_batch_is_replayed_as_recorded_and_guessed_only_in_a_trace_without_batches(
    tmp_path: Path,
) -> None:
    """A trace of schema 3 marks each batch_isend_irecv's calls (`batch`): those go as one
    batch, and consecutive async sends and receives without a mark go one by one, as the
    job issued them. An older trace does not say: each run of them is taken for a batch."""

    def rank(me: int) -> list[Call]:
        other = 1 - me
        return [
            trace_call("send", KiB, peer=other, async_op=True, step=0, batch=0),
            trace_call("recv", KiB, peer=other, async_op=True, step=0, batch=0),
            trace_call("all_reduce", KiB, step=0),
            trace_call("send", KiB, peer=other, async_op=True, step=0),
            trace_call("recv", KiB, peer=other, async_op=True, step=0),
        ]

    directory = write_trace(tmp_path / "new", {0: rank(0), 1: rank(1)})
    trace = load_any(directory)
    assert trace.manifest.records_batches
    (step,) = rank_sequence(trace, build_program(trace), 0)
    assert [i.batch for i in step] == [0, 0, None, None, None]

    edit = json.loads((directory / MANIFEST_FILE).read_text())
    edit["schema_version"] = 2
    (directory / MANIFEST_FILE).write_text(json.dumps(edit))
    old = load_any(directory)
    assert not old.manifest.records_batches
    (step,) = rank_sequence(old, build_program(old), 0)
    assert [i.batch for i in step] == [0, 0, None, 3, 3]  # numbered by the run's first place


def _timed(directory: Path, times: dict[int, list[int]]) -> Trace:
    """A one-step trace whose rank r issues an all_reduce at each of times[r] (ns)."""
    per_rank = {
        r: [trace_call("all_reduce", KiB, step=0, issued_ns=t, completed_ns=t + 1) for t in ts]
        for r, ts in times.items()
    }
    return load_any(write_trace(directory, per_rank))


def _offsets(trace: Trace, program: Program) -> dict[int, list[float | None]]:
    return {r: [i.offset_s for i in rank_sequence(trace, program, r)[0]] for r in trace.calls}


def test_pace_caps_a_long_idle_gap_and_says_so(tmp_path: Path) -> None:
    """Two calls 10^15 ns (11.6 days) apart: paced as recorded, the replay waited 11.6 days
    and the watchdog called it a backend or network hang. The gap is replayed as --max-gap;
    the gaps before and after it, and the ranks' order and skew, are kept."""
    day = 10**15
    trace = _timed(tmp_path, {0: [1_000, day + 1_000], 1: [4_000, day + 3_000]})
    program = build_program(trace, max_gap_s=2.0, pace=True)
    assert _offsets(trace, program) == {
        0: [0.0, pytest.approx(2.000003)],
        1: [pytest.approx(3e-6), pytest.approx(2.000005)],
    }
    assert (program.gaps.capped, program.gaps.max_gap_s) == (1, 2.0)
    assert program.gaps.longest_s == pytest.approx(1e6, rel=1e-6)
    (note,) = [n for n in program.notes if "--pace" in n]
    assert "1 idle gap(s)" in note and "replayed as 2 s" in note
    # the cap is applied with or without --pace; only a paced replay is told of it
    assert not any("--pace" in n for n in build_program(trace, max_gap_s=2.0).notes)


def test_pace_keeps_gaps_past_a_floats_precision_in_nanoseconds(tmp_path: Path) -> None:
    """Issue times 1 ns and 2^63 - 2 ns: as floats their difference loses its last digits;
    in integer nanoseconds the 1 ns after the capped gap is kept."""
    top = (1 << 63) - 2  # its completion, 1 ns later, is the last nanosecond a trace holds
    trace = _timed(tmp_path, {0: [1, top], 1: [1, top - 1]})
    offsets = _offsets(trace, build_program(trace, max_gap_s=2.0))
    assert offsets[1] == [0.0, 2.0] and offsets[0][0] == 0.0
    assert offsets[0][1] == pytest.approx(2.0 + 1e-9, abs=1e-12) and offsets[0][1] > 2.0


def test_a_clock_that_steps_back_is_counted_and_issues_at_once(tmp_path: Path) -> None:
    trace = _timed(tmp_path, {0: [5_000_000, 1_000_000], 1: [2_000_000, 3_000_000]})
    program = build_program(trace, pace=True)
    assert program.gaps.backwards == 1 and program.gaps.capped == 0
    # issued at offset 0, before the one before it: the worker issues it right after
    assert _offsets(trace, program)[0] == [pytest.approx(4e-3), 0.0]
    assert any("stepped back" in n for n in program.notes)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", "null"])
def test_a_timestamp_that_is_no_time_is_refused(tmp_path: Path, value: str) -> None:
    trace = ddp_trace(tmp_path / "t", world=2, steps=1)
    path = trace / "rank-1.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"issued_ns": 0', f'"issued_ns": {value}')
    path.write_text("\n".join(lines) + "\n")
    bad(trace, "--dry-run", "--pace", words="rank-1.jsonl: line 2: issued_ns: null, NaN or inf")


def test_max_gap_is_checked(tmp_path: Path) -> None:
    trace = ddp_trace(tmp_path / "t", world=2, steps=1)
    for value in ("0", "-1", "nan", "inf"):
        bad(trace, "--dry-run", "--pace", "--max-gap", value, words="--max-gap")
    bad(
        trace, "--dry-run", "--pace", "--max-gap", "31", "--timeout", "60",
        words="--max-gap 31 s is longer than half of --timeout 60 s",
    )  # fmt: skip
    assert max_gap_for(None, 300.0) == DEFAULT_MAX_GAP_S
    assert max_gap_for(None, 6.0) == 3.0  # at most half the timeout
    assert max_gap_for(0.25, 300.0) == 0.25
    for wrong in (True, "1", [1]):
        with pytest.raises(UserError, match="--max-gap"):
            max_gap_for(wrong, 300.0)  # type: ignore[arg-type]


def test_a_trace_without_times_has_no_recorded_time(tmp_path: Path) -> None:
    trace = load_any(ddp_trace(tmp_path, world=2, steps=2))
    assert recorded_step_times(trace, [0, 1]) == ([None, None], [])


# -- the model ---------------------------------------------------------------------------------


def test_the_model_fits_the_rows_and_names_their_regime() -> None:
    alpha, bw = 10.0, 1.0  # us per step, GB/s
    rows = []
    for op, size, calls in (("all_reduce", 4 * KiB, 100), ("broadcast", 4 * MiB, 1)):
        c = op_cost(op, 2)
        t = c.steps * alpha + c.bytes_factor * size / (bw * 1e3)
        rows.append(make_row(size, [t] * 5, op=op, calls=calls))
    params, why = fit_rows(rows, "gloo")
    assert params is not None, why
    assert params.alpha_us == pytest.approx(alpha) and params.bw_gbps == pytest.approx(bw)
    explained = explain(rows, params)
    assert [e.row.op for e in explained] == ["broadcast", "all_reduce"]
    assert [e.regime for e in explained] == ["bandwidth-bound", "latency-bound"]
    # two buckets of 1 MiB on 2 ranks: 2 x (2 alpha + 1 MiB / beta)
    assert predict_buckets_s([MiB, MiB], 2, params) == pytest.approx(2 * (20 + MiB / 1e3) / 1e6)


# -- the records -------------------------------------------------------------------------------


def test_calls_round_trip_and_add_a_csv_column() -> None:
    row = make_row(calls=7)
    again = ResultRow.from_dict(json.loads(json.dumps(row.to_dict())))
    assert again.calls == 7
    assert csv_columns([row])[-1] == "calls" and csv_record(row)["calls"] == 7
    plain = make_row()
    assert "calls" not in plain.to_dict() and "calls" not in csv_columns([plain])


def test_run_json_keeps_the_replay_record() -> None:
    replay = ReplayRecord(
        trace="/t",
        traced_world=2,
        world=4,
        steps=2,
        complete=False,
        recorded_comm_s_per_step=[0.5, None],
        replayed_comm_s_per_step=[0.25, 0.75],
        notes=["incomplete"],
        rebucket=[
            RebucketCap(
                cap_bytes=MiB, buckets=3, measured_s_per_step=0.1, predicted_s_per_step=None
            )
        ],
        best_cap_mb=1.0,
    )
    record = RunRecord(kind=RunKind.REPLAY, status=RunStatus.COMPLETE, replay=replay)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["replay"]["recorded_comm_s"] == 0.5 and data["replay"]["replayed_comm_s"] == 0.5
    assert RunRecord.from_dict(data, "run.json").replay == replay
    assert "replay" not in RunRecord(kind=RunKind.COLLECTIVES, status=RunStatus.COMPLETE).to_dict()


# -- the command, launching nothing ------------------------------------------------------------


def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["replay", *args])
    return result.exit_code, result.stdout, result.stderr


def test_dry_run_prints_the_plan_and_launches_nothing(tmp_path: Path) -> None:
    trace = write_trace(
        tmp_path / "t", {0: [trace_call(step=0)], 1: [trace_call(step=0)]}, complete=False
    )
    code, out, err = run_cli(
        str(trace), "--dry-run", "--device", "cpu", "--out", str(tmp_path / "o")
    )
    assert code == 0, err
    assert out.startswith("replay plan: 2 ranks, 1 of 1 steps") and "all_reduce" in out
    assert "incomplete" in err
    assert not (tmp_path / "o").exists()


def bad(directory: Path, *args: str, words: str) -> None:
    code, out, err = run_cli(str(directory), "--device", "cpu", *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert words in err, err


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    calls = [trace_call(step=0)]
    good = write_trace(tmp_path / "good", {0: calls, 1: calls})
    bad(good, "--steps", "0", words="--steps must be >= 1, got 0")
    # one range per option, whatever the size of the number given (was 1..1048576 for
    # 1048577 but int64's for 10^23)
    for world in ("0", "1048577", "1" + "0" * 23):
        bad(good, "--world", world, words="--world must be")
    bad(good, "--world", "1" + "0" * 23, words="<= 1048576")
    bad(good, "--rebucket", "1M-4M", words="the trace has no parameter list")
    bad(good, "--nproc", "3", words="--nproc 3")
    missing = write_trace(tmp_path / "missing", {0: calls, 1: calls})
    (missing / "rank-1.jsonl").unlink()
    bad(missing, words="rank 1's calls are missing")
    newer = write_trace(tmp_path / "newer", {0: calls, 1: calls})
    doc = json.loads((newer / MANIFEST_FILE).read_text())
    doc["schema_version"] = 99
    (newer / MANIFEST_FILE).write_text(json.dumps(doc))
    bad(newer, words="newer commbench")
    pickled = tmp_path / "dump_0"
    pickled.write_bytes(pickle.dumps({"entries": []}))
    bad(pickled, words="pickle")
    bad(tp_trace(tmp_path / "tp"), "--world", "1", words="--world 1 is too small")


def test_a_rooted_op_is_replayed_from_its_recorded_root(tmp_path: Path) -> None:
    us = 1000
    calls = {
        r: [
            trace_call("broadcast", KiB, step=0, peer=1, issued_ns=us, completed_ns=2 * us),
            trace_call("all_reduce", KiB, step=0, issued_ns=3 * us, completed_ns=4 * us),
        ]
        for r in (0, 1)
    }
    trace = load_any(write_trace(tmp_path, calls))
    issues = rank_sequence(trace, build_program(trace), 0)[0]
    assert [(i.op, i.peer) for i in issues] == [("broadcast", 1), ("all_reduce", None)]
    # on 4 ranks, the world's root is still rank 1
    wide = build_program(trace, world=4)
    assert [i.peer for i in rank_sequence(trace, wide, 3)[0]] == [1, None]


def test_a_send_without_its_recv_is_refused(tmp_path: Path) -> None:
    """A replay would wait for ever on the send left over (a trace cut mid-step). The refusal
    names it (rank, seq, op, peer, bytes): c10d pairs sends and receives in order, so the
    one left over is the last."""
    calls = {
        0: [trace_call("send", KiB, peer=1, step=0), trace_call("send", 2 * KiB, peer=1, step=0)],
        1: [trace_call("recv", KiB, peer=0, step=0)],
    }
    trace = load_any(write_trace(tmp_path, calls))
    with pytest.raises(UserError) as refused:
        build_program(trace)
    assert str(refused.value) == (
        "step 0: rank 0 sends 2 time(s) to rank 1, which receives 1; left over: rank 0's call 1 "
        "(send to rank 1, 2048 B): a replay would wait for ever on them (a trace cut in that "
        "step? --steps K replays the steps before it)"
    )


def test_receives_left_over_are_named_and_counted(tmp_path: Path) -> None:
    recv = trace_call("recv", 0, out_bytes=KiB, peer=0, step=0)
    barrier = trace_call("barrier", 0, step=0)
    calls = {0: [barrier], 1: [barrier, *[recv] * 5]}
    trace = load_any(write_trace(tmp_path, calls))
    with pytest.raises(UserError, match=r"which receives 5; left over: rank 1's call 1 \(recv "
                       r"from rank 0, 1024 B\), rank 1's call 2 .*, rank 1's call 3 .* and 2 "
                       r"more: "):  # fmt: skip
        build_program(trace)


def _with_parameters(trace: Path, parameters: list[Parameter]) -> Path:
    from dataclasses import replace as replaced

    from commbench.traces.reader import read_manifest
    from commbench.traces.writer import write_manifest

    write_manifest(trace, replaced(read_manifest(trace), parameters=tuple(parameters)))
    return trace


def test_the_caps_are_predicted_on_another_fabric_without_launching(tmp_path: Path) -> None:
    from commbench.replay.explain import predict_elsewhere

    params = [f32(MiB)] * 4 + [f32(4 * KiB)] * 4  # four 1 MiB weights, four small biases
    trace = _with_parameters(ddp_trace(tmp_path / "t", world=2), params)
    e = predict_elsewhere(Reducer(parameters=tuple(params)), [MiB, 4 * MiB], 64, 100.0, 5.0)
    one = op_cost("all_reduce", 64)
    # each all_reduce: 2 x 63 latency steps of 5 us, plus its bytes at 100 GB/s per link
    expected = [
        sum(one.steps * 5.0 + one.bytes_factor * b / 1e5 for b in buckets) / 1e6
        for buckets in ([b.nbytes for b in assign_buckets(params, cap)] for cap in (MiB, 4 * MiB))
    ]
    assert [t for _, _, t in e.caps] == [pytest.approx(x) for x in expected]
    assert e.best_cap_mb == 4  # fewer buckets, fewer latency steps: latency-bound at 64 ranks
    code, out, err = run_cli(
        str(trace), "--dry-run", "--rebucket", "1M-4M:x4", "--bw", "100", "--latency", "5",
        "--world", "64",
    )  # fmt: skip
    assert code == 0, err
    assert "Predicted on 64 ranks, 100 GB/s per link, 5 us per step" in out
    assert "There, bucket_cap_mb=4." in out
    code, _, err = run_cli(str(trace), "--dry-run", "--rebucket", "1M", "--bw", "100")
    assert code == 2 and "give both" in err
    code, _, err = run_cli(str(trace), "--dry-run", "--bw", "100", "--latency", "5")
    assert code == 2 and "give --rebucket too" in err
    code, _, err = run_cli(
        str(trace), "--dry-run", "--rebucket", "1M", "--bw", "0", "--latency", "5"
    )
    assert code == 2 and "Traceback" not in err


def test_the_other_fabric_round_trips_through_run_json() -> None:
    from commbench.results.replay import Elsewhere

    e = Elsewhere(
        bw_gbps=100.0, latency_us=5.0, world=64, caps=((MiB, 4, 0.0026), (4 * MiB, 2, 0.0013))
    )
    replay = ReplayRecord(trace="t", traced_world=2, world=64, steps=1, complete=True, elsewhere=e)
    record = RunRecord(kind=RunKind.REPLAY, status=RunStatus.COMPLETE, replay=replay)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["replay"]["elsewhere"]["best_cap_mb"] == 4
    assert RunRecord.from_dict(data, "run.json").replay == replay
