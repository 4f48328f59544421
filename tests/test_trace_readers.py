"""Other tools' traces read into commbench's `Call` records (issue 26), each format told from
its content. Where each fixture comes from:

- flight_recorder/rank_<N>.json and flight_recorder_rank_0.pickle: torch 2.13.0's own Flight
  Recorder (`_dump_fr_trace_json()`, `_dump_fr_trace()`) in a 2-rank gloo job,
  tests/fixtures/traces/make_flight_recorder.py; its keys are those of pytorch/pytorch
  torch/csrc/distributed/c10d/FlightRecorderDetail.hpp (`dump_json`, commit
  cb41e3a4d13921611dde43bb6aa6cf38d22f7f73) and FlightRecorder.hpp (version "2.10").
- param/<rank>.json: PARAM's own writer, `commsArgs.toDict` of facebookresearch/param
  train/comms/pt/comms_utils.py at commit 1e115ffc62c6d048405d9b963191736c13811b1d,
  tests/fixtures/traces/make_param.py; read as that commit's `_parseBasicTraceComms` reads it.
- chakra/chakra.<N>.json: written by hand (protobuf is not installed here) as
  `chakra_jsonizer` (mlcommons/chakra src/jsonizer/jsonizer.py, commit
  21585d8f2d65603d791d2121e3d4632351120262) writes: the GlobalMetadata then each Node,
  `MessageToJson` back to back, per schema/protobuf/et_def.proto of that commit, with the
  comm attributes src/converter/pytorch_converter.py adds (comm_type, comm_size, pg_name).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.traces import formats
from commbench.traces.formats import load_any, load_files
from commbench.traces.plan import build_plan
from tests.factories import ddp_trace

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def refused(path: Path | list[Path], *words: str) -> str:
    with pytest.raises(UserError) as info:
        load_files(path) if isinstance(path, list) else load_any(path)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


def copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


# -- the Flight Recorder -------------------------------------------------------------------------


def test_flight_recorder_json_dump(tmp_path: Path) -> None:
    trace = load_any(FIXTURES / "flight_recorder")
    assert trace.manifest.tool == "flight-recorder" and trace.world_size == 2
    calls = trace.calls[0]
    assert [c.op for c in calls] == [
        "broadcast",
        "all_reduce",
        "all_reduce",
        "all_gather",
        "all_reduce",  # gloo records reduce_scatter_tensor as the all_reduce it runs
        "all_reduce",
        "barrier",
    ]
    broadcast, _, _, gather, _, sub, barrier = calls
    assert (broadcast.name, broadcast.in_bytes, broadcast.dtype) == (
        "gloo:broadcast",
        4096,
        "float32",
    )
    assert (gather.in_bytes, gather.out_bytes, gather.count) == (4096, 8192, 1024)
    assert (sub.group.name, sub.dtype, sub.in_bytes) == ("1", "bfloat16", 512)
    assert broadcast.group.name == "0" and broadcast.group_seq == 1
    assert barrier.in_bytes == 0 and barrier.dtype == ""
    assert broadcast.issued_ns > 0 and broadcast.completed_ns is None  # 0 in the dump: not seen
    plan = build_plan(trace)
    (whole,) = plan.sections
    assert {(r.op, r.size_bytes): r.calls for r in whole.rows}[("all_reduce", 4096)] == 3


def test_flight_recorder_groups_and_versions(tmp_path: Path) -> None:
    folder = copy("flight_recorder", tmp_path)
    for rank in (0, 1):
        path = folder / f"rank_{rank}.json"
        doc = json.loads(path.read_text())
        # as ProcessGroupNCCL records them: `ranks_str`, "[0,1]"
        doc["pg_config"] = {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0,1]"},
            "1": {"name": "1", "desc": "undefined", "ranks": "[0, 1]"},
        }
        path.write_text(json.dumps(doc))
    trace = load_any(folder)
    assert {c.group.ranks for c in trace.calls[1]} == {(0, 1)}
    doc["version"] = "3.0"
    (folder / "rank_1.json").write_text(json.dumps(doc))
    refused(folder, "rank_1.json", "version '3.0' is newer than the 2.x")


def test_flight_recorder_ranks_that_disagree_are_refused(tmp_path: Path) -> None:
    folder = copy("flight_recorder", tmp_path)
    path = folder / "rank_1.json"
    doc = json.loads(path.read_text())
    doc["entries"][1]["input_sizes"] = [[2048]]
    doc["entries"][1]["output_sizes"] = [[2048]]
    path.write_text(json.dumps(doc))
    refused(folder, "group '0'", "collective 2", "4096 B float32 on rank 0", "8192 B")


def _fr_p2p(folder: Path, world: int, entries: dict[int, list[tuple[str, str]]]) -> Path:
    """A Flight Recorder dump per rank of `world`, each entry (profiling name, group) as
    ProcessGroupNCCL records a send or recv, with groups "0" (every rank) and "1" ([2, 3])."""
    folder.mkdir()
    for rank in range(world):
        doc = {
            "version": "2.10",
            "pg_config": {
                "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))},
                "1": {"name": "1", "desc": "pp", "ranks": "[2, 3]"},
            },
            "entries": [
                {
                    "profiling_name": name,
                    "process_group": [group, "pg"],
                    "collective_seq_id": 0,
                    "p2p_seq_id": i + 1,
                    "is_p2p": True,
                    "input_sizes": [[16]],
                    "input_dtypes": ["Float"],
                    "output_sizes": [[16]],
                    "output_dtypes": ["Float"],
                    "time_created_ns": 1000 + i,
                }
                for i, (name, group) in enumerate(entries.get(rank, []))
            ],
        }
        (folder / f"rank_{rank}.json").write_text(json.dumps(doc))
    return folder


def test_flight_recorder_p2p_peers_come_from_the_profiling_name(tmp_path: Path) -> None:
    # group ranks in the names: rank 2 is group 1's rank 0, rank 3 its rank 1
    entries = {
        0: [("nccl:send 0->3", "0")],
        3: [("nccl:recv 3<-0", "0"), ("nccl:send 1->0", "1")],
        2: [("nccl:recv 0<-1", "1")],
    }
    trace = load_any(_fr_p2p(tmp_path / "fr", 4, entries))
    peers = {r: [(c.op, c.peer) for c in trace.calls[r]] for r in range(4)}
    assert peers == {
        0: [("send", 3)],
        1: [],
        2: [("recv", 3)],
        3: [("recv", 0), ("send", 2)],
    }
    wrong = _fr_p2p(tmp_path / "wrong", 4, {1: [("nccl:send 0->3", "0")]})
    refused(wrong, "rank_1.json", "'nccl:send 0->3' is not a send of rank 1")
    past = _fr_p2p(tmp_path / "past", 4, {2: [("nccl:send 0->2", "1")]})
    refused(past, "'nccl:send 0->2' names a rank its group has not")
    unnamed = _fr_p2p(tmp_path / "unnamed", 4, {0: [("nccl:send", "0")]})
    refused(unnamed, "rank_0.json", "does not name the send's peer")


def test_flight_recorder_pickle_is_refused_with_the_way_to_json(tmp_path: Path) -> None:
    message = refused(FIXTURES / "flight_recorder_rank_0.pickle", "pickle", "never loads")
    assert "_dump_nccl_trace_json()" in message and "_dump_fr_trace_json()" in message


# -- PARAM -----------------------------------------------------------------------------------


def test_param_basic_trace() -> None:
    trace = load_any(FIXTURES / "param")
    assert trace.manifest.tool == "param" and trace.world_size == 2
    zero, one = trace.calls[0], trace.calls[1]
    # wait and the gemm are not calls
    assert [c.op for c in zero] == [
        "broadcast",
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "send",
        "all_reduce",
        "barrier",
    ]
    assert [c.op for c in one][5] == "recv"
    bcast, reduce, gather, scatter, alltoall, send, sub, barrier = zero
    assert (bcast.in_bytes, bcast.peer, bcast.issued_ns) == (4096, 0, 1_700_000_000_000_000_000)
    assert (reduce.in_bytes, reduce.dtype, reduce.count) == (1 << 20, "float32", 262144)
    assert (gather.in_bytes, gather.out_bytes, gather.dtype) == (2048, 4096, "float16")
    assert (scatter.in_bytes, scatter.out_bytes, scatter.dtype) == (4096, 2048, "bfloat16")
    assert (alltoall.name, alltoall.in_bytes, alltoall.dtype) == ("all_to_allv", 32, "int32")
    assert send.group_seq is None and send.in_bytes == 64
    assert (sub.group.name, sub.dtype, sub.group_seq) == ("1", "int64", 0)
    assert barrier.in_bytes == 0 and barrier.group_seq == 5
    rows = {(r.op, r.size_bytes) for s in build_plan(trace).sections for r in s.rows}
    assert ("all_gather", 4096) in rows and ("send", 64) in rows


def test_param_peers_are_src_rank_and_dst_rank(tmp_path: Path) -> None:
    """PARAM's parser requires src_rank and dst_rank of every send and recv (global ranks);
    its own writer leaves them out, so the fixture's peer is the other of its two ranks."""
    fixture = load_any(FIXTURES / "param")
    assert [(c.op, c.peer) for c in fixture.calls[0] if c.op in ("send", "recv")] == [("send", 1)]
    assert [(c.op, c.peer) for c in fixture.calls[1] if c.op in ("send", "recv")] == [("recv", 0)]
    folder = tmp_path / "four"
    folder.mkdir()

    def p2p(op: str, **ends: int) -> dict[str, object]:
        entry = {"comms": op, "in_msg_size": 4, "out_msg_size": 4, "dtype": "float", **ends}
        return {**entry, "pg_id": 0, "world_size": 4}

    ranks = {
        0: [p2p("send", src_rank=0, dst_rank=3)],
        1: [p2p("send", dst_rank=2)],
        2: [p2p("recv", src_rank=1, dst_rank=2)],
        3: [p2p("recv", src_rank=0)],
    }
    for rank, entries in ranks.items():
        (folder / f"{rank}.json").write_text(json.dumps(entries))
    trace = load_any(folder)
    assert [trace.calls[r][0].peer for r in range(4)] == [3, 2, 1, 0]
    doc = [p2p("send", src_rank=2, dst_rank=3)]
    (folder / "0.json").write_text(json.dumps(doc))
    refused(folder, "0.json", "src_rank", "a send from rank 2 in rank 0's trace")
    (folder / "0.json").write_text(json.dumps([p2p("send")]))
    refused(folder, "0.json", "[0].dst_rank: missing", "a trace of 4 ranks")
    # in a group of two (global_ranks), the other member
    pair = {"pg_id": 7, "global_ranks": [0, 3], "world_size": 2}
    (folder / "0.json").write_text(json.dumps([{**p2p("send"), **pair}]))
    (folder / "3.json").write_text(json.dumps([{**p2p("recv"), **pair}]))
    assert [load_any(folder).calls[r][0].peer for r in (0, 3)] == [3, 0]


def test_param_sequences_that_disagree_are_refused(tmp_path: Path) -> None:
    folder = copy("param", tmp_path)
    doc = json.loads((folder / "1.json").read_text())
    doc[1]["dtype"] = "half"
    (folder / "1.json").write_text(json.dumps(doc))
    refused(folder, "collective 1", "all_reduce of 1048576 B float32 on rank 0", "float16")


def test_a_missing_rank_file_is_refused(tmp_path: Path) -> None:
    folder = copy("param", tmp_path)
    (folder / "1.json").rename(folder / "2.json")
    refused(folder, "rank 1's file is missing")


# -- Chakra ----------------------------------------------------------------------------------


def test_chakra_json() -> None:
    trace = load_any(FIXTURES / "chakra")
    assert trace.manifest.tool == "chakra" and trace.world_size == 2
    reduce, gather, send = trace.calls[0]
    assert (reduce.op, reduce.in_bytes, reduce.dtype, reduce.count) == (
        "all_reduce",
        1 << 20,
        "float32",
        262144,
    )
    assert (gather.op, gather.in_bytes, gather.out_bytes, gather.dtype) == (
        "all_gather",
        8192,
        16384,
        "bfloat16",
    )
    assert reduce.group.name == "0" and reduce.group.ranks == ()
    assert send.op == "send" and trace.calls[1][2].op == "recv"
    assert reduce.name == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _chakra(folder: Path, nodes: dict[int, list[tuple[str, dict[str, object]]]]) -> Path:
    """A Chakra JSON trace per rank: the GlobalMetadata, then each (node type, attributes)
    as protobuf's JSON (`{"name": ..., "int32Val": 3}`)."""
    folder.mkdir()
    for rank, made in nodes.items():
        docs = [{"attr": [{"name": "schema", "stringVal": "1.1.0-chakra.0.0.4"}]}]
        for i, (kind, attrs) in enumerate(made):
            attr = [{"name": "comm_size", "int64Val": "64"}]
            attr += [
                {"name": k, **v} if isinstance(v, dict) else {"name": k} for k, v in attrs.items()
            ]
            docs.append(
                {"id": str(i + 1), "name": "ncclDevKernel_SendRecv", "type": kind, "attr": attr}
            )
        (folder / f"chakra.{rank}.json").write_text("".join(json.dumps(d) for d in docs))
    return folder


def test_chakra_peers_are_comm_dst_and_comm_src(tmp_path: Path) -> None:
    """The feeder's attributes (int32 in the proto; any integer member is read); the
    converter writes none, so the fixture's peer is the other of its two ranks."""
    fixture = load_any(FIXTURES / "chakra")
    assert (fixture.calls[0][2].op, fixture.calls[0][2].peer) == ("send", 1)
    assert (fixture.calls[1][2].op, fixture.calls[1][2].peer) == ("recv", 0)
    send, recv = "COMM_SEND_NODE", "COMM_RECV_NODE"
    nodes = {
        0: [(send, {"comm_src": {"int32Val": 0}, "comm_dst": {"int32Val": 3}})],
        1: [(send, {"comm_dst": {"int64Val": "2"}})],
        2: [(recv, {"comm_src": {"uint32Val": 1}, "comm_dst": {"int32Val": 2}})],
        3: [(recv, {"comm_src": {}})],  # 0, protobuf's default, left out of the JSON
    }
    trace = load_any(_chakra(tmp_path / "four", nodes))
    assert [trace.calls[r][0].peer for r in range(4)] == [3, 2, 1, 0]
    wrong = _chakra(tmp_path / "wrong", {**nodes, 0: [(send, {"comm_src": {"int32Val": 1}})]})
    refused(wrong, "chakra.0.json", "a send whose comm_src is rank 1, in rank 0's file")
    unnamed = _chakra(tmp_path / "unnamed", {**nodes, 1: [(send, {})]})
    refused(unnamed, "chakra.1.json", "a send node without comm_dst, in a trace of 4 ranks")
    for i, bad in enumerate(({"int32Val": -1}, {"int32Val": 1 << 30}, {"int64Val": "\u00b2"})):
        damaged = _chakra(tmp_path / f"bad{i}", {**nodes, 0: [(send, {"comm_dst": bad})]})
        refused(damaged, "chakra.0.json", "attr[comm_dst]")


# -- every fixture replays ---------------------------------------------------------------------

REFUSED_FIXTURES = {"flight_recorder_rank_0.pickle": "pickle"}
"""Fixtures that exist to be refused, and a word of the refusal."""


@pytest.mark.parametrize(
    "fixture",
    sorted(p.name for p in FIXTURES.iterdir() if p.suffix != ".py" and p.name != "__pycache__"),
)
def test_every_fixture_replays_in_a_dry_run(fixture: str) -> None:
    from typer.testing import CliRunner

    from commbench.cli import app

    result = CliRunner().invoke(app, ["replay", str(FIXTURES / fixture), "--dry-run"])
    if fixture in REFUSED_FIXTURES:
        assert result.exit_code == 2 and REFUSED_FIXTURES[fixture] in result.stderr
        return
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("replay plan: 2 ranks")


# -- detection -------------------------------------------------------------------------------


def test_formats_are_told_from_content_not_names(tmp_path: Path) -> None:
    # each fixture under a misleading name still reads as what it holds
    for rank in (0, 1):
        named = tmp_path / "misnamed" / f"chakra_{rank}.json"
        named.parent.mkdir(exist_ok=True)
        named.write_bytes((FIXTURES / "param" / f"{rank}.json").read_bytes())
    assert load_any(tmp_path / "misnamed").manifest.tool == "param"
    fr = tmp_path / "param_trace.0"
    fr.write_bytes((FIXTURES / "flight_recorder" / "rank_0.json").read_bytes())
    assert load_any(fr).manifest.tool == "flight-recorder"


def test_commbench_directories_read_as_commbench(tmp_path: Path) -> None:
    trace = load_any(ddp_trace(tmp_path / "t", world=2, steps=1))
    assert trace.manifest.tool == "commbench"


@pytest.mark.parametrize(
    "content",
    [b'{"traceEvents": []}', b"[1, 2, 3]", b"name,size\nx,1\n", b"\x00\x01binary"],
)
def test_an_unknown_file_names_the_formats_known(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    message = refused(path, "trace.json")
    for title in formats.FORMATS.values():
        assert title in message


def test_bounds_on_foreign_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "MAX_TRACE_FILE_BYTES", 1024)
    refused(FIXTURES / "param" / "0.json", "larger than")
    path = tmp_path / "0.json"
    path.write_text('[{"comms": "all_reduce", "in_msg_size": 1' + "0" * 200 + "}]")
    monkeypatch.undo()
    refused(path, "digits")
    path.write_text("[" * 100 + "]" * 100)
    refused(path, "nested deeper")


def test_the_rank_comes_from_the_end_of_the_name(tmp_path: Path) -> None:
    assert formats.rank_of(Path("rank_12"), 2) == 12
    assert formats.rank_of(Path("chakra.3.json"), 2) == 3
    assert formats.rank_of(Path("trace.json"), 1) == 0
    with pytest.raises(UserError, match="cannot tell which rank"):
        formats.rank_of(Path("trace.json"), 2)
    folder = copy("param", tmp_path)
    shutil.copy(folder / "1.json", folder / "rank_1.json")
    refused(folder, "same rank")
