"""The exact check, in-process at world size 1 (real gloo process group, real ops).

At world size 1 every op is a copy or identity, so a call that does nothing leaves the
zeros of the timed iterations in place; the check must catch that for every op.
"""

import pytest
import torch
import torch.distributed as dist

from commbench.collectives import ops
from commbench.collectives.specs import OPS


@pytest.fixture(scope="module")
def world1():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield ops.Group(handle=None, ranks=[0], rank=0)
    dist.destroy_process_group()


CHECKED = [op for op in OPS if op not in ("barrier", "sendrecv")]


@pytest.mark.parametrize("op", CHECKED)
@pytest.mark.parametrize(
    ("dtype", "reduce_op"),
    [("float32", "sum"), ("int32", "max"), ("bfloat16", "prod"), ("float16", "avg")],
)
def test_real_op_passes_its_check(world1, op: str, dtype: str, reduce_op: str) -> None:
    bufs = ops.make_buffers(
        op, 1000, ops.TORCH_DTYPES[dtype], torch.device("cpu"), world1, in_place=False
    )
    call = ops.make_call(op, bufs, world1, reduce_op, async_op=False)
    call()  # a timed iteration on zeros
    assert ops.check(op, bufs, call, world1, reduce_op)


@pytest.mark.parametrize("op", CHECKED)
def test_an_op_that_moves_nothing_fails_its_check(world1, op: str) -> None:
    bufs = ops.make_buffers(op, 64, torch.float32, torch.device("cpu"), world1, in_place=False)
    if bufs.inp is bufs.out:
        # in-place ops: corrupt the result instead of skipping the call
        def call() -> None:
            bufs.out.add_(1)
    else:

        def call() -> None:
            pass

    assert not ops.check(op, bufs, call, world1, "sum")


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_in_place_buffers_alias(world1, op: str) -> None:
    bufs = ops.make_buffers(op, 64, torch.float32, torch.device("cpu"), world1, in_place=True)
    assert bufs.inp.data_ptr() == bufs.out.data_ptr()
    call = ops.make_call(op, bufs, world1, "sum", async_op=True)
    assert ops.check(op, bufs, call, world1, "sum")


def test_async_op_waits_for_completion(world1) -> None:
    bufs = ops.make_buffers(
        "all_reduce", 256, torch.float32, torch.device("cpu"), world1, in_place=False
    )
    call = ops.make_call("all_reduce", bufs, world1, "sum", async_op=True)
    assert ops.check("all_reduce", bufs, call, world1, "sum")


def test_sum_pattern_stays_exact_on_large_worlds() -> None:
    # 3 x 100 > 256: small-integer sums would round in bf16, so the check switches to one-hot
    assert ops._pattern_kind("all_reduce", "sum", 100, torch.bfloat16) == "onehot"
    assert ops._pattern_kind("all_reduce", "sum", 100, torch.float32) == "sum"
    assert ops._pattern_kind("all_reduce", "sum", 50, torch.int8) == "onehot"
    expected = ops._expected_reduction("onehot", "sum", 0, 1000, 100, torch.device("cpu"))
    assert torch.equal(expected, torch.ones(1000, dtype=torch.float64))
    assert ops._matches(expected.to(torch.bfloat16), expected, "sum", 100)


def test_avg_tolerance_grows_with_the_world() -> None:
    exact = torch.full((8,), 2.0, dtype=torch.float64)
    off_by_some_ulps = (exact * (1 + 6 * torch.finfo(torch.float32).eps)).to(torch.float32)
    assert not ops._matches(off_by_some_ulps, exact, "avg", 2)
    assert ops._matches(off_by_some_ulps, exact, "avg", 24)
