"""The CUDA timers on a real GPU (marked gpu, skipped without one): order and completion,
never a timing figure. tests/test_timing.py checks the same order against a fake on CPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from commbench.launch.launcher import run_collectives
from commbench.timing import time_cuda, time_cuda_graph
from tests.factories import collectives_settings

pytestmark = pytest.mark.gpu


def heavy() -> tuple[torch.Tensor, list[torch.cuda.Event], Callable[[], None]]:
    """A call long enough on the GPU for the host to run ahead, recording its own end."""
    x = torch.randn(2048, 2048, device="cuda")
    done: list[torch.cuda.Event] = []

    def call() -> None:
        for _ in range(4):
            torch.mm(x, x, out=x)
            x.div_(x.norm())
        e = torch.cuda.Event()
        e.record()
        done.append(e)

    return x, done, call


def test_ticks_come_after_the_previous_iteration_completed_on_the_gpu() -> None:
    _, done, call = heavy()
    seen: list[tuple[int, bool]] = []
    samples = time_cuda(call, 20, lambda i: seen.append((i, i == 0 or done[i - 1].query())))
    assert [i for i, _ in seen] == list(range(20))
    assert all(ok for _, ok in seen), seen
    assert len(samples) == 20 and all(s > 0 for s in samples)


def test_graph_captures_with_no_warmup_before_it() -> None:
    x, _, _ = heavy()
    samples, per_graph = time_cuda_graph(lambda: x.mul_(1.0), 5)
    assert per_graph == 5 and len(samples) >= 1 and all(s > 0 for s in samples)


@pytest.mark.integration
def test_nccl_graph_with_warmup_0(tmp_path: Path) -> None:
    settings = collectives_settings(
        ops=["all_reduce", "all_gather", "reduce_scatter", "broadcast"],
        sizes=[1024, 1 << 20],
        nproc=1,
        backend="nccl",
        device="cuda",
        iters=5,
        warmup=0,
        graph=True,
    )
    outcome = run_collectives(settings, tmp_path)
    assert outcome.status == "complete", outcome.failure
    assert all(r.check == "ok" and "CUDA graph" in r.note for r in outcome.rows)
