"""The collectives themselves, on torch tensors: buffers, the call, and the exact check.

Timing runs on buffers of zeros: 0 is a fixed point of every reduction, so repeating an
in-place all-reduce thousands of times never overflows into inf/NaN (which would change
the arithmetic on CPU and make the check meaningless). After timing, the same buffers are
filled with a rank-dependent pattern chosen so the result is exact in the dtype, the op runs
once more, and every element is compared with the value computed independently here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from commbench.collectives.specs import OPS

# Elements processed at a time when filling/verifying, so a 1 GiB check does not allocate
# several GiB of index tensors.
_CHUNK = 1 << 24


# Called once per chunk of check work. The worker points it at its heartbeat: checking a
# 1 GiB buffer on a CPU takes many seconds with no collective in flight, and the watchdog
# must see that as progress, not as a hang.
def _no_progress() -> None:
    pass


progress: Callable[[], None] = _no_progress

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
}

REDUCE_OPS: dict[str, Any] = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "prod": dist.ReduceOp.PRODUCT,
}

# torch 2.13 renamed the tensor forms; older releases only have the old names.
_all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(slots=True)
class Group:
    """The ranks an op runs on: the world, or a `--ranks` subgroup."""

    handle: Any
    """The ProcessGroup (None means the default group)."""
    ranks: list[int]
    """Global ranks in group order."""
    rank: int
    """This process's rank within the group."""

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def root(self) -> int:
        """Global rank of the root for rooted ops: the group's first rank."""
        return self.ranks[0]

    def global_rank(self, group_rank: int) -> int:
        return self.ranks[group_rank % self.size]


@dataclass(slots=True)
class Buffers:
    inp: torch.Tensor
    out: torch.Tensor


def make_buffers(
    op: str, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
) -> Buffers:
    """Allocate `op`'s buffers for S = `count` elements (zeros; see the module docstring)."""
    n, r = group.size, group.rank
    chunk = count // n if OPS[op].split else count

    def zeros(k: int) -> torch.Tensor:
        return torch.zeros(k, dtype=dtype, device=device)

    if op in ("all_reduce", "broadcast", "reduce", "barrier"):
        buf = zeros(max(count, 1))
        return Buffers(inp=buf, out=buf)
    if op == "all_gather":
        out = zeros(count)
        inp = out.narrow(0, r * chunk, chunk) if in_place else zeros(chunk)
        return Buffers(inp=inp, out=out)
    if op == "reduce_scatter":
        inp = zeros(count)
        out = inp.narrow(0, r * chunk, chunk) if in_place else zeros(chunk)
        return Buffers(inp=inp, out=out)
    if op == "all_to_all":
        return Buffers(inp=zeros(count), out=zeros(count))
    if op == "gather":
        return Buffers(inp=zeros(chunk), out=zeros(count))
    if op == "scatter":
        return Buffers(inp=zeros(count), out=zeros(chunk))
    if op == "sendrecv":
        return Buffers(inp=zeros(count), out=zeros(count))
    raise ValueError(op)


def make_call(
    op: str, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
) -> Callable[[], None]:
    """Return a no-argument function that runs `op` once and returns when it has completed
    from the host's point of view (on CUDA: enqueued, with the current stream ordered after it)."""
    pg = group.handle
    red = REDUCE_OPS[reduce_op]
    n, r = group.size, group.rank
    root = group.root

    def finish(work: Any) -> None:
        if work is not None:
            work.wait()

    if op == "all_reduce":
        return lambda: finish(dist.all_reduce(bufs.inp, op=red, group=pg, async_op=async_op))
    if op == "all_gather":
        return lambda: finish(_all_gather_tensor(bufs.out, bufs.inp, group=pg, async_op=async_op))
    if op == "reduce_scatter":
        return lambda: finish(
            _reduce_scatter_tensor(bufs.out, bufs.inp, op=red, group=pg, async_op=async_op)
        )
    if op == "all_to_all":
        return lambda: finish(
            dist.all_to_all_single(bufs.out, bufs.inp, group=pg, async_op=async_op)
        )
    if op == "broadcast":
        return lambda: finish(dist.broadcast(bufs.inp, src=root, group=pg, async_op=async_op))
    if op == "reduce":
        return lambda: finish(dist.reduce(bufs.inp, dst=root, op=red, group=pg, async_op=async_op))
    if op == "gather":
        gather_list = list(bufs.out.chunk(n)) if r == 0 else None
        return lambda: finish(
            dist.gather(bufs.inp, gather_list, dst=root, group=pg, async_op=async_op)
        )
    if op == "scatter":
        scatter_list = list(bufs.inp.chunk(n)) if r == 0 else None
        return lambda: finish(
            dist.scatter(bufs.out, scatter_list, src=root, group=pg, async_op=async_op)
        )
    if op == "sendrecv":
        nxt, prv = group.global_rank(r + 1), group.global_rank(r - 1)

        p2p = [
            dist.P2POp(dist.isend, bufs.inp, nxt, group=pg),
            dist.P2POp(dist.irecv, bufs.out, prv, group=pg),
        ]

        def sendrecv() -> None:
            # The send and the receive go out as one group: issued separately, every rank's
            # send would wait on NCCL for a receive queued behind its peer's send (a deadlock
            # at sizes past NCCL's buffers). --async-op changes nothing: they are async anyway.
            for req in dist.batch_isend_irecv(p2p):
                req.wait()

        return sendrecv
    if op == "barrier":
        return lambda: finish(dist.barrier(group=pg, async_op=async_op))
    raise ValueError(op)


# --- the check -----------------------------------------------------------------------------


def _pattern(
    kind: str, rank: int, start: int, length: int, n: int, device: torch.device
) -> torch.Tensor:
    """Rank `rank`'s input values at global element indices [start, start+length), int64.

    'move': distinct per rank (ops that only move data: a chunk in the wrong place shows);
    'sum': small values (1..3), whose sums are exact while 3n fits the dtype's exact integers;
    'onehot': 1 at one rank per index, 0 elsewhere, so the sum is exactly 1 at any world size
        (used where 'sum' would not be exact: bf16/int8/uint8 on large worlds);
    'prod': 2 at one rank per index, 1 elsewhere, so the product is exactly 2.
    Every expected result is >= 1, so an output still holding the timed iterations' zeros fails.
    """
    progress()
    idx = torch.arange(start, start + length, device=device, dtype=torch.int64)
    if kind == "move":
        return (idx + 7 * rank) % 127 + 1
    if kind == "sum":
        return (idx + rank) % 3 + 1
    if kind == "onehot":
        return torch.where(idx % n == rank, 1, 0)
    if kind == "prod":
        return torch.where(idx % n == rank, 2, 1)
    raise ValueError(kind)


# The largest integer up to which every integer is exact in the dtype.
_EXACT_INT = {
    torch.float16: 2048,
    torch.bfloat16: 256,
    torch.float32: 1 << 24,
    torch.float64: 1 << 53,
    torch.int8: 127,
    torch.uint8: 255,
    torch.int32: (1 << 31) - 1,
    torch.int64: (1 << 63) - 1,
}


def _pattern_kind(op: str, reduce_op: str, n: int = 1, dtype: torch.dtype = torch.float32) -> str:
    if not OPS[op].reduces:
        return "move"
    kind = {"sum": "sum", "avg": "sum", "prod": "prod", "max": "move", "min": "move"}[reduce_op]
    if kind == "sum" and 3 * n > _EXACT_INT.get(dtype, 1 << 24):
        return "onehot"
    return kind


def _fill(t: torch.Tensor, kind: str, rank: int, offset: int, n: int) -> None:
    for start in range(0, t.numel(), _CHUNK):
        length = min(_CHUNK, t.numel() - start)
        t.narrow(0, start, length).copy_(_pattern(kind, rank, offset + start, length, n, t.device))


def _expected_reduction(
    kind: str, reduce_op: str, start: int, length: int, n: int, device: torch.device
) -> torch.Tensor:
    # A running reduction, not a stack of n patterns: n x 128 MiB would not fit at scale.
    acc = _pattern(kind, 0, start, length, n, device)
    for q in range(1, n):
        part = _pattern(kind, q, start, length, n, device)
        if reduce_op in ("sum", "avg"):
            acc += part
        elif reduce_op == "prod":
            acc *= part
        elif reduce_op == "max":
            torch.maximum(acc, part, out=acc)
        else:
            torch.minimum(acc, part, out=acc)
    total = acc.to(torch.float64)
    return total / n if reduce_op == "avg" else total


def _matches(actual: torch.Tensor, expected: torch.Tensor, reduce_op: str, n: int = 1) -> bool:
    """Exact comparison in the dtype, except AVG on floats: NCCL multiplies each input by 1/n
    and sums, which is exact only for powers of two; each of the n products and additions may
    round by half an ulp, so allow (n + 4) half-ulps."""
    want = expected.to(actual.dtype)
    if reduce_op == "avg" and actual.is_floating_point():
        rtol = (n + 4) * torch.finfo(actual.dtype).eps / 2
        return bool(torch.allclose(actual.double(), expected, rtol=rtol, atol=0))
    return bool(torch.equal(actual, want))


def check(op: str, bufs: Buffers, call: Callable[[], None], group: Group, reduce_op: str) -> bool:
    """Fill the inputs with the check pattern, run the op once, verify this rank's output."""
    if op == "barrier":
        return True
    n, r = group.size, group.rank
    kind = _pattern_kind(op, reduce_op, n, bufs.inp.dtype)
    count = bufs.out.numel() if op in ("all_gather", "gather") else bufs.inp.numel()
    chunk = count // n if OPS[op].split else count
    # Outputs still hold the zeros of the timed iterations and every pattern value is >= 1,
    # so an element the op failed to write can never pass.
    _fill(bufs.inp, kind, r, 0, n)
    call()
    if bufs.out.is_cuda:
        torch.cuda.synchronize(bufs.out.device)
    device = bufs.out.device
    ok = True
    if op in ("all_reduce", "reduce"):
        if op == "reduce" and r != 0:
            return True  # only the root's buffer is defined
        for start in range(0, count, _CHUNK):
            length = min(_CHUNK, count - start)
            exp = _expected_reduction(kind, reduce_op, start, length, n, device)
            ok &= _matches(bufs.inp.narrow(0, start, length), exp, reduce_op, n)
        return ok
    if op == "broadcast":
        return _compare_chunks(
            bufs.inp, kind, lambda start, length: _pattern(kind, 0, start, length, n, device)
        )
    if op == "reduce_scatter":
        base = r * chunk
        for start in range(0, chunk, _CHUNK):
            length = min(_CHUNK, chunk - start)
            exp = _expected_reduction(kind, reduce_op, base + start, length, n, device)
            ok &= _matches(bufs.out.narrow(0, start, length), exp, reduce_op, n)
        return ok
    if op in ("all_gather", "gather"):
        if op == "gather" and r != 0:
            return True
        for src in range(n):
            part = bufs.out.narrow(0, src * chunk, chunk)
            ok &= _compare_chunks(part, kind, partial(_from_rank, kind, src, 0, n, device))
        return ok
    if op == "all_to_all":
        # Output chunk s on rank r is rank s's input chunk r.
        for src in range(n):
            part = bufs.out.narrow(0, src * chunk, chunk)
            ok &= _compare_chunks(part, kind, partial(_from_rank, kind, src, r * chunk, n, device))
        return ok
    if op == "scatter":
        return _compare_chunks(
            bufs.out, kind, lambda s, k: _pattern(kind, 0, r * chunk + s, k, n, device)
        )
    if op == "sendrecv":
        prev = (r - 1) % n
        return _compare_chunks(bufs.out, kind, lambda s, k: _pattern(kind, prev, s, k, n, device))
    raise ValueError(op)


def _from_rank(
    kind: str, rank: int, offset: int, n: int, device: torch.device, start: int, length: int
) -> torch.Tensor:
    """Rank `rank`'s pattern shifted by `offset`: the expected content of a received chunk."""
    return _pattern(kind, rank, offset + start, length, n, device)


def _compare_chunks(
    t: torch.Tensor, kind: str, expected: Callable[[int, int], torch.Tensor]
) -> bool:
    ok = True
    for start in range(0, t.numel(), _CHUNK):
        length = min(_CHUNK, t.numel() - start)
        ok &= bool(torch.equal(t.narrow(0, start, length), expected(start, length).to(t.dtype)))
    return ok
