"""Each strategy as a call the worker times, and its check.

`make_strategy_call` allocates every scratch buffer up front (padding, receive buffers), so
the timed call only communicates, reduces and copies. Each call runs the whole all-reduce
in place on `bufs.inp` and returns when it has completed from the host's point of view, as
`ops.make_call` does.

AVG: the strategies built on collectives pass ReduceOp.AVG to them; the hand-written rings
reduce with SUM and divide by n. gloo has no AVG for integer dtypes (dist.all_reduce raises
there, on one rank only), so that combination is refused before any rank communicates.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from commbench.collectives import ops
from commbench.strategies.registry import STRATEGIES
from commbench.strategies.ring import make_ring, make_ring_naive


def _direct(bufs: ops.Buffers, group: ops.Group, reduce_op: str) -> Callable[[], None]:
    buf, pg, red = bufs.inp, group.handle, ops.REDUCE_OPS[reduce_op]

    def direct() -> None:
        dist.all_reduce(buf, op=red, group=pg)

    return direct


def _reduce_broadcast(bufs: ops.Buffers, group: ops.Group, reduce_op: str) -> Callable[[], None]:
    """Reduce to the group's first rank, which broadcasts the result back."""
    buf, pg, root, red = bufs.inp, group.handle, group.root, ops.REDUCE_OPS[reduce_op]

    def reduce_broadcast() -> None:
        dist.reduce(buf, dst=root, op=red, group=pg)
        dist.broadcast(buf, src=root, group=pg)

    return reduce_broadcast


def _reduce_scatter_all_gather(
    bufs: ops.Buffers, group: ops.Group, reduce_op: str
) -> Callable[[], None]:
    """reduce_scatter into this rank's 1/n shard, then all_gather the shards back.

    Both ops need equal shards. When the element count does not divide by n, the buffer is
    copied into a zero-padded scratch of ceil(count/n)*n elements and the result copied
    back: those two copies are part of this strategy's cost (on a GPU they are two extra
    kernels; on CPU two memcpy of S). The padding elements reduce among themselves and are
    dropped.
    """
    buf, pg, n = bufs.inp, group.handle, group.size
    count = buf.numel()
    shard_len = -(-count // n)
    padded = shard_len * n != count
    full = torch.zeros(shard_len * n, dtype=buf.dtype, device=buf.device) if padded else buf
    shard = torch.empty(shard_len, dtype=buf.dtype, device=buf.device)
    head = full.narrow(0, 0, count)
    red = ops.REDUCE_OPS[reduce_op]

    def reduce_scatter_all_gather() -> None:
        if padded:
            head.copy_(buf)
        ops._reduce_scatter_tensor(shard, full, op=red, group=pg)
        ops._all_gather_tensor(full, shard, group=pg)
        if padded:
            buf.copy_(head)

    return reduce_scatter_all_gather


_BUILDERS: dict[str, Callable[[ops.Buffers, ops.Group, str], Callable[[], None]]] = {
    "direct": _direct,
    "reduce_broadcast": _reduce_broadcast,
    "reduce_scatter_all_gather": _reduce_scatter_all_gather,
    "ring": make_ring,
    "ring_naive": make_ring_naive,
}
assert tuple(_BUILDERS) == STRATEGIES


def make_strategy_call(
    strategy: str, bufs: ops.Buffers, group: ops.Group, reduce_op: str
) -> Callable[[], None]:
    """A no-argument function that runs `strategy` once, in place on `bufs.inp`."""
    if bufs.inp is not bufs.out:
        raise ValueError("strategies run in place: allocate all_reduce buffers")
    if reduce_op not in ops.REDUCE_OPS:
        raise ValueError(f"unknown reduce op {reduce_op!r}")
    if (
        reduce_op == "avg"
        and not bufs.inp.is_floating_point()
        and dist.get_backend(group.handle) == "gloo"
    ):
        raise ValueError(f"gloo has no AVG for {bufs.inp.dtype} (dist.all_reduce refuses it)")
    return _BUILDERS[strategy](bufs, group, reduce_op)


def check_strategy(
    strategy: str,
    bufs: ops.Buffers,
    call: Callable[[], None],
    group: ops.Group,
    reduce_op: str,
) -> bool:
    """Fill the buffer with the check pattern, run `call` once, compare with the exact
    all-reduce (what `direct` produces).

    The pattern's values are small integers, so every sum, max, min and product is exact
    in every dtype whatever order a strategy reduces in: float results must match exactly
    too. AVG on floats allows 4 ulps, as `ops.check` does for dist.all_reduce.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    return ops.check("all_reduce", bufs, call, group, reduce_op)
