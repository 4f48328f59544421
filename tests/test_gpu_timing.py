"""The CUDA timers on a real GPU (marked gpu, skipped without one): order and completion,
never a timing figure. tests/test_timing.py checks the same order against a fake on CPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from commbench.launch.launcher import run_collectives
from commbench.timing import device_prequeue, time_cuda, time_cuda_graph
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
    timed = time_cuda(
        call,
        20,
        lambda i: seen.append((i, i == 0 or done[i - 1].query())),
        prequeue=device_prequeue("cuda"),
    )
    assert [i for i, _ in seen] == list(range(20))
    assert all(ok for _, ok in seen), seen
    assert len(timed.samples) == 20 and all(s > 0 for s in timed.samples)


def test_graph_captures_with_no_warmup_before_it() -> None:
    x, _, _ = heavy()
    timed, per_graph = time_cuda_graph(lambda: x.mul_(1.0), 5, prequeue=device_prequeue("cuda"))
    assert per_graph == 5 and len(timed.samples) >= 1 and all(s > 0 for s in timed.samples)


def test_the_hold_keeps_the_device_behind_a_small_ops_whole_batch() -> None:
    """A 1 KiB copy runs in a few microseconds and takes the host longer to issue: behind the
    hold (calibrated here, by public ops) every batch was queued whole before the device got
    to it, so no sample holds host time; the host's pace is measured beside them."""
    src = torch.ones(256, device="cuda")
    dst = torch.empty_like(src)
    prequeue = device_prequeue("cuda")
    assert prequeue.hold.unit_us > 0
    timed = time_cuda(lambda: dst.copy_(src), 200, prequeue=prequeue)
    torch.cuda.synchronize()
    assert len(timed.samples) == 200 and all(s > 0 for s in timed.samples)
    assert timed.batches == 7 and timed.uncovered == 0, (timed.uncovered, prequeue)
    assert timed.issue_rate is not None and bool((dst == 1).all())


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
