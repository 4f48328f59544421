"""`commbench replay` on real torchrun workers (issue 26): small synthetic traces written by
`TraceWriter` (tests/factories.py), replayed on gloo CPU ranks. Each run is a few seconds:
KiB sizes, --iters 3. Timings are never asserted; what the run writes is."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.traces.records import Manifest, Parameter
from commbench.traces.writer import TraceWriter
from tests.factories import trace_call, write_trace

pytestmark = pytest.mark.integration

KiB = 1 << 10


def small_trace(directory: Path, *, world: int = 2, tp: bool = False) -> Path:
    """A start-up broadcast, then per step an async all_reduce, an all_gather and a
    reduce_scatter over every rank (and, with `tp`, an all_reduce in pairs {0,1}, {2,3}),
    with issue and completion times; the manifest lists three parameters."""
    manifest = Manifest(
        argv=("python", "train.py"),
        world_size=world,
        parameters=(
            Parameter(numel=64 * KiB, dtype="float32"),
            Parameter(numel=KiB, dtype="float32"),
            Parameter(numel=128 * KiB, dtype="float32"),
        ),
    )
    ranks = tuple(range(world))
    for rank in ranks:
        t = 1_000_000
        calls = [
            trace_call(
                "broadcast", 64 * KiB, ranks=ranks, peer=0, issued_ns=t, completed_ns=t + 9000
            )
        ]
        for step in range(2):
            t += 1_000_000
            calls += [
                trace_call(
                    "all_reduce",
                    16 * KiB,
                    ranks=ranks,
                    step=step,
                    async_op=True,
                    issued_ns=t,
                    completed_ns=t + 5000,
                ),
                trace_call(
                    "all_gather",
                    4 * KiB,
                    out_bytes=4 * KiB * world,
                    ranks=ranks,
                    step=step,
                    issued_ns=t + 6000,
                    completed_ns=t + 9000,
                ),
                trace_call(
                    "reduce_scatter",
                    4 * KiB * world,
                    out_bytes=4 * KiB,
                    ranks=ranks,
                    step=step,
                    issued_ns=t + 9000,
                    completed_ns=t + 12000,
                ),
            ]
            if tp:
                pair = (0, 1) if rank < 2 else (2, 3)
                calls.append(
                    trace_call(
                        "all_reduce",
                        8 * KiB,
                        ranks=pair,
                        group=f"tp{pair[0]}",
                        step=step,
                        issued_ns=t + 13000,
                        completed_ns=t + 14000,
                    )
                )
        writer = TraceWriter(directory, rank, manifest=manifest if rank == 0 else None)
        for call in calls:
            writer.write(call)
        writer.close()
    return directory


def replay(trace: Path, out: Path, *args: str) -> Path:
    result = CliRunner().invoke(
        app,
        [
            "replay",
            str(trace),
            "--device",
            "cpu",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--out",
            str(out),
            *args,
        ],
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    (run_dir,) = out.iterdir()
    return run_dir


def test_a_replay_writes_rows_with_calls_and_the_replay_record(tmp_path: Path) -> None:
    run_dir = replay(small_trace(tmp_path / "trace"), tmp_path / "out", "--rebucket", "256K-1M:x2")
    with open(run_dir / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert "calls" in rows[0]
    keys = [(r["op"], r["size_bytes"], r["dtype"], r["world_size"]) for r in rows]
    assert len(keys) == len(set(keys)) == 4
    calls = {r["op"]: int(r["calls"]) for r in rows}
    assert calls == {"broadcast": 1, "all_reduce": 2, "all_gather": 2, "reduce_scatter": 2}
    record = json.loads((run_dir / "run.json").read_text())
    assert record["kind"] == "replay" and record["status"] == "complete"
    rep = record["replay"]
    assert rep["traced_world"] == rep["world"] == 2 and rep["steps"] == 2
    assert len(rep["recorded_comm_s_per_step"]) == len(rep["replayed_comm_s_per_step"]) == 2
    assert rep["recorded_comm_s"] == pytest.approx(11e-6)  # [0,5] + [6,12] us
    assert rep["replayed_comm_s"] > 0
    assert [c["cap_bytes"] for c in rep["rebucket"]] == [256 * KiB, 512 * KiB, 1 << 20]
    assert all(c["measured_s_per_step"] > 0 for c in rep["rebucket"])
    assert rep["best_cap_mb"] in (0.25, 0.5, 1.0)
    # the program the workers ran, each rank its own calls, kept; nothing left beside the run
    program = run_dir / "program"
    assert sorted(f.name for f in program.iterdir()) == [
        "program.json",
        "rank-0.jsonl",
        "rank-1.jsonl",
    ]
    steps = [json.loads(line) for line in (program / "rank-1.jsonl").read_text().splitlines()]
    assert [[issue[0] for issue in step] for step in steps] == [
        ["all_reduce", "all_gather", "reduce_scatter"]
    ] * 2
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name]
    report = CliRunner().invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.stderr
    assert "## Replay" in report.stdout and "DDP bucket advisor" in report.stdout


def test_a_replay_at_world_4_of_a_2_rank_trace(tmp_path: Path) -> None:
    run_dir = replay(
        small_trace(tmp_path / "trace"), tmp_path / "out", "--world", "4", "--steps", "1"
    )
    record = json.loads((run_dir / "run.json").read_text())
    assert record["replay"]["world"] == 4 and record["replay"]["steps"] == 1
    with open(run_dir / "results.csv") as fh:
        rows = {r["op"]: r for r in csv.DictReader(fh)}
    assert rows["all_gather"]["world_size"] == "4"
    assert rows["all_gather"]["size_bytes"] == str(16 * KiB)  # the 4 KiB shard kept


def test_a_subgroup_of_2_in_a_4_rank_world(tmp_path: Path) -> None:
    run_dir = replay(small_trace(tmp_path / "trace", world=4, tp=True), tmp_path / "out")
    with open(run_dir / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    pairs = [r for r in rows if r["world_size"] == "2"]
    assert len(pairs) == 1 and pairs[0]["op"] == "all_reduce" and pairs[0]["calls"] == "4"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"


def test_a_paced_replay_waits_for_each_calls_recorded_offset(tmp_path: Path) -> None:
    """Each step's calls span 12 us in the trace; spread them 50 ms apart, and a paced
    replay's steps cannot span less than the recorded gaps."""
    trace = small_trace(tmp_path / "trace")
    for rank in (0, 1):  # stretch the second and third call of each step by 50 ms
        path = trace / f"rank-{rank}.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for call in lines:
            if call["op"] in ("all_gather", "reduce_scatter"):
                late = 50_000_000 * (1 if call["op"] == "all_gather" else 2)
                call["issued_ns"] += late
                call["completed_ns"] += late
        path.write_text("".join(json.dumps(c) + "\n" for c in lines))
    for flag, gaps_as in (("--pace", "idle"), ("--pace-compute", "compute")):
        paced = replay(trace, tmp_path / flag, flag)
        rep = json.loads((paced / "run.json").read_text())["replay"]
        settings = json.loads((paced / "settings.json").read_text())["replay"]
        assert settings["pace"] is True and settings["pace_compute"] is (gaps_as == "compute")
        assert rep["gaps_as"] == gaps_as
        # each step's last call waits 100 ms after its first: the span holds the gaps
        assert all(s >= 0.1 for s in rep["replayed_span_s_per_step"])
        assert all(s > 0 for s in rep["replayed_comm_s_per_step"])
        assert len(rep["replayed_passes_s"]) >= 1
        assert rep["step_numbers"] == [0, 1]


def test_a_paced_replay_of_calls_days_apart_caps_the_gap(tmp_path: Path) -> None:
    """Two calls 10^15 ns (11.6 days) apart ended in "no progress ... a backend or network
    hang": the gap is replayed as --max-gap, and the run says how many gaps it capped."""
    day = 10**15
    calls = [
        trace_call("all_reduce", 4 * KiB, step=0, issued_ns=1_000, completed_ns=2_000),
        trace_call("all_reduce", 4 * KiB, step=0, issued_ns=day, completed_ns=day + 1_000),
    ]
    trace = write_trace(tmp_path / "trace", {0: calls, 1: calls})
    run_dir = replay(trace, tmp_path / "out", "--pace", "--max-gap", "0.5", "--timeout", "20")
    rep = json.loads((run_dir / "run.json").read_text())["replay"]
    assert (rep["max_gap_s"], rep["gaps_capped"], rep["gaps_backwards"]) == (0.5, 1, 0)
    assert any("1 idle gap(s)" in n and "replayed as 0.5 s" in n for n in rep["notes"])
    assert all(s >= 0.5 for s in rep["replayed_span_s_per_step"])  # the capped gap, waited


@pytest.mark.parametrize("fixture", ["chakra", "param"])
def test_other_tools_traces_with_a_send_replay(fixture: str, tmp_path: Path) -> None:
    """The repository's own Chakra and PARAM fixtures, whose send had no peer, replayed on
    gloo: the send is timed as its pair's sendrecv and replayed in the sequence."""
    trace = Path(__file__).parent / "fixtures" / "traces" / fixture
    run_dir = replay(trace, tmp_path / "out")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete" and record["replay"]["traced_world"] == 2
    with open(run_dir / "results.csv") as fh:
        ops = {r["op"] for r in csv.DictReader(fh)}
    assert "sendrecv" in ops
    sequence = (run_dir / "program" / "rank-1.jsonl").read_text()
    assert '"recv"' in sequence


def test_a_world_this_machine_cannot_run_is_refused_before_the_program(tmp_path: Path) -> None:
    """At --world 1048576 the launcher compiled a file per rank before the launch refused
    more ranks than this node holds: refused first now, in one line, nothing written."""
    trace = small_trace(tmp_path / "trace")
    result = CliRunner().invoke(
        app,
        [
            "replay",
            str(trace),
            "--device",
            "cpu",
            "--world",
            str(1 << 20),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "CPU ranks per core" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_rooted_ops_replay_from_their_recorded_root(tmp_path: Path) -> None:
    """A broadcast and a gather whose root was rank 1, replayed from rank 1: the gather's
    list must then be given on rank 1 (torch refuses a gather without it at its root)."""
    manifest = Manifest(argv=("python", "train.py"), world_size=2)
    for rank in (0, 1):
        with TraceWriter(tmp_path / "trace", rank, manifest=manifest if rank == 0 else None) as w:
            t = 1_000_000
            w.write(
                trace_call("broadcast", 8 * KiB, peer=1, step=0, issued_ns=t, completed_ns=t + 9)
            )
            w.write(
                trace_call(
                    "gather", 4 * KiB, out_bytes=8 * KiB if rank == 1 else 0, peer=1, step=0,
                    issued_ns=t + 10, completed_ns=t + 20,
                )
            )  # fmt: skip
    run_dir = replay(tmp_path / "trace", tmp_path / "out")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete"
    assert len(record["replay"]["replayed_comm_s_per_step"]) == 1


def test_a_trace_with_send_and_recv_is_replayed(tmp_path: Path) -> None:
    """gloo's send and recv works never say they completed until waited: the sequence,
    which polled them, spun until the watchdog stopped the run."""
    per_rank = {
        0: [trace_call("send", 4 * KiB, peer=1, async_op=True, step=0), trace_call(step=0)],
        1: [trace_call("recv", 0, out_bytes=4 * KiB, peer=0, async_op=True, step=0)],
    }
    per_rank[1][0] = replace(per_rank[1][0], dtype="float32", count=KiB)
    per_rank[1].append(trace_call(step=0))
    run_dir = replay(write_trace(tmp_path / "trace", per_rank), tmp_path / "out")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete"
    assert len(record["replay"]["replayed_comm_s_per_step"]) == 1
    assert record["replay"]["replayed_comm_s_per_step"][0] > 0


def test_a_batch_of_sends_and_receives_replays_as_one_batch(tmp_path: Path) -> None:
    """batch_isend_irecv's exchange, each rank sending first and receiving second: were a
    send waited before the receive after it is posted, both ranks would wait in their sends.
    A run of async sends and receives goes as one batch (`dist.batch_isend_irecv`: one NCCL
    group on a GPU, the calls one by one on gloo), paced or not."""
    per_rank: dict[int, list] = {}
    for rank in (0, 1):
        peer = 1 - rank
        per_rank[rank] = [
            call
            for step in (0, 1)
            for call in (
                trace_call("send", 4 * KiB, peer=peer, async_op=True, step=step),
                replace(
                    trace_call("recv", 0, out_bytes=4 * KiB, peer=peer, async_op=True, step=step),
                    count=KiB,
                ),
                trace_call(step=step),
            )
        ]
    trace = write_trace(tmp_path / "trace", per_rank)
    for flag in ((), ("--pace",)):
        run_dir = replay(trace, tmp_path / f"out{len(flag)}", *flag)
        record = json.loads((run_dir / "run.json").read_text())
        assert record["status"] == "complete"
        assert len(record["replay"]["replayed_comm_s_per_step"]) == 2


def test_every_op_issued_async_is_waited_not_polled_for_ever(tmp_path: Path) -> None:
    """Every op the replay issues, each async and left in flight to the step's end: no Work
    is trusted to say it completed before it is waited (gloo's reduce_scatter never does,
    and the step polled it until the watchdog stopped the run)."""
    n = 4 * KiB
    per_rank: dict[int, list] = {}
    for rank in (0, 1):
        root = rank == 0
        per_rank[rank] = [
            trace_call(op, i, out_bytes=o, peer=p, async_op=True, step=0)
            for op, i, o, p in (
                ("all_reduce", n, n, None),
                ("all_gather", n, 2 * n, None),
                ("reduce_scatter", 2 * n, n, None),
                ("all_to_all", n, n, None),
                ("broadcast", n, n, 0),
                ("reduce", n, n, 0),
                ("gather", n, 2 * n if root else 0, 0),
                ("scatter", 2 * n, n, 0),
                ("barrier", 0, 0, None),
            )
        ]
    run_dir = replay(write_trace(tmp_path / "trace", per_rank), tmp_path / "out")
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete", record.get("failure")
    assert len(record["replay"]["replayed_comm_s_per_step"]) == 1
    assert record["replay"]["replayed_comm_s_per_step"][0] > 0
