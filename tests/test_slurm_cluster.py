"""A real SLURM: two slurmd daemons on loopback make a two-node cluster on this machine,
and `srun -N2 --ntasks-per-node=1 commbench collectives --nproc 1` runs across them.

Needs Debian's slurmctld, slurmd, slurm-client and munge and root (`.ci/run` installs them).
Skipped where they are missing, except in CI, where a skip would hide a broken path.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from commbench.launch.slurm import RDZV_PORT_BASE, RDZV_PORT_SPAN
from commbench.results.store import load_run

pytestmark = pytest.mark.integration

CLUSTER = Path(__file__).parent / "slurm" / "cluster.sh"
MARK = "COMMBENCH_TEST_SLURM"  # cluster.sh marks every process of a cluster with MARK=its dir


@dataclass(frozen=True, slots=True)
class Cluster:
    conf: str
    nodes: list[str]
    rdzv_port: int
    """The port commbench derives from the job id; held free for the job (see `slurm`)."""
    mark: str


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
    missing = [b for b in ("slurmctld", "slurmd", "munged", "srun") if shutil.which(b) is None]
    if missing or os.geteuid() != 0:
        reason = f"needs root and SLURM ({', '.join(missing) or 'not root'} missing)"
        if os.environ.get("CI"):
            pytest.fail(reason + ": .ci/run installs them")
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    mark = f"{MARK}={state}"
    # commbench meets a SLURM job's nodes on port 29400 + job id % 1000 of the first node: hold
    # a free one of those ports for the job, and make its job id (the cluster's first) match
    with hold_port(RDZV_PORT_BASE, RDZV_PORT_BASE + RDZV_PORT_SPAN) as port:
        job_id = random.randrange(1, 60_000) * RDZV_PORT_SPAN + port - RDZV_PORT_BASE
        try:
            out = subprocess.run(
                [str(CLUSTER), "start", str(state), str(job_id)],
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
            yield Cluster(conf, sorted(set(sinfo.stdout.split())), port, mark)
        finally:
            subprocess.run([str(CLUSTER), "stop", str(state)], timeout=120, check=True)
    # nothing of this cluster is left on the machine
    assert str(state) not in Path("/etc/hosts").read_text()
    assert marked_processes(mark) == []


def test_srun_two_nodes(slurm: Cluster, tmp_path: Path) -> None:
    # the mark lets `cluster.sh stop` find the job's processes too, should the job hang
    mark, _, value = slurm.mark.partition("=")
    env = {**os.environ, "SLURM_CONF": slurm.conf, mark: value}
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
    assert run.meta["launch"]["source"] == "slurm" and run.meta["launch"]["nnodes"] == 2
    assert run.meta["launch"]["rdzv_endpoint"] == f"{slurm.nodes[0]}:{slurm.rdzv_port}"
    assert run.context["world_size"] == 2
    assert all(row.world_size == 2 and row.check == "ok" for row in run.rows)
    assert len(run.rows) == 6
