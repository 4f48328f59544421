"""The collectives themselves, on torch tensors: buffers, the call, and the exact check.

Timing runs on buffers of zeros: 0 is a fixed point of every reduction, so repeating an
in-place all-reduce thousands of times never overflows into inf/NaN (which would change
the arithmetic on CPU and make the check meaningless). After timing, the same buffers are
filled with a rank-dependent pattern chosen so the result is exact in the dtype, the op runs
once more, and every element is compared with the value computed independently here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
import torch.distributed as dist

from commbench.collectives.specs import OPS

# Elements filled or verified at a time: one heartbeat tick each (below), and on a GPU one
# host synchronisation each, when torch.equal returns its answer.
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
#
# Every input pattern and every expected result depends on the global element index g only
# through g mod _PERIOD, so a table of _PERIOD values describes a buffer of any size. Filling
# a buffer is one broadcast copy of its table; verifying it is one comparison with a tiled
# copy of the expected table, both in the buffer's dtype on its device. The check's cost is
# thus a write and a read of the buffer next to the op's own run: no index tensors, no int64
# intermediates the size of the buffer, no loop over ranks per element, no per-element host
# work. Tables are built once per (pattern, rank, world size) on the host (_PERIOD values).

_PERIOD = 8191
"""Elements after which every pattern repeats. A prime (2**13 - 1): a chunk displaced by a
whole number of chunks lands on other values unless the shift is a multiple of 8191 elements
(power-of-two chunks never are)."""
_SCRAMBLE = 5062
"""Element g takes pattern index (g * _SCRAMBLE) mod _PERIOD, so neighbouring elements get
unrelated values: a short chunk a few elements out of place shows too (with g itself, a
pattern of period 3 would match itself shifted by 3, 6, ... elements)."""
_ROW = _PERIOD * 64
"""Elements of expected values materialised at a time: a whole number of periods, so every
row-sized piece of a chunk compares with the same row, and a multiple of 8 bytes in every dtype."""

# Unsigned/signed width doesn't matter: these views only compare bits.
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _pattern_index() -> torch.Tensor:
    return torch.arange(_PERIOD, dtype=torch.int64) * _SCRAMBLE % _PERIOD


@lru_cache(maxsize=64)
def _input_table(kind: str, rank: int, n: int) -> torch.Tensor:
    """Rank `rank`'s input values for g mod _PERIOD = 0.._PERIOD-1 (int64, on the host).

    'move': distinct per rank (ops that only move data: a chunk from the wrong rank shows);
    'sum': small values (1..3), whose sums are exact while 3n fits the dtype's exact integers;
    'ones': 1 at one or two ranks per index, 0 elsewhere, so the sum is exactly 1 or 2 at any
        world size (used where 'sum' would not be exact: bf16/int8/uint8 on large worlds);
    'prod': 2 at one or two ranks per index, 1 elsewhere, so the product is exactly 2 or 4.
    Every expected result is >= 1, so an output still holding the timed iterations' zeros
    fails; and every reduction varies along the buffer, so a chunk in the wrong place shows
    (max and min up to 135 ranks; beyond, every element's maximum is 127, its minimum 1).
    A second sequence, w*w mod _PERIOD, decides where a sum of n consecutive 'sum' values
    or the number of ranks holding a 1 or a 2 changes: with w alone, n = 3 would sum to 6
    everywhere. Callers must not modify the cached table.
    """
    w = _pattern_index()
    if kind == "move":
        return (w + 7 * rank) % _PERIOD % 127 + 1
    if kind == "sum":
        shifted = (w + rank) % _PERIOD
        return shifted * shifted % _PERIOD % 3 + 1
    if kind in ("ones", "prod"):
        holders = 1 + w * w % _PERIOD % 2  # how many ranks hold the 1 (the 2) at this index
        mine = (w - rank) % n < holders
        return torch.where(mine, 1, 0) if kind == "ones" else torch.where(mine, 2, 1)
    raise ValueError(kind)


@lru_cache(maxsize=16)
def _reduced_table(kind: str, reduce_op: str, n: int) -> torch.Tensor:
    """The exact reduction of the n ranks' input tables, float64 (divided by n for AVG)."""
    acc = _input_table(kind, 0, n).clone()
    for q in range(1, n):
        part = _input_table(kind, q, n)
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


@dataclass(frozen=True, slots=True)
class _Table:
    """One table of the check: rank `who`'s input (an int) or the reduction `who` (a reduce
    op's name) of pattern `kind` at world size `n`."""

    kind: str
    who: int | str
    n: int

    def host(self) -> torch.Tensor:
        """float64, on the host (AVG divided by n)."""
        if isinstance(self.who, str):
            return _reduced_table(self.kind, self.who, self.n)
        return _input_table(self.kind, self.who, self.n).to(torch.float64)

    def on(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """Converted to the buffer's dtype, on its device; kept, so a sweep converts once."""
        return _converted(self, dtype, device)


@lru_cache(maxsize=64)
def _converted(table: _Table, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return table.host().to(dtype).to(device)


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
        return "ones"
    return kind


def _rolled(values: torch.Tensor, start: int) -> torch.Tensor:
    """The table as seen from global index `start`: entry j is the value at start + j."""
    phase = start % _PERIOD
    return torch.cat((values[phase:], values[:phase])) if phase else values


def _tiled(values: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """The values at global indices [start, start + length), contiguous (length <= _ROW);
    a view of the table when they do not wrap around the period."""
    phase = start % _PERIOD
    if phase + length <= _PERIOD:
        return values.narrow(0, phase, length)
    return _rolled(values, start).repeat(-(-length // _PERIOD)).narrow(0, 0, length)


def _each_chunk(t: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
    """(offset, view) per _CHUNK elements of `t`; each one ticks the watchdog's heartbeat."""
    return [(s, t.narrow(0, s, min(_CHUNK, t.numel() - s))) for s in range(0, t.numel(), _CHUNK)]


def _fill(t: torch.Tensor, table: _Table) -> None:
    """t[i] = the table's entry i mod _PERIOD: one broadcast copy per chunk."""
    values = table.on(t.dtype, t.device)
    for offset, seg in _each_chunk(t):
        progress()
        if seg.numel() <= _PERIOD:
            seg.copy_(_tiled(values, offset, seg.numel()))
            continue
        row = _rolled(values, offset)
        whole = seg.numel() // _PERIOD * _PERIOD
        seg.narrow(0, 0, whole).view(-1, _PERIOD).copy_(row.expand(whole // _PERIOD, _PERIOD))
        seg.narrow(0, whole, seg.numel() - whole).copy_(row[: seg.numel() - whole])


def _as_bits(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`a` and `b` (contiguous, same dtype; a's length a multiple of b's, `a` being compared
    with `b` row by row) as the widest integers their alignment allows: the same bits in up to
    8x fewer elements, which torch compares several times faster. Equal bits are equal values
    here: no expected value is 0 or NaN, the only values with more than one encoding."""
    size = a.element_size()
    width = math.gcd(a.storage_offset() * size, b.storage_offset() * size, b.numel() * size, 8)
    return a.view(_BITS[width]), b.view(_BITS[width])


def _equal_periodic(seg: torch.Tensor, values: torch.Tensor, start: int) -> bool:
    """Every element of `seg` (global indices from `start`) equals the table's, bit for bit."""
    if not seg.numel():
        return True
    row = _tiled(values, start, min(seg.numel(), _ROW))
    rows, rest = divmod(seg.numel(), row.numel())
    whole = rows * row.numel()
    head, want = _as_bits(seg.narrow(0, 0, whole), row)
    if not torch.equal(head.view(rows, -1), want.expand(rows, -1)):
        return False
    if rest:  # a whole number of periods later: the same row, cut short
        tail, want = _as_bits(seg.narrow(0, whole, rest), row.narrow(0, 0, rest))
        return bool(torch.equal(tail, want))
    return True


def _within_periodic(seg: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, start: int) -> bool:
    """Every element of `seg` lies in [lo, hi] (tables in seg's dtype); NaN never does."""
    for offset in range(0, seg.numel(), _ROW):
        part = seg.narrow(0, offset, min(_ROW, seg.numel() - offset))
        low = _tiled(lo, start + offset, part.numel())
        high = _tiled(hi, start + offset, part.numel())
        if not bool(torch.logical_and(part >= low, part <= high).all()):
            return False
    return True


def _avg_bounds(
    expected: torch.Tensor, dtype: torch.dtype, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dtype's values within (n + 4) half-ulps of each expected AVG value: NCCL multiplies
    each input by 1/n and sums, which is exact only for powers of two; each of the n products
    and additions may round by half an ulp. Rounded inwards, so comparing in the dtype is
    exact: x >= lo in the dtype exactly when x >= the float64 bound."""
    rtol = (n + 4) * torch.finfo(dtype).eps / 2
    lo64, hi64 = expected - rtol * expected.abs(), expected + rtol * expected.abs()
    lo, hi = lo64.to(dtype), hi64.to(dtype)
    lo = torch.where(lo.double() < lo64, torch.nextafter(lo, torch.full_like(lo, math.inf)), lo)
    hi = torch.where(hi.double() > hi64, torch.nextafter(hi, torch.full_like(hi, -math.inf)), hi)
    return lo, hi


def _verify(t: torch.Tensor, start: int, expected: _Table, avg_of: int = 0) -> bool:
    """Compare every element of `t`, holding global indices [start, start + numel), with the
    `expected` table in t's dtype; exactly, except an AVG over `avg_of` ranks on floats,
    which first tries the exact value (always right for gloo and for powers of two) and
    falls back to the tolerance of `_avg_bounds`."""
    values = expected.on(t.dtype, t.device)
    tolerant = avg_of > 0 and t.is_floating_point()
    bounds = None
    for offset, seg in _each_chunk(t):
        progress()
        if _equal_periodic(seg, values, start + offset):
            continue
        if not tolerant:
            return False
        if bounds is None:
            lo, hi = _avg_bounds(expected.host(), t.dtype, avg_of)
            bounds = (lo.to(t.device), hi.to(t.device))
        if not _within_periodic(seg, *bounds, start + offset):
            return False
    return True


def check(op: str, bufs: Buffers, call: Callable[[], None], group: Group, reduce_op: str) -> bool:
    """Fill the inputs with the check pattern, run the op once, verify this rank's output."""
    if op == "barrier":
        return True
    n, r = group.size, group.rank
    kind = _pattern_kind(op, reduce_op, n, bufs.inp.dtype)
    count = bufs.out.numel() if op in ("all_gather", "gather") else bufs.inp.numel()
    chunk = count // n if OPS[op].split else count
    # Outputs still hold the zeros of the timed iterations and every expected value is >= 1,
    # so an element the op failed to write can never pass.
    _fill(bufs.inp, _Table(kind, r, n))
    call()
    if bufs.out.is_cuda:
        torch.cuda.synchronize(bufs.out.device)

    reduced = _Table(kind, reduce_op, n)
    avg_of = n if reduce_op == "avg" else 0
    if op in ("all_reduce", "reduce"):
        if op == "reduce" and r != 0:
            return True  # only the root's buffer is defined
        return _verify(bufs.inp, 0, reduced, avg_of)
    if op == "broadcast":
        return _verify(bufs.inp, 0, _Table(kind, 0, n))
    if op == "reduce_scatter":
        return _verify(bufs.out, r * chunk, reduced, avg_of)
    if op in ("all_gather", "gather"):
        if op == "gather" and r != 0:
            return True
        return all(
            _verify(bufs.out.narrow(0, s * chunk, chunk), 0, _Table(kind, s, n)) for s in range(n)
        )
    if op == "all_to_all":
        # Output chunk s on rank r is rank s's input chunk r.
        return all(
            _verify(bufs.out.narrow(0, s * chunk, chunk), r * chunk, _Table(kind, s, n))
            for s in range(n)
        )
    if op == "scatter":
        return _verify(bufs.out, r * chunk, _Table(kind, 0, n))
    if op == "sendrecv":
        return _verify(bufs.out, 0, _Table(kind, (r - 1) % n, n))
    raise ValueError(op)
