"""commbench's trace directory (issue 26): the writer and the streaming reader, every input
it refuses in one line, and the replay plan's numbers, with --world rescaling per op family."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.files import dump_json
from commbench.traces import reader as trace_reader
from commbench.traces import writer as trace_writer
from commbench.traces.names import canonical_dtype, canonical_op
from commbench.traces.plan import build_plan, render_plan
from commbench.traces.reader import read_trace
from commbench.traces.records import MANIFEST_FILE, SCHEMA_VERSION, Manifest
from commbench.traces.writer import TraceWriter
from tests.factories import ddp_trace, trace_call, write_trace

MiB = 1 << 20


def refused(directory: Path, *words: str) -> str:
    """read_trace's one line for `directory`, which must name each of `words`."""
    with pytest.raises(UserError) as info:
        read_trace(directory)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


def rank_file(directory: Path, rank: int) -> Path:
    return directory / f"rank-{rank}.jsonl"


def edit_manifest(directory: Path, **changes: object) -> None:
    path = directory / MANIFEST_FILE
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


# -- writing and reading back -------------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    calls = [
        trace_call("broadcast", 4 * MiB, peer=0, host="n0", device="cuda:0"),
        trace_call("all_gather", MiB, out_bytes=2 * MiB, async_op=True, step=0),
        trace_call("send", 64, group="0", peer=1, issued_ns=5, completed_ns=9, batch=0),
        trace_call("all_reduce", MiB, step=0, issued_ns=10, completed_ns=None),
        trace_call("all_reduce", 64, step=0, device="cuda:0", graph=True),
        trace_call("all_reduce", 64, step=0, device="cpu", cpu_ns=123_456_789),
    ]
    write_trace(
        tmp_path,
        {0: calls, 1: [replace(c, op="recv", peer=0) if c.op == "send" else c for c in calls]},
    )
    trace = read_trace(tmp_path)
    assert trace.manifest.complete and trace.manifest.ended is not None
    assert trace.manifest.argv == ("python", "train.py")
    assert trace.manifest.schema_version == SCHEMA_VERSION
    got = trace.calls[0]
    assert [c.seq for c in got] == [0, 1, 2, 3, 4, 5]
    assert [c.group_seq for c in got] == [0, 1, None, 2, 3, 4]  # a send is not a collective
    assert [c.graph for c in got] == [False] * 4 + [True, False]  # captured into a CUDA graph
    assert "graph" not in got[0].payload() and got[4].payload()["graph"] is True
    # the process CPU time at issue: written where recorded, absent (None) elsewhere
    assert [c.cpu_ns for c in got] == [None] * 5 + [123_456_789]
    assert "cpu_ns" not in got[0].payload()
    # a batch_isend_irecv's send: its batch, written only there
    assert [c.batch for c in got] == [None, None, 0, None, None, None]
    assert "batch" not in got[0].payload() and got[2].payload()["batch"] == 0
    assert got[1] == replace(calls[1], seq=1, group_seq=1)
    assert got[2].peer == 1 and got[2].completed_ns == 9
    assert trace.notes() == []


def test_every_line_is_strict_json_and_the_writer_streams(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path, 0, manifest=Manifest(argv=("x",), world_size=1))
    for _ in range(trace_writer.FLUSH_EVERY):
        writer.write(trace_call(ranks=(0,)))
    # flushed while recording: a reader sees the calls, and the trace says it is incomplete
    lines = rank_file(tmp_path, 0).read_text().splitlines()
    assert len(lines) == trace_writer.FLUSH_EVERY
    assert all(json.loads(line)["op"] == "all_reduce" for line in lines)
    assert json.loads((tmp_path / MANIFEST_FILE).read_text())["complete"] is False
    writer.close()
    assert read_trace(tmp_path).manifest.complete


def test_a_failed_job_leaves_an_incomplete_trace_that_still_reads(tmp_path: Path) -> None:
    manifest = Manifest(argv=("x",), world_size=1)
    with pytest.raises(RuntimeError), TraceWriter(tmp_path, 0, manifest=manifest) as writer:
        writer.write(trace_call(ranks=(0,)))
        raise RuntimeError("the job died")
    trace = read_trace(tmp_path)
    assert not trace.manifest.complete
    assert len(trace.calls[0]) == 1
    assert "incomplete" in trace.notes()[0]


def test_the_torn_last_line_of_an_incomplete_trace_is_skipped_and_counted(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))] * 3}, complete=False)
    with rank_file(tmp_path, 0).open("a") as fh:
        fh.write('{"rank": 0, "seq": 3, "op": "all_re')  # killed mid-line
    trace = read_trace(tmp_path)
    assert len(trace.calls[0]) == 3
    assert trace.torn == {0: 1}
    assert any("torn" in n for n in trace.notes())


# -- what the reader refuses, each in one line ---------------------------------------------------


def test_a_torn_line_in_a_complete_trace_is_refused(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))] * 2})
    path = rank_file(tmp_path, 0)
    path.write_bytes(path.read_bytes()[:-20])
    refused(tmp_path, "rank-0.jsonl: line 2", "not valid JSON")


def test_a_malformed_line_is_refused_even_in_an_incomplete_trace(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))] * 3}, complete=False)
    path = rank_file(tmp_path, 0)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{oops\n" + lines[2])
    refused(tmp_path, "line 2", "not valid JSON")


def test_a_line_of_the_wrong_shape_names_its_field(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))]})
    doc = json.loads(rank_file(tmp_path, 0).read_text())
    doc["in_bytes"] = -1
    rank_file(tmp_path, 0).write_text(json.dumps(doc) + "\n")
    refused(tmp_path, "line 1", "in_bytes")


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))]})
    edit_manifest(tmp_path, schema_version=SCHEMA_VERSION + 1)
    refused(tmp_path, "newer commbench", "upgrade")


def test_a_schema_below_the_first_is_refused(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))]})
    edit_manifest(tmp_path, schema_version=0)
    refused(tmp_path, "schema_version 0 is not a trace's")


def test_another_tools_manifest_is_refused(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))]})
    edit_manifest(tmp_path, tool="othertool")
    refused(tmp_path, "'othertool'", "not a commbench trace")


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_pickle_is_refused_never_loaded(tmp_path: Path, protocol: int) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))]})
    # a pickle that would run code if loaded: refused from its first two bytes
    rank_file(tmp_path, 0).write_bytes(bytes([0x80, protocol]) + b"cos\nsystem\n(S'false'\ntR.")
    refused(tmp_path, "pickle", "never loads")
    (tmp_path / MANIFEST_FILE).write_bytes(bytes([0x80, protocol]) + b"}q\x00.")
    refused(tmp_path, "manifest.json", "pickle")


def test_a_missing_rank_is_refused(tmp_path: Path) -> None:
    ddp_trace(tmp_path, world=4, steps=1)
    rank_file(tmp_path, 2).unlink()
    refused(tmp_path, "rank 2's calls are missing", "rank-2.jsonl", "world size 4")


def test_groups_whose_ranks_disagree_are_refused(tmp_path: Path) -> None:
    write_trace(
        tmp_path,
        {0: [trace_call(ranks=(0, 1), group="tp")], 1: [trace_call(ranks=(1, 0), group="tp")]},
    )
    refused(tmp_path, "group 'tp'", "[0,1]", "[1,0]")


def test_groups_whose_call_sequences_disagree_are_refused(tmp_path: Path) -> None:
    same = trace_call("all_reduce", MiB)
    write_trace(
        tmp_path,
        {
            0: [same, trace_call("all_gather", MiB)],
            1: [same, trace_call("all_gather", 2 * MiB)],
        },
    )
    refused(tmp_path, "collective 1", "all_gather of 1048576 B float32 on rank 0", "2097152 B")
    write_trace(tmp_path, {0: [same], 1: [trace_call("broadcast", MiB)]})
    refused(tmp_path, "all_reduce", "broadcast")
    write_trace(tmp_path, {0: [same], 1: [trace_call("all_reduce", MiB, dtype="bfloat16")]})
    refused(tmp_path, "float32", "bfloat16")


def test_a_member_that_makes_fewer_of_a_groups_calls_is_refused(tmp_path: Path) -> None:
    """Issue 43, item 2: a complete trace whose rank-0.jsonl is empty, while rank 1 holds 10
    collectives, was accepted: a replay would have nothing to pair them with. Every member of
    a group makes its calls, so the one that makes fewer is named with the first it lacks."""
    calls = [trace_call("all_reduce", MiB, step=s) for s in range(10)]
    write_trace(tmp_path, {0: calls, 1: calls})
    rank_file(tmp_path, 0).write_text("")
    message = refused(tmp_path, "group '0'", "rank 0 makes 0", "rank 1 makes 10")
    assert "rank 1's call 0 (all_reduce of 1048576 B float32)" in message
    three = [trace_call("all_reduce", MiB, ranks=(0, 1, 2), step=s) for s in range(10)]
    write_trace(tmp_path, {0: three[:4], 1: three, 2: three[:7]})
    refused(tmp_path, "rank 0 makes 4", "rank 1 makes 10", "rank 1's call 4 (all_reduce")
    write_trace(tmp_path, {0: [trace_call(ranks=(0, 2), group="pp")], 1: [], 2: []})
    refused(tmp_path, "group 'pp'", "rank 2 makes 0", "rank 0 makes 1", "rank 0's call 0")


def test_an_incomplete_trace_may_end_a_members_calls_early(tmp_path: Path) -> None:
    """A job killed in a step leaves its ranks' last calls uneven: that trace still reads
    (the replay keeps the steps every rank finished)."""
    calls = [trace_call("all_reduce", MiB, step=s) for s in range(3)]
    write_trace(tmp_path, {0: calls[:2], 1: calls}, complete=False)
    assert [len(c) for c in read_trace(tmp_path).calls.values()] == [2, 3]


def test_replay_refuses_the_issues_trace_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from commbench.cli import app

    calls = [trace_call("all_reduce", MiB, step=s) for s in range(10)]
    write_trace(tmp_path / "t", {0: calls, 1: calls})
    rank_file(tmp_path / "t", 0).write_text("")
    result = CliRunner().invoke(app, ["replay", str(tmp_path / "t"), "--dry-run"])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert "rank 0 makes 0" in line, line


def test_ranks_the_trace_has_not_are_refused(tmp_path: Path) -> None:
    """A group member or a peer past the world size, a rank listed twice in a group, a send
    to itself: a replay of them would fail in new_group or hang on a send nobody receives."""
    write_trace(tmp_path, {0: [trace_call(ranks=(0, 1, 5))], 1: [trace_call(ranks=(0, 1, 5))]})
    refused(tmp_path, "group '0' names rank 5", "2 rank(s)")
    write_trace(tmp_path, {0: [trace_call(ranks=(0, 0))], 1: [trace_call(ranks=(0, 1), group="x")]})
    refused(tmp_path, "lists a rank twice")
    send = trace_call("send", MiB, peer=7)
    write_trace(tmp_path, {0: [send], 1: [trace_call("recv", MiB, peer=0)]})
    refused(tmp_path, "names rank 7")
    write_trace(
        tmp_path, {0: [trace_call("send", MiB, peer=0)], 1: [trace_call("recv", MiB, peer=1)]}
    )
    refused(tmp_path, "send to itself")


def test_a_long_line_is_refused_without_reading_the_file(tmp_path: Path) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))]})
    # a sparse 4 GiB file with no newline: only the line bound is ever read
    with rank_file(tmp_path, 0).open("wb") as fh:
        fh.write(b'{"rank": 0')
        fh.truncate(4 << 30)
    tracemalloc.start()
    try:
        refused(tmp_path, "line 1 is longer than")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB


def test_the_line_and_call_bounds_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_trace(tmp_path, {0: [trace_call(ranks=(0,))] * 5})
    monkeypatch.setattr(trace_reader, "MAX_LINE_BYTES", 64)
    refused(tmp_path, "longer than 64 bytes")
    monkeypatch.undo()
    monkeypatch.setattr(trace_reader, "MAX_CALLS", 3)
    refused(tmp_path, "more than 3 calls")


def test_not_a_directory(tmp_path: Path) -> None:
    refused(tmp_path / "nope", "no such trace directory")


# -- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "op"),
    [
        ("nccl:all_reduce", "all_reduce"),
        ("allgather_into_tensor_coalesced", "all_gather"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("alltoall_base", "all_to_all"),
        ("all_to_allv", "all_to_all"),
        ("nccl:send 0->1", "send"),
        ("irecv", "recv"),
        ("nccl:all_reduce_barrier", "barrier"),
        ("nccl:coalesced", "other"),
    ],
)
def test_op_names_map_to_commbenchs(name: str, op: str) -> None:
    assert canonical_op(name) == op


def test_dtype_spellings() -> None:
    assert [canonical_dtype(s) for s in ("Float", "half", "c10::BFloat16", "long int")] == [
        "float32",
        "float16",
        "bfloat16",
        "int64",
    ]
    assert canonical_dtype("Quaternion") == "unknown"


# -- the replay plan -----------------------------------------------------------------------------


def test_the_plan_of_a_ddp_job(tmp_path: Path) -> None:
    plan = build_plan(read_trace(ddp_trace(tmp_path, world=4, steps=3)))
    assert plan.world_size == plan.traced_world == 4
    assert plan.total_steps == 3
    startup, *steps = plan.sections
    assert startup.step is None
    assert [(r.op, r.size_bytes, r.calls) for r in startup.rows] == [("broadcast", 4 * MiB, 1)]
    assert [s.step for s in steps] == [0, 1, 2]
    for step in steps:
        (row,) = step.rows
        assert (row.op, row.size_bytes, row.dtype, row.calls) == ("all_reduce", MiB, "float32", 4)
        assert row.spans_world and row.group_size == 4 and row.groups == 1
        assert step.traffic_bytes == 4 * MiB  # the parameters' bytes, once per step
    text = render_plan(plan)
    assert "step 2: 4 calls, 4M per rank" in text
    assert "outside the steps (start-up): 1 calls, 4M per rank" in text


def test_per_rank_counts_what_one_rank_moves(tmp_path: Path) -> None:
    """Four ranks in two tensor-parallel pairs, each pair making the same all_reduce of
    16 KiB: a rank moves 16K, once, though the row's traffic counts both pairs (32K)."""
    per_rank = {
        r: [trace_call("all_reduce", 16 * 1024, ranks=pair, group=name)]
        for name, pair in (("tp0", (0, 1)), ("tp1", (2, 3)))
        for r in pair
    }
    plan = build_plan(read_trace(write_trace(tmp_path, per_rank)))
    (whole,) = plan.sections
    (row,) = whole.rows
    assert (row.groups, row.calls, row.traffic_bytes) == (2, 2, 32 * 1024)
    assert whole.rank_bytes == 16 * 1024
    assert "the whole trace: 2 calls, 16K per rank" in render_plan(plan)


def test_steps_keeps_the_first_k(tmp_path: Path) -> None:
    trace = read_trace(ddp_trace(tmp_path, world=2, steps=5))
    plan = build_plan(trace, steps=2)
    assert [s.step for s in plan.steps] == [0, 1]
    assert plan.sections[0].step is None
    assert "2 of 5 steps" in render_plan(plan)
    assert build_plan(trace, steps=9).notes


def test_steps_needs_step_markers(tmp_path: Path) -> None:
    trace = read_trace(write_trace(tmp_path, {0: [trace_call()], 1: [trace_call()]}))
    (whole,) = build_plan(trace).sections
    assert whole.step is None and whole.calls == 1
    with pytest.raises(UserError, match="no step markers"):
        build_plan(trace, steps=1)


def _world_trace(tmp_path: Path) -> Path:
    """4 ranks, every op family over the whole world, and two tensor-parallel pairs."""
    world = (0, 1, 2, 3)
    shared = [
        trace_call("all_reduce", MiB, ranks=world),
        trace_call("all_gather", MiB, ranks=world, out_bytes=4 * MiB),  # 1 MiB shard
        trace_call("reduce_scatter", 4 * MiB, ranks=world, out_bytes=MiB),
        trace_call("all_to_all", 4 * MiB, ranks=world),  # 1 MiB per peer
        trace_call("broadcast", 2 * MiB, ranks=world, peer=0),
        trace_call("barrier", 0, ranks=world),
    ]
    per_rank = {}
    for rank in world:
        pair = (0, 1) if rank < 2 else (2, 3)
        tp = [trace_call("all_reduce", 256 << 10, ranks=pair, group=f"tp{pair[0]}")] * 3
        per_rank[rank] = shared + tp
    return write_trace(tmp_path, per_rank)


def _sizes(plan_rows: tuple) -> dict[str, tuple[int, int, int, int]]:
    return {
        f"{r.op}/{r.group_size if not r.spans_world else 'all'}": (
            r.size_bytes,
            r.group_size,
            r.groups,
            r.calls,
        )
        for r in plan_rows
    }


def test_world_rescaling_per_op_family(tmp_path: Path) -> None:
    trace = read_trace(_world_trace(tmp_path))
    (same,) = build_plan(trace).sections
    assert _sizes(same.rows) == {
        "all_reduce/all": (MiB, 4, 1, 1),
        "all_gather/all": (4 * MiB, 4, 1, 1),
        "reduce_scatter/all": (4 * MiB, 4, 1, 1),
        "all_to_all/all": (4 * MiB, 4, 1, 1),
        "broadcast/all": (2 * MiB, 4, 1, 1),
        "barrier/all": (0, 4, 1, 1),
        "all_reduce/2": (256 << 10, 2, 2, 6),
    }
    (big,) = build_plan(trace, world=8).sections
    assert _sizes(big.rows) == {
        "all_reduce/all": (MiB, 8, 1, 1),  # keeps its per-rank size
        "all_gather/all": (8 * MiB, 8, 1, 1),  # keeps the shard, the buffer grows
        "reduce_scatter/all": (8 * MiB, 8, 1, 1),
        "all_to_all/all": (8 * MiB, 8, 1, 1),  # keeps the per-peer chunk
        "broadcast/all": (2 * MiB, 8, 1, 1),  # keeps the buffer
        "barrier/all": (0, 8, 1, 1),
        "all_reduce/2": (256 << 10, 2, 4, 12),  # the pairs keep their size, replicated
    }
    (small,) = build_plan(trace, world=2).sections
    assert _sizes(small.rows)["all_gather/all"] == (2 * MiB, 2, 1, 1)
    assert _sizes(small.rows)["all_reduce/2"] == (256 << 10, 2, 1, 3)
    assert "(traced on 4)" in render_plan(build_plan(trace, world=8))


def test_a_world_too_small_for_the_groups_is_refused(tmp_path: Path) -> None:
    trace = read_trace(_world_trace(tmp_path))
    with pytest.raises(UserError, match=r"--world 1 is too small: the trace's group 'tp\d' has 2"):
        build_plan(trace, world=1)
    with pytest.raises(UserError, match="do not tile it: give a multiple of 2"):
        build_plan(trace, world=5)
    with pytest.raises(UserError, match="expected 1"):
        build_plan(trace, world=0)


@pytest.mark.parametrize(
    ("issued", "completed", "words"),
    [
        (2_000_000, 1_000_000, "before the call was issued"),
        (1_000_000_000, (1 << 63) - 1, "longer than any call takes"),
    ],
)
def test_an_impossible_completion_time_is_refused(
    tmp_path: Path, issued: int, completed: int, words: str
) -> None:
    """A call completed before it was issued (clamped to zero length, silently), or 292
    years after (every replayed figure nonsense): refused in one line naming the field."""
    call = trace_call(issued_ns=issued, completed_ns=completed, step=0)
    trace = write_trace(tmp_path, {0: [call], 1: [call]})
    with pytest.raises(UserError, match=rf"completed_ns: .*{words}"):
        read_trace(trace)


def test_a_week_long_call_is_still_a_time(tmp_path: Path) -> None:
    day = 24 * 3600 * 10**9
    call = trace_call(issued_ns=day, completed_ns=day + 6 * day, step=0)
    trace = read_trace(write_trace(tmp_path, {0: [call], 1: [call]}))
    assert trace.calls[0][0].completed_ns == 7 * day


@pytest.mark.parametrize(
    "changes",
    [{}, {"completed_ns": 12_345}, {"completed_ns": None, "async_op": True}, {"async_op": False}],
)
def test_the_writers_line_is_the_payloads_json_character_for_character(
    tmp_path: Path, changes: dict[str, object]
) -> None:
    """The capture's fast line (`TraceWriter._line`) against the payload as `dump_json` writes
    it, on calls with every optional field, escapes, non-ASCII names and a group renamed."""
    odd = 'pg "0"\u2028\u00e9'
    calls = [
        trace_call("all_reduce", 4096),
        trace_call(
            "all_to_all",
            96,
            ranks=(0, 1, 3),
            group=odd,
            in_splits=(8, 8, 8),
            out_splits=(4, 16, 4),
            cpu_ns=7,
            graph=True,
            host="n\u00f6de-1",
            device="cuda:0",
            step=3,
        ),
        trace_call("send", 64, peer=1, batch=2, completed_ns=99, async_op=True),
        trace_call("barrier", 0, ranks=(0,), group=odd, name="barrier\\n"),
    ]
    writer = TraceWriter(tmp_path, 5)
    for call in calls:
        writer.write(call, **changes)
    writer.close()
    lines = (tmp_path / "rank-5.jsonl").read_text().splitlines(keepends=True)
    group_seqs: dict[str, int] = {}
    for seq, (call, line) in enumerate(zip(calls, lines, strict=True)):
        payload = call.payload()
        group_seq = None
        if call.op not in ("send", "recv"):
            group_seq = group_seqs.get(call.group.name, 0)
            group_seqs[call.group.name] = group_seq + 1
        payload.update(rank=5, seq=seq, group_seq=group_seq)
        for name, value in changes.items():
            payload["async" if name == "async_op" else name] = value
        assert line == dump_json(payload, indent=None)
