"""`commbench record` of ZeroRedundancyOptimizer over DDP (issue 43, item 8): ZeRO runs its
shard's optimizer's step inside its own, so the optimizer step hooks fire twice a training
step. The trace must have the job's steps (tests/jobs/zero_ddp_job.py prints its own truth:
5 steps, each with its DDP all_reduce and ZeRO's broadcasts), not twice as many, half of
them broadcasts only; and its replay must run 5 steps, not 10."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.job_truth import JobSpec, Recorded, compare, record, replay

pytestmark = pytest.mark.integration

STEPS = 5
ZERO = JobSpec("zero_ddp", "zero_ddp_job.py", args=("--steps", str(STEPS)))


@pytest.fixture(scope="module")
def zero(
    tmp_path_factory: pytest.TempPathFactory,
    hold_port: Callable[..., AbstractContextManager[int]],
) -> Recorded:
    """The job recorded once, for both tests."""
    with hold_port() as port:
        job = record(ZERO, tmp_path_factory.mktemp("zero") / "trace", port)
    assert job.returncode == 0, job.stderr[-4000:]
    return job


def test_the_recording_has_the_jobs_steps_each_with_its_calls(zero: Recorded) -> None:
    assert sorted(zero.truth) == [0, 1], "every rank prints its truth"
    steps = {t.step for said in zero.truth.values() for t in said} - {None}
    assert steps == set(range(1, STEPS + 1)), "the job's truth counts its own steps"
    mismatches = compare(zero.trace(), zero.truth)
    assert not mismatches, "\n".join(str(m) for m in mismatches[:12])
    for rank, calls in zero.trace().calls.items():
        for step in range(1, STEPS + 1):
            ops = {c.op for c in calls if c.step == step}
            assert {"all_reduce", "broadcast"} <= ops, (rank, step, ops)


def test_its_replay_runs_the_jobs_steps(zero: Recorded, tmp_path: Path) -> None:
    run = replay(zero.trace_dir, tmp_path / "out", "--iters", "1", "--warmup", "0")
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert run.replay is not None, run.stderr[-2000:]
    assert run.replay.steps == STEPS
    assert run.replay.step_numbers == list(range(1, STEPS + 1))
