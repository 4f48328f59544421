"""Two nodes that are machines of their own (`tests/netns_cluster.py`): each commbench in its
own network namespace, with its own address, host name and /etc/hosts, meeting at a c10d
rendezvous on node 0's address, and gloo between the namespaces' interfaces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from netns_cluster import Cluster, netns_available

from commbench.results.runs import load_run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(netns_available() is not None, reason=str(netns_available())),
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
