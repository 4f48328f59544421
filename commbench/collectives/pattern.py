"""The check's data: a rank-dependent input pattern whose reductions are exact in the dtype,
written into the inputs and compared with every element of the outputs.

Every input pattern and every expected result depends on the global element index g only
through g mod PERIOD, so a table of PERIOD values describes a buffer of any size. Filling
a buffer is one broadcast copy of its table; verifying it is one comparison with a tiled
copy of the expected table, both in the buffer's dtype on its device. The check's cost is
thus a write and a read of the buffer next to the op's own run: no index tensors, no int64
intermediates the size of the buffer, no loop over ranks per element, no per-element host
work. Tables are built once per (pattern, rank, world size) on the host (PERIOD values).

Which table each piece of an output holds is the op's business
(`commbench.collectives.ops.Collective.expected`); this module never looks at an op's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

# Elements filled or verified at a time: one heartbeat tick each (below), and on a GPU one
# host synchronisation each, when torch.equal returns its answer.
CHUNK = 1 << 24


# Called once per chunk of check work. The worker points it at its heartbeat: checking a
# 1 GiB buffer on a CPU takes many seconds with no collective in flight, and the watchdog
# must see that as progress, not as a hang.
def _no_progress() -> None:
    pass


progress: Callable[[], None] = _no_progress

PERIOD = 8191
"""Elements after which every pattern repeats. A prime (2**13 - 1): a chunk displaced by a
whole number of chunks lands on other values unless the shift is a multiple of 8191 elements
(power-of-two chunks never are)."""
_SCRAMBLE = 5062
"""Element g takes pattern index (g * _SCRAMBLE) mod PERIOD, so neighbouring elements get
unrelated values: a short chunk a few elements out of place shows too (with g itself, a
pattern of period 3 would match itself shifted by 3, 6, ... elements)."""
ROW = PERIOD * 64
"""Elements of expected values materialised at a time: a whole number of periods, so every
row-sized piece of a chunk compares with the same row, and a multiple of 8 bytes in every dtype."""

# Unsigned/signed width doesn't matter: these views only compare bits.
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _pattern_index() -> torch.Tensor:
    return torch.arange(PERIOD, dtype=torch.int64) * _SCRAMBLE % PERIOD


@lru_cache(maxsize=64)
def _input_table(kind: str, rank: int, n: int) -> torch.Tensor:
    """Rank `rank`'s input values for g mod PERIOD = 0..PERIOD-1 (int64, on the host).

    'move': distinct per rank (ops that only move data: a chunk from the wrong rank shows);
    'sum': small values (1..3), whose sums are exact while 3n fits the dtype's exact integers;
    'ones': 1 at one or two ranks per index, 0 elsewhere, so the sum is exactly 1 or 2 at any
        world size (used where 'sum' would not be exact: bf16/int8/uint8 on large worlds);
    'prod': 2 at one or two ranks per index, 1 elsewhere, so the product is exactly 2 or 4.
    Every expected result is >= 1, so an output still holding the timed iterations' zeros
    fails; and every reduction varies along the buffer, so a chunk in the wrong place shows
    (max and min up to 135 ranks; beyond, every element's maximum is 127, its minimum 1).
    A second sequence, w*w mod PERIOD, decides where a sum of n consecutive 'sum' values
    or the number of ranks holding a 1 or a 2 changes: with w alone, n = 3 would sum to 6
    everywhere. Callers must not modify the cached table.
    """
    w = _pattern_index()
    if kind == "move":
        return (w + 7 * rank) % PERIOD % 127 + 1
    if kind == "sum":
        shifted = (w + rank) % PERIOD
        return shifted * shifted % PERIOD % 3 + 1
    if kind in ("ones", "prod"):
        holders = 1 + w * w % PERIOD % 2  # how many ranks hold the 1 (the 2) at this index
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
class Table:
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
def _converted(table: Table, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
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


def pattern_kind(
    reduces: bool, reduce_op: str, n: int = 1, dtype: torch.dtype = torch.float32
) -> str:
    """The pattern an op's inputs get: 'move' unless it reduces (see `_input_table`)."""
    if not reduces:
        return "move"
    kind = {"sum": "sum", "avg": "sum", "prod": "prod", "max": "move", "min": "move"}[reduce_op]
    if kind == "sum" and 3 * n > _EXACT_INT.get(dtype, 1 << 24):
        return "ones"
    return kind


def _rolled(values: torch.Tensor, start: int) -> torch.Tensor:
    """The table as seen from global index `start`: entry j is the value at start + j."""
    phase = start % PERIOD
    return torch.cat((values[phase:], values[:phase])) if phase else values


def _tiled(values: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """The values at global indices [start, start + length), contiguous (length <= ROW);
    a view of the table when they do not wrap around the period."""
    phase = start % PERIOD
    if phase + length <= PERIOD:
        return values.narrow(0, phase, length)
    return _rolled(values, start).repeat(-(-length // PERIOD)).narrow(0, 0, length)


def _each_chunk(t: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
    """(offset, view) per CHUNK elements of `t`; each one ticks the watchdog's heartbeat."""
    return [(s, t.narrow(0, s, min(CHUNK, t.numel() - s))) for s in range(0, t.numel(), CHUNK)]


def fill(t: torch.Tensor, table: Table) -> None:
    """t[i] = the table's entry i mod PERIOD: one broadcast copy per chunk."""
    values = table.on(t.dtype, t.device)
    for offset, seg in _each_chunk(t):
        progress()
        if seg.numel() <= PERIOD:
            seg.copy_(_tiled(values, offset, seg.numel()))
            continue
        row = _rolled(values, offset)
        whole = seg.numel() // PERIOD * PERIOD
        seg.narrow(0, 0, whole).view(-1, PERIOD).copy_(row.expand(whole // PERIOD, PERIOD))
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
    row = _tiled(values, start, min(seg.numel(), ROW))
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
    for offset in range(0, seg.numel(), ROW):
        part = seg.narrow(0, offset, min(ROW, seg.numel() - offset))
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


def verify(t: torch.Tensor, start: int, expected: Table, avg_of: int = 0) -> bool:
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
