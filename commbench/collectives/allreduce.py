"""The all-reduce strategies (`commbench collectives --strategies`): other ways to compute
an all_reduce, each an entry of the registry beside the ops.

An all-reduce is also a reduce followed by a broadcast, or a reduce-scatter followed by an
all-gather, or a ring of point-to-point steps (`ring`). Every strategy is an `AllReduce`
with its own call: all_reduce's buffers (the whole all-reduce runs in place on `bufs.inp`),
its busbw factor and its check, so a strategy's result must equal the exact all-reduce.
The pattern's values are small integers, so every sum, max, min and product is exact in
every dtype whatever order a strategy reduces in: float results must match exactly too.

Each call allocates every scratch buffer up front (padding, receive buffers), so the timed
call only communicates, reduces and copies, and runs to completion (--async-op does not
apply). AVG: the strategies built on collectives pass ReduceOp.AVG to them; the hand-written
rings reduce with SUM and divide by n. gloo has no AVG for integer dtypes (dist.all_reduce
raises there, on one rank only), so that combination is refused before any rank communicates.

How each strategy is predicted to perform is `commbench.strategies.model`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable

import torch
import torch.distributed as dist

from commbench.collectives.ops import (
    REDUCE_OPS,
    AllReduce,
    Buffers,
    Group,
    all_gather_tensor,
    reduce_scatter_tensor,
)
from commbench.collectives.ring import make_ring, make_ring_naive
from commbench.collectives.specs import STRATEGIES


class Strategy(AllReduce):
    """An all-reduce done another way: all_reduce's buffers and check, its own call."""

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        if bufs.inp is not bufs.out:
            raise ValueError("strategies run in place: allocate all_reduce buffers")
        if reduce_op not in REDUCE_OPS:
            raise ValueError(f"unknown reduce op {reduce_op!r}")
        if (
            reduce_op == "avg"
            and not bufs.inp.is_floating_point()
            and dist.get_backend(group.handle) == "gloo"
        ):
            raise ValueError(f"gloo has no AVG for {bufs.inp.dtype} (dist.all_reduce refuses it)")
        return self.build(bufs, group, reduce_op)

    @abstractmethod
    def build(self, bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
        """The call, once the buffers and the reduce op are known to suit it."""


class Direct(Strategy):
    """dist.all_reduce: the backend's own algorithm."""

    spec = STRATEGIES["direct"]

    def build(self, bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
        buf, pg, red = bufs.inp, group.handle, REDUCE_OPS[reduce_op]

        def direct() -> None:
            dist.all_reduce(buf, op=red, group=pg)

        return direct


class ReduceBroadcast(Strategy):
    """dist.reduce to the group's first rank, which broadcasts the result back."""

    spec = STRATEGIES["reduce_broadcast"]

    def build(self, bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
        buf, pg, root, red = bufs.inp, group.handle, group.root, REDUCE_OPS[reduce_op]

        def reduce_broadcast() -> None:
            dist.reduce(buf, dst=root, op=red, group=pg)
            dist.broadcast(buf, src=root, group=pg)

        return reduce_broadcast


class ReduceScatterAllGather(Strategy):
    """reduce_scatter into this rank's 1/n shard, then all_gather the shards back.

    Both ops need equal shards. When the element count does not divide by n, the buffer is
    copied into a zero-padded scratch of ceil(count/n)*n elements and the result copied
    back: those two copies are part of this strategy's cost (on a GPU they are two extra
    kernels; on CPU two memcpy of S). The padding elements reduce among themselves and are
    dropped.
    """

    spec = STRATEGIES["reduce_scatter_all_gather"]

    def build(self, bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
        buf, pg, n = bufs.inp, group.handle, group.size
        count = buf.numel()
        shard_len = -(-count // n)
        padded = shard_len * n != count
        full = torch.zeros(shard_len * n, dtype=buf.dtype, device=buf.device) if padded else buf
        shard = torch.empty(shard_len, dtype=buf.dtype, device=buf.device)
        head = full.narrow(0, 0, count)
        red = REDUCE_OPS[reduce_op]

        def reduce_scatter_all_gather() -> None:
            if padded:
                head.copy_(buf)
            reduce_scatter_tensor(shard, full, op=red, group=pg)
            all_gather_tensor(full, shard, group=pg)
            if padded:
                buf.copy_(head)

        return reduce_scatter_all_gather


class Ring(Strategy):
    """Hand-written bandwidth-optimal ring over isend/irecv: n-1 reduce-scatter and n-1
    all-gather steps on 1/n chunks (`commbench.collectives.ring.make_ring`)."""

    spec = STRATEGIES["ring"]

    def build(self, bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
        return make_ring(bufs, group, reduce_op)


class RingNaive(Strategy):
    """Textbook ring over isend/irecv: the whole buffer passed on n-1 times and accumulated
    (`commbench.collectives.ring.make_ring_naive`)."""

    spec = STRATEGIES["ring_naive"]

    def build(self, bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
        return make_ring_naive(bufs, group, reduce_op)
