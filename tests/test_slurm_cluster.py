"""A real SLURM: two slurmd daemons on loopback make a two-node cluster on this machine,
and `srun -N2 --ntasks-per-node=1 commbench collectives --nproc 1` runs across them.

Needs Debian's slurmctld, slurmd, slurm-client and munge and root (`.ci/run` installs them).
Skipped where they are missing, except in CI, where a skip would hide a broken path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from commbench.results.store import load_run

pytestmark = pytest.mark.integration

CLUSTER = Path(__file__).parent / "slurm" / "cluster.sh"


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory):
    missing = [b for b in ("slurmctld", "slurmd", "munged", "srun") if shutil.which(b) is None]
    if missing or os.geteuid() != 0:
        reason = f"needs root and SLURM ({', '.join(missing) or 'not root'} missing)"
        if os.environ.get("CI"):
            pytest.fail(reason + ": .ci/run installs them")
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    out = subprocess.run(
        [str(CLUSTER), "start", str(state)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    conf = out.stdout.strip().split("=", 1)[1]
    yield conf
    subprocess.run([str(CLUSTER), "stop", str(state)], timeout=60)


def test_srun_two_nodes(slurm_conf: str, tmp_path: Path) -> None:
    env = {**os.environ, "SLURM_CONF": slurm_conf}
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
    assert run.meta["launch"]["rdzv_endpoint"].startswith("n1:")
    assert run.context["world_size"] == 2
    assert all(row.world_size == 2 and row.check == "ok" for row in run.rows)
    assert len(run.rows) == 6
