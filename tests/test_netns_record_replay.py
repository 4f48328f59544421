"""`record` and `replay` across two machines of their own (`tests/netns_cluster.py`): a DDP job
whose two ranks run in two network namespaces, recorded by one `commbench record` around
both nodes' torchruns, then replayed by a `commbench replay` on each node meeting at node
0's rendezvous. Timings are never asserted (the fidelity figure is benchmarks/
replay_fidelity.py's); what is asserted is that every call of both hosts is in the trace,
and that the replay ran across the nodes and compared its steps with the recording's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from netns_cluster import Cluster

from commbench.traces.reader import read_trace

pytestmark = [
    pytest.mark.integration,
    pytest.mark.netns,
]

JOB = Path(__file__).parent / "jobs" / "ddp_mlp.py"
PARAM_BYTES = 4 * (512 * 512 + 512) * 4


def test_a_two_node_job_recorded_and_replayed_across_the_nodes(
    tmp_path: Path, free_port: int
) -> None:
    with Cluster(2) as cluster:
        cluster.shape(1, rate_mbit=200)
        endpoint = f"{cluster.addresses[0]}:{free_port}"
        lines = [
            cluster.shell_line(
                n,
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
                 str(n), "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                 endpoint, "--rdzv-id", f"rec-{os.getpid()}-{cluster.tag}", str(JOB),
                 "--steps", "3"],
            )
            for n in (0, 1)
        ]  # fmt: skip
        script = f"{lines[0]} & a=$!; {lines[1]} & b=$!; wait $a && wait $b"
        trace_dir = tmp_path / "trace"
        recorded = subprocess.run(
            [sys.executable, "-m", "commbench", "record", "-o", str(trace_dir), "--",
             "sh", "-c", script],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr[-3000:]
        trace = read_trace(trace_dir)
        assert trace.manifest.complete and trace.world_size == 2
        assert trace.manifest.hosts == tuple(sorted(cluster.hosts))
        assert {c.host for c in trace.calls[1]} == {cluster.hosts[1]}
        for rank in (0, 1):
            per_step: dict[int, int] = {}
            for c in trace.calls[rank]:
                if c.op == "all_reduce" and c.step is not None:
                    per_step[c.step] = per_step.get(c.step, 0) + c.in_bytes
            assert per_step == {1: PARAM_BYTES, 2: PARAM_BYTES, 3: PARAM_BYTES}
        replay_port = free_port + 1 if free_port < 65535 else free_port - 1
        nodes = [
            cluster.popen(
                n,
                [sys.executable, "-m", "commbench", "replay", str(trace_dir), "--device", "cpu",
                 "--nproc", "1", "--nnodes", "2", "--node-rank", str(n), "--rdzv-endpoint",
                 f"{cluster.addresses[0]}:{replay_port}", "--iters", "2", "--warmup", "1",
                 "--pace", "--out", str(tmp_path / f"node{n}")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for n in (0, 1)
        ]  # fmt: skip
        outputs = [p.communicate(timeout=300) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    run_dir = next((tmp_path / "node0").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["kind"] == "replay" and record["status"] == "complete"
    assert sorted(record["context"]["hosts"]) == sorted(cluster.hosts)
    replay = record["replay"]
    assert replay["step_numbers"] == [1, 2, 3]
    assert all(s > 0 for s in replay["recorded_comm_s_per_step"])
    assert all(s > 0 for s in replay["replayed_comm_s_per_step"])
    assert len(replay["recorded_wait_s_per_step"]) == 3
