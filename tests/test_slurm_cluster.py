"""A real SLURM: two slurmd daemons on loopback make a two-node cluster on this machine,
and `srun -N2 --ntasks-per-node=1 commbench collectives --nproc 1` runs across them.

Needs Debian's slurmctld, slurmd, slurm-client and munge and root (`.ci/run` installs them).
Skipped where they are missing, except in CI, where a skip would hide a broken path.
The cluster shares nothing with a SLURM the machine may already run, nor with another copy
of this test (see `tests/slurm/cluster.sh`), and leaves nothing of its own behind.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from commbench.launch.slurm import RDZV_PORT_BASE, RDZV_PORT_SPAN
from commbench.results.runs import load_run

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

CLUSTER = Path(__file__).parent / "slurm" / "cluster.sh"
MARK = "COMMBENCH_TEST_SLURM"  # cluster.sh marks every process of a cluster with MARK=its dir


@dataclass(frozen=True, slots=True)
class Cluster:
    state: Path
    conf: str
    nodes: list[str]
    rdzv_port: int | None = None
    """The port commbench derives from the first job's id, held free for it (see `slurm`)."""

    @property
    def mark(self) -> str:
        return f"{MARK}={self.state}"

    def env(self) -> dict[str, str]:
        """For srun: this cluster, and its mark, so `stop` finds a job that hangs."""
        return {**os.environ, "SLURM_CONF": self.conf, MARK: str(self.state)}

    def daemons(self) -> dict[int, int]:
        """Port -> pid of the process listening on it, for each port in slurm.conf."""
        text = Path(self.conf).read_text()
        ports = [
            int(p) for p in re.findall(r"^(?:SlurmctldPort|NodeName=.* Port)=(\d+)", text, re.M)
        ]
        listening = {}
        for port in ports:
            ss = subprocess.run(
                ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=True
            )
            pids = re.findall(r"pid=(\d+),", ss.stdout)
            listening[port] = int(pids[0]) if len(set(pids)) == 1 else 0
        return listening


def start_cluster(state: Path, first_job_id: int = 1) -> Cluster:
    out = subprocess.run(
        [str(CLUSTER), "start", str(state), str(first_job_id)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    conf = out.stdout.strip().split("=", 1)[1]
    sinfo = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SLURM_CONF": conf},
    )
    return Cluster(state, conf, sorted(set(sinfo.stdout.split())))


def stop_cluster(state: Path) -> None:
    subprocess.run([str(CLUSTER), "stop", str(state)], timeout=120, check=True)
    # nothing of that cluster is left on the machine
    assert str(state) not in Path("/etc/hosts").read_text()
    assert marked_processes(f"{MARK}={state}") == []


def marked_processes(mark: str) -> list[int]:
    """Processes whose environment carries `mark`: what a cluster started and left running."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark.encode() in (proc / "environ").read_bytes().split(
                b"\0"
            ):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


@pytest.fixture(scope="module")
def slurm(
    tmp_path_factory: pytest.TempPathFactory,
    hold_port: Callable[[int, int], AbstractContextManager[int]],
) -> Iterator[Cluster]:
    missing = [
        b for b in ("slurmctld", "slurmd", "munged", "srun", "ss") if shutil.which(b) is None
    ]
    if missing or os.geteuid() != 0:
        reason = f"needs root and SLURM ({', '.join(missing) or 'not root'} missing)"
        if os.environ.get("CI"):
            pytest.fail(reason + ": .ci/run installs them")
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    # commbench meets a SLURM job's nodes on port 29400 + job id % 1000 of the first node: hold
    # a free one of those ports for the job, and make its job id (the cluster's first) match
    with hold_port(RDZV_PORT_BASE, RDZV_PORT_BASE + RDZV_PORT_SPAN) as port:
        job_id = random.randrange(1, 60_000) * RDZV_PORT_SPAN + port - RDZV_PORT_BASE
        try:
            cluster = start_cluster(state, job_id)
            yield dataclasses.replace(cluster, rdzv_port=port)
        finally:
            stop_cluster(state)


def test_srun_two_nodes(slurm: Cluster, tmp_path: Path) -> None:
    env = slurm.env()
    proc = subprocess.run(
        [
            "srun",
            "-N2",
            "--ntasks-per-node=1",
            "--time=5",
            "commbench",
            "collectives",
            "--nproc",
            "1",
            "--device",
            "cpu",
            "--ops",
            "all_reduce,all_gather,sendrecv",
            "--sizes",
            "1K,64K",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--timeout",
            "60",
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    runs = [load_run(p) for p in (tmp_path / "out").iterdir()]
    assert len(runs) == 2  # one run directory per node; rank 0's holds the rows
    (run,) = [r for r in runs if r.rows]
    assert run.record.launch["source"] == "slurm" and run.record.launch["nnodes"] == 2
    assert run.record.launch["rdzv_endpoint"] == f"{slurm.nodes[0]}:{slurm.rdzv_port}"
    assert run.context.world_size == 2
    assert all(row.world_size == 2 and row.check == "ok" for row in run.rows)
    assert len(run.rows) == 6


def test_a_second_cluster_leaves_the_first_alone(slurm: Cluster, tmp_path: Path) -> None:
    """Another cluster on the machine (here, a second copy of this one) keeps its daemons, its
    ports and its /etc/hosts line; the second gets ports of its own, each daemon up on its
    own, and takes only what it brought when it stops."""
    first = slurm.daemons()
    assert 0 not in first.values() and len(first) == 3
    second = start_cluster(tmp_path / "second")
    try:
        ours = second.daemons()
        assert 0 not in ours.values() and len(ours) == 3
        assert not set(ours) & set(first) and not set(ours.values()) & set(first.values())
        job = subprocess.run(
            ["srun", "-N2", "--time=1", "hostname"],
            capture_output=True,
            text=True,
            timeout=120,
            env=second.env(),
        )
        assert job.returncode == 0, job.stderr
    finally:
        stop_cluster(second.state)
    assert slurm.daemons() == first
    assert str(slurm.state) in Path("/etc/hosts").read_text()
    sinfo = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N=%t"], capture_output=True, text=True, env=slurm.env()
    )
    assert sorted(sinfo.stdout.split()) == [f"{n}=idle" for n in slurm.nodes]
