"""Two nodes that are machines of their own (`tests/netns_cluster.py`): each commbench in its
own network namespace, with its own address, host name and /etc/hosts, meeting at a c10d
rendezvous on node 0's address, and gloo between the namespaces' interfaces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from netns_cluster import Cluster

from commbench.results.runs import load_run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.netns,
]


def test_rendezvous_on_an_address_the_host_name_does_not_resolve_to(
    tmp_path: Path, free_port: int
) -> None:
    """Node 0's own name resolves to 127.0.1.1 (Debian's /etc/hosts), its rendezvous address
    is its interface's: torchrun's guess of who hosts the store misses, and commbench says."""
    with Cluster(2) as cluster:
        cluster.map_host(0, {cluster.hosts[0]: "127.0.1.1"})
        # a fresh namespace has every port free; free_port keeps to the house rule anyway
        endpoint = f"{cluster.addresses[0]}:{free_port}"
        rdzv_id = f"netns-{os.getpid()}-{cluster.tag}"
        command = (
            f"-m commbench collectives --nnodes 2 --rdzv-endpoint {endpoint} --rdzv-id {rdzv_id} "
            "--nproc 1 --device cpu --ops all_reduce --sizes 4K --iters 3 --warmup 1 --timeout 60"
        )
        nodes = [
            cluster.popen(
                r,
                [sys.executable, *command.split(), "--node-rank", str(r), "-o", f"node{r}"],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for r in (0, 1)
        ]
        outputs = [p.communicate(timeout=240) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    run_dir = next((tmp_path / "node0").iterdir())
    run = load_run(run_dir)
    assert [(row.op, row.world_size, row.check) for row in run.rows] == [("all_reduce", 2, "ok")]
    assert run.context.hosts == sorted(cluster.hosts)  # two machines, as far as torch can tell
    csv = (run_dir / "results.csv").read_text().splitlines()
    assert len(csv) == 2 and csv[1].startswith("all_reduce,")


def test_a_stopped_rank_on_the_other_machine_is_named_with_its_host(
    tmp_path: Path, free_port: int
) -> None:
    """Two machines of their own: the rank on node 1 is SIGSTOPped mid-sweep; node 0's
    launcher, which sees it only through the job's store (node 1's digest, the fleet
    summary), names it with node 1's host name within its own --timeout. Node 1 is given the
    longer timeout so that node 0's watchdog, not node 1's, fires first."""
    import json
    import signal
    import time

    with Cluster(2) as cluster:
        endpoint = f"{cluster.addresses[0]}:{free_port}"
        rdzv_id = f"netns-stop-{os.getpid()}-{cluster.tag}"
        command = (
            f"-m commbench collectives --nnodes 2 --rdzv-endpoint {endpoint} --rdzv-id {rdzv_id} "
            "--nproc 1 --device cpu --ops all_reduce --sizes 1K-16M --iters 30 --warmup 1"
        )
        nodes = [
            cluster.popen(
                r,
                [sys.executable, *command.split(), "--timeout", timeout, "--node-rank", str(r),
                 "-o", f"node{r}"],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for r, timeout in ((0, "5"), (1, "30"))
        ]  # fmt: skip
        victim = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and victim is None:
            for f in (tmp_path / "node1").glob("*/ranks/rank*.json"):
                try:
                    beat = json.loads(f.read_text())
                except (OSError, ValueError):
                    continue
                if beat.get("point", -1) >= 1:
                    victim = beat
            time.sleep(0.1)
        assert victim is not None, [p.poll() for p in nodes]
        os.kill(victim["pid"], signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            _, err0 = nodes[0].communicate(timeout=120)
            named_after = time.monotonic() - stopped_at
            _, err1 = nodes[1].communicate(timeout=120)
        finally:
            if Path(f"/proc/{victim['pid']}").exists():
                os.kill(victim["pid"], signal.SIGCONT)
    assert nodes[0].returncode == 1, (err0, err1)
    assert f"rank {victim['rank']} (host {cluster.hosts[1]}" in err0, err0
    assert "is stopped (SIGSTOP or a debugger), as its node's launcher sees it" in err0, err0
    assert named_after < 5 + 15, named_after  # node 0's timeout, and its start-up allowance
    assert "is stopped" in err1 and cluster.hosts[1] in err1, err1


_GARBAGE_WRITER = r"""
import contextlib, json, os, sys, time
from datetime import timedelta
from pathlib import Path
from torch.distributed import TCPStore

rdzv_id, seconds = sys.argv[1], float(sys.argv[2])
garbage = [bytes.fromhex(g) for g in json.loads(Path(sys.argv[3]).read_text())]


def workers_store():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(e.split("=", 1) for e in raw.decode(errors="replace").split("\0") if "=" in e)
        if env.get("TORCHELASTIC_RUN_ID") == rdzv_id and "MASTER_PORT" in env:
            return env["MASTER_ADDR"], int(env["MASTER_PORT"])
    return None


store, writes, end = None, 0, time.monotonic() + seconds
while time.monotonic() < end:
    if store is None and (at := workers_store()) is not None:
        with contextlib.suppress(Exception):
            store = TCPStore(*at, is_master=False, timeout=timedelta(seconds=5),
                             wait_for_workers=False)
    if store is not None:
        try:
            store.set(f"commbench/job/digest/{writes % 2}", garbage[writes % len(garbage)])
            writes += 1
        except Exception:
            store = None  # the job ended, or is between its stores
    time.sleep(0.3)
print(writes, flush=True)
"""


def test_garbage_under_the_watchs_keys_between_two_machines_is_said_once_per_kind(
    tmp_path: Path, free_port: int
) -> None:
    """Issue 43, item 6, as the hostile round ran it: two nodes in namespaces of their own,
    while a program on node 0's machine writes garbage under the control plane's keys in the
    job's store. Each node ends with one `commbench: warning: skipped a ...` line per kind and
    reason, and no libtorch C++ log or stack on either node's stderr."""
    import json

    from tests.test_multinode import GARBAGE, skipped_once_per_kind

    with Cluster(2) as cluster:
        endpoint = f"{cluster.addresses[0]}:{free_port}"
        rdzv_id = f"netns-garbage-{os.getpid()}-{cluster.tag}"
        command = (
            f"-m commbench collectives --nnodes 2 --rdzv-endpoint {endpoint} --rdzv-id {rdzv_id} "
            "--nproc 1 --device cpu --ops all_reduce,all_gather --sizes 1K-1M --min-time 0.3 "
            "--timeout 60"
        )
        nodes = [
            cluster.popen(
                r,
                [sys.executable, *command.split(), "--node-rank", str(r), "-o", f"node{r}"],
                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for r in (0, 1)
        ]  # fmt: skip
        (tmp_path / "garbage.json").write_text(json.dumps([g.hex() for g in GARBAGE]))
        writer = cluster.popen(
            0,
            [sys.executable, "-c", _GARBAGE_WRITER, rdzv_id, "90", "garbage.json"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            outputs = [p.communicate(timeout=240) for p in nodes]
        finally:
            writer.kill()
        writes = writer.communicate(timeout=30)[0].strip()
    assert [p.returncode for p in nodes] == [0, 0], outputs
    assert skipped_once_per_kind(outputs), (writes, outputs)  # the aggregators read some
