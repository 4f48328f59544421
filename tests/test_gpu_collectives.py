"""GPU runs (skipped without CUDA): NCCL at world size 1 is what one GPU allows.

Multi-GPU behaviour is tested with CPU ranks and fake topologies, never claimed from here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import OPS
from commbench.launch.launcher import run_collectives
from tests.factories import collectives_settings

pytestmark = [pytest.mark.gpu, pytest.mark.integration]


def settings(**kw) -> CollectivesSettings:
    base = dict(
        ops=list(OPS),
        sizes=[1024, 1 << 20],
        nproc=1,
        backend="nccl",
        device="cuda",
        iters=10,
        warmup=2,
    )
    base.update(kw)
    return collectives_settings(**base)


def test_nccl_world_1_every_op_checks(tmp_path: Path) -> None:
    outcome = run_collectives(settings(), tmp_path)
    assert outcome.status == "complete", outcome.failure
    for row in outcome.rows:
        spec = OPS[row.op]
        # an op without data has nothing to check; one that needs two ranks is not run on one
        expected = "n/a" if spec.latency_only else "skipped" if spec.too_few_ranks(1) else "ok"
        assert row.check == expected, row
        if expected == "ok":
            assert row.stats.n == 10 and row.time_us > 0
    assert outcome.record.context.nccl and outcome.record.context.device_names[0] != "cpu"


@pytest.mark.parametrize(
    "extra", [{"graph": True}, {"async_op": True}, {"dtype": "bfloat16", "reduce_op": "avg"}]
)
def test_nccl_timing_paths(tmp_path: Path, extra: dict) -> None:
    outcome = run_collectives(
        settings(ops=["all_reduce", "all_gather", "reduce_scatter"], **extra), tmp_path
    )
    assert outcome.status == "complete", outcome.failure
    assert all(r.check == "ok" for r in outcome.rows)
    if extra.get("graph"):
        assert all("CUDA graph" in r.note for r in outcome.rows)


def test_adaptive_iterations_on_gpu(tmp_path: Path) -> None:
    # all_gather out of place: on one rank a device copy, whose time grows with the size (an
    # all_reduce on one rank moves nothing, so its count need not fall with the size)
    outcome = run_collectives(
        settings(
            ops=["all_gather"], iters=None, warmup=None, sizes=[1024, 256 << 20], min_time=0.05
        ),
        tmp_path,
    )
    small, large = outcome.rows
    assert small.stats.n > large.stats.n >= 10
    # the first point was timed on a warmed device: not slower than a copy 256K times larger
    assert small.time_us < large.time_us
