"""Hand-written ring all-reduces over point-to-point ops, in place on one buffer.

Every rank sends to group rank r+1 and receives from r-1. Each step posts its send and its
receive together through `dist.batch_isend_irecv`, so they overlap, and so NCCL sees them as
one group (separate isend/irecv calls on one NCCL stream deadlock around a ring).

Sizes need not divide by n: chunk i is elements [i*count//n, (i+1)*count//n), so chunks
differ by at most one element and some are empty when count < n; a rank skips empty sends
and receives, and its peer, which computes the same bounds, skips the matching ones.
AVG is SUM followed by a division by n (in the dtype; integers truncate, as the check does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from commbench.collectives.ops import Buffers, Group
from commbench.collectives.specs import ring_slices


def accumulate(dst: torch.Tensor, src: torch.Tensor, reduce_op: str) -> None:
    """dst = dst (op) src, element-wise, in place."""
    if reduce_op in ("sum", "avg"):
        dst.add_(src)
    elif reduce_op == "prod":
        dst.mul_(src)
    elif reduce_op == "max":
        torch.maximum(dst, src, out=dst)
    elif reduce_op == "min":
        torch.minimum(dst, src, out=dst)
    else:
        raise ValueError(reduce_op)


def divide(t: torch.Tensor, n: int) -> None:
    """t /= n in place; integer dtypes truncate toward zero."""
    if t.is_floating_point():
        t.div_(n)
    else:
        t.div_(n, rounding_mode="trunc")


def _bounds(count: int, parts: int, offset: int = 0) -> list[int]:
    return [offset + (i * count) // parts for i in range(parts + 1)]


class _Exchange:
    """One rank's links: post a send to the next rank and a receive from the previous one."""

    def __init__(self, group: Group) -> None:
        self.pg = group.handle
        self.nxt = group.global_rank(group.rank + 1)
        self.prv = group.global_rank(group.rank - 1)

    def post(self, send: torch.Tensor, recv: torch.Tensor, tag: int) -> list[Any]:
        # Tags keep messages apart when two are in flight between the same pair (gloo
        # matches on them; NCCL ignores them and matches in posting order, which is the same).
        ops = []
        if send.numel():
            ops.append(dist.P2POp(dist.isend, send, self.nxt, self.pg, tag))
        if recv.numel():
            ops.append(dist.P2POp(dist.irecv, recv, self.prv, self.pg, tag))
        return list(dist.batch_isend_irecv(ops)) if ops else []


# One slice of one ring step: (sent, received into, reduced into or None).
_Slot = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]


def _wait(works: list[Any]) -> None:
    for work in works:
        work.wait()


def make_ring(bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
    """The bandwidth-optimal ring: n-1 reduce-scatter steps then n-1 all-gather steps.

    Reduce-scatter step s: send chunk r-s, receive chunk r-s-1 into scratch and reduce it
    into the buffer; after n-1 steps this rank holds chunk r+1 fully reduced. All-gather
    step s: send chunk r+1-s, receive chunk r-s straight into the buffer.

    Double buffering: once a chunk reaches `PIPELINE_MIN_BYTES`, each step runs as two
    slices with their own receive buffer. As soon as slice h of step s is reduced, slice h
    of step s+1 (which sends exactly that reduced data) is posted, so one slice is on the
    wire while the other is being reduced.
    """
    buf = bufs.inp
    n, r = group.size, group.rank
    count = buf.numel()
    if n == 1:
        return lambda: None
    chunk = _bounds(count, n)
    widest = max(chunk[i + 1] - chunk[i] for i in range(n))
    slices = ring_slices(widest * buf.element_size()) if widest >= 2 else 1
    scratch = [
        torch.empty(-(-widest // slices), dtype=buf.dtype, device=buf.device) for _ in range(slices)
    ]
    link = _Exchange(group)
    steps = 2 * (n - 1)

    def part(c: int, h: int) -> torch.Tensor:
        lo, hi = chunk[c % n], chunk[c % n + 1]
        cut = _bounds(hi - lo, slices, lo)
        return buf.narrow(0, cut[h], cut[h + 1] - cut[h])

    # Every view the ring touches, built here so the timed call only posts and reduces:
    # plan[step][h] is the _Slot of slice h at that step.
    plan: list[list[_Slot]] = []
    for step in range(steps):
        if step < n - 1:
            sent, received = r - step, r - step - 1
        else:
            sent, received = r + 1 - (step - (n - 1)), r - (step - (n - 1))
        row: list[_Slot] = []
        for h in range(slices):
            own = part(received, h)
            if step < n - 1:
                row.append((part(sent, h), scratch[h].narrow(0, 0, own.numel()), own))
            else:
                row.append((part(sent, h), own, None))
        plan.append(row)
    last_reduce = n - 2

    def post(step: int, h: int) -> list[Any]:
        sent, into, _ = plan[step][h]
        return link.post(sent, into, tag=step * slices + h)

    def ring() -> None:
        pending = [post(0, h) for h in range(slices)]
        for step in range(steps):
            for h in range(slices):
                _wait(pending[h])
                _, received, own = plan[step][h]
                if own is not None:
                    accumulate(own, received, reduce_op)
                    if step == last_reduce and reduce_op == "avg":
                        divide(own, n)
                if step + 1 < steps:
                    pending[h] = post(step + 1, h)

    return ring


def make_ring_naive(bufs: Buffers, group: Group, reduce_op: str) -> Callable[[], None]:
    """The textbook ring: n-1 steps, each passing a whole buffer on and accumulating it.

    Step 0 sends this rank's own buffer; step s > 0 forwards what arrived at step s-1. Two
    scratch buffers alternate as receive targets, so forwarding never copies.
    """
    buf = bufs.inp
    n = group.size
    if n == 1:
        return lambda: None
    scratch = [torch.empty_like(buf) for _ in range(2)]
    link = _Exchange(group)

    def ring_naive() -> None:
        send = buf
        for step in range(n - 1):
            recv = scratch[step % 2]
            _wait(link.post(send, recv, tag=step))
            accumulate(buf, recv, reduce_op)
            send = recv
        if reduce_op == "avg":
            divide(buf, n)

    return ring_naive
