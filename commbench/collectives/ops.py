"""The protocol every entry of the registry implements, and the entries of torch's own ops.

An entry (`Collective`) is one op, or one way to do an all-reduce: its `spec` (the torch-free
facts: busbw factor, how S splits, whether it reduces), its `buffers`, its `call`, and which
check table each piece of its output must hold afterwards (`expected`). The harness (the
worker, the probe) only calls these: it never looks at an op's name. This mirrors
nccl-tests' `struct testColl`: one definition per op, one harness for all.

Timing runs on buffers of zeros: 0 is a fixed point of every reduction, so repeating an
in-place all-reduce thousands of times never overflows into inf/NaN (which would change
the arithmetic on CPU and make the check meaningless). After timing, `Collective.check`
fills the same inputs with a rank-dependent pattern chosen so the result is exact in the
dtype (`commbench.collectives.pattern`), runs the op once more, and compares every element
of this rank's output with the value computed independently there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from commbench.collectives import pattern
from commbench.collectives.specs import OPS, OpSpec
from commbench.skew import Skew

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
all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


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


@dataclass(frozen=True, slots=True)
class Expect:
    """A piece of this rank's output and the check table it must hold after the op."""

    out: torch.Tensor
    """The piece (a view of the output buffer)."""
    start: int
    """The global element index of its first element: where in the pattern it starts."""
    source: int | None
    """The input table it holds: a group rank's (`Collective.inputs`), or None: the
    reduction of every rank's input."""


class Collective(ABC):
    """One entry of the registry: an op, or a way to do an all-reduce."""

    spec: ClassVar[OpSpec]
    """Its torch-free facts (`commbench.collectives.specs`)."""

    @abstractmethod
    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        """Allocate the buffers for S = `count` elements (zeros; see the module docstring)."""

    @abstractmethod
    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        """A no-argument function that runs the op once and returns when it has completed
        from the host's point of view (on CUDA: enqueued, with the current stream ordered
        after it). Everything it needs besides the communication is allocated here."""

    @abstractmethod
    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        """What this rank's output holds after a correct run on the check's inputs (rank q's
        input is pattern table q from global index 0, unless `inputs` says otherwise); []
        where nothing is defined here."""

    def inputs(self, bufs: Buffers, group: Group) -> list[tuple[torch.Tensor, int]]:
        """The pieces of this rank's input and the table the check fills each with, from its
        first element: the whole input, this rank's table. An op whose pieces go to
        different ranks may give each its own table, so a piece delivered to the wrong
        place never matches (all_to_allv)."""
        return [(bufs.inp, group.rank)]

    def for_skew(self, skew: Skew) -> Collective:
        """The entry that splits as `skew` says: this one, for every op whose splits are
        even; a new one for an op that takes a skew (`OpSpec.skewed`)."""
        return self

    def check(self, bufs: Buffers, call: Callable[[], None], group: Group, reduce_op: str) -> bool:
        """Fill the inputs with the check pattern, run `call` once, verify this rank's output.

        Outputs still hold the zeros of the timed iterations and every expected value is
        >= 1, so an element the op failed to write can never pass.
        """
        if self.spec.latency_only:
            return True
        n = group.size
        kind = pattern.pattern_kind(self.spec.reduces, reduce_op, n, bufs.inp.dtype)
        for piece, table in self.inputs(bufs, group):
            pattern.fill(piece, pattern.Table(kind, table, n))
        call()
        if bufs.out.is_cuda:
            torch.cuda.synchronize(bufs.out.device)
        avg_of = n if reduce_op == "avg" else 0
        reduced = pattern.Table(kind, reduce_op, n)
        return all(
            pattern.verify(e.out, e.start, reduced, avg_of)
            if e.source is None
            else pattern.verify(e.out, e.start, pattern.Table(kind, e.source, n))
            for e in self.expected(bufs, group)
        )


# --- helpers the entries share --------------------------------------------------------------


def _zeros(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.zeros(count, dtype=dtype, device=device)


def _one_buffer(count: int, dtype: torch.dtype, device: torch.device) -> Buffers:
    """Ops that work in place on one buffer (at least one element: the barrier's is empty)."""
    buf = _zeros(max(count, 1), dtype, device)
    return Buffers(inp=buf, out=buf)


def _waited(issue: Callable[[], Any]) -> Callable[[], None]:
    """`issue` (a torch.distributed call), then a wait on its Work if it was asynchronous."""

    def run() -> None:
        work = issue()
        if work is not None:
            work.wait()

    return run


def _pieces(buf: torch.Tensor, n: int) -> list[torch.Tensor]:
    """The n equal chunks of `buf`, as views."""
    chunk = buf.numel() // n
    return [buf.narrow(0, s * chunk, chunk) for s in range(n)]


def _cut(buf: torch.Tensor, splits: list[int]) -> list[torch.Tensor]:
    """`buf` cut into consecutive pieces of `splits` elements, as views."""
    pieces, at = [], 0
    for size in splits:
        pieces.append(buf.narrow(0, at, size))
        at += size
    return pieces


# --- torch's own ops --------------------------------------------------------------------------


class AllReduce(Collective):
    spec = OPS["all_reduce"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return _one_buffer(count, dtype, device)

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        buf, red, pg = bufs.inp, REDUCE_OPS[reduce_op], group.handle
        return _waited(lambda: dist.all_reduce(buf, op=red, group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, None)]


class AllGather(Collective):
    spec = OPS["all_gather"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        out = _zeros(count, dtype, device)
        chunk = count // group.size
        inp = out.narrow(0, group.rank * chunk, chunk) if in_place else _zeros(chunk, dtype, device)
        return Buffers(inp=inp, out=out)

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        out, inp, pg = bufs.out, bufs.inp, group.handle
        return _waited(lambda: all_gather_tensor(out, inp, group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(piece, 0, s) for s, piece in enumerate(_pieces(bufs.out, group.size))]


class ReduceScatter(Collective):
    spec = OPS["reduce_scatter"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        inp = _zeros(count, dtype, device)
        chunk = count // group.size
        out = inp.narrow(0, group.rank * chunk, chunk) if in_place else _zeros(chunk, dtype, device)
        return Buffers(inp=inp, out=out)

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        out, inp, red, pg = bufs.out, bufs.inp, REDUCE_OPS[reduce_op], group.handle
        return _waited(lambda: reduce_scatter_tensor(out, inp, op=red, group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, group.rank * bufs.out.numel(), None)]


class AllToAll(Collective):
    spec = OPS["all_to_all"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return Buffers(inp=_zeros(count, dtype, device), out=_zeros(count, dtype, device))

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        out, inp, pg = bufs.out, bufs.inp, group.handle
        return _waited(lambda: dist.all_to_all_single(out, inp, group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        # Output chunk s on rank r is rank s's input chunk r.
        start = group.rank * (bufs.inp.numel() // group.size)
        return [Expect(piece, start, s) for s, piece in enumerate(_pieces(bufs.out, group.size))]


class AllToAllV(Collective):
    """all_to_all with uneven splits, as a mixture-of-experts layer routes its tokens: rank r
    sends `skew.send(r)` elements to each rank and receives `skew.recv(r)` from each, both
    computed on every rank from (skew, seed, rank, world, S) without an exchange. S is what
    each rank sends; what it receives varies, the busiest rank's most of all."""

    spec = OPS["all_to_allv"]

    def __init__(self, skew: Skew | None = None) -> None:
        self.skew = skew or Skew("uniform")

    def for_skew(self, skew: Skew) -> Collective:
        return AllToAllV(skew)

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        received = sum(self.skew.recv(group.rank, count, group.size))
        return Buffers(inp=_zeros(count, dtype, device), out=_zeros(received, dtype, device))

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        out, inp, pg = bufs.out, bufs.inp, group.handle
        count, r, n = inp.numel(), group.rank, group.size
        send, recv = self.skew.send(r, count, n), self.skew.recv(r, count, n)
        return _waited(
            lambda: dist.all_to_all_single(
                out,
                inp,
                output_split_sizes=recv,
                input_split_sizes=send,
                group=pg,
                async_op=async_op,
            )
        )

    def inputs(self, bufs: Buffers, group: Group) -> list[tuple[torch.Tensor, int]]:
        # Chunk d of rank r gets table r*n + d: its values depend on (source, destination,
        # index), so a chunk from another source, for another destination, or shifted, fails.
        r, n = group.rank, group.size
        send = self.skew.send(r, bufs.inp.numel(), n)
        return [(piece, r * n + d) for d, piece in enumerate(_cut(bufs.inp, send))]

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        # Output piece s on rank r is rank s's input chunk r: table s*n + r from its start.
        r, n = group.rank, group.size
        recv = self.skew.recv(r, bufs.inp.numel(), n)
        return [Expect(piece, 0, s * n + r) for s, piece in enumerate(_cut(bufs.out, recv))]


class Broadcast(Collective):
    spec = OPS["broadcast"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return _one_buffer(count, dtype, device)

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        buf, root, pg = bufs.inp, group.root, group.handle
        return _waited(lambda: dist.broadcast(buf, src=root, group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, 0)]


class Reduce(Collective):
    spec = OPS["reduce"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return _one_buffer(count, dtype, device)

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        buf, root, red, pg = bufs.inp, group.root, REDUCE_OPS[reduce_op], group.handle
        return _waited(lambda: dist.reduce(buf, dst=root, op=red, group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, None)] if group.rank == 0 else []  # only the root's is defined


class Gather(Collective):
    spec = OPS["gather"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return Buffers(
            inp=_zeros(count // group.size, dtype, device), out=_zeros(count, dtype, device)
        )

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        inp, root, pg = bufs.inp, group.root, group.handle
        gather_list = _pieces(bufs.out, group.size) if group.rank == 0 else None
        return _waited(lambda: dist.gather(inp, gather_list, dst=root, group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        if group.rank != 0:
            return []  # only the root's is defined
        return [Expect(piece, 0, s) for s, piece in enumerate(_pieces(bufs.out, group.size))]


class Scatter(Collective):
    spec = OPS["scatter"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return Buffers(
            inp=_zeros(count, dtype, device), out=_zeros(count // group.size, dtype, device)
        )

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        out, root, pg = bufs.out, group.root, group.handle
        scatter_list = _pieces(bufs.inp, group.size) if group.rank == 0 else None
        return _waited(
            lambda: dist.scatter(out, scatter_list, src=root, group=pg, async_op=async_op)
        )

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, group.rank * bufs.out.numel(), 0)]


class SendRecv(Collective):
    """Every rank sends its buffer to the next group rank and receives the previous one's."""

    spec = OPS["sendrecv"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return Buffers(inp=_zeros(count, dtype, device), out=_zeros(count, dtype, device))

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        r, pg = group.rank, group.handle
        p2p = [
            dist.P2POp(dist.isend, bufs.inp, group.global_rank(r + 1), group=pg),
            dist.P2POp(dist.irecv, bufs.out, group.global_rank(r - 1), group=pg),
        ]

        def sendrecv() -> None:
            # The send and the receive go out as one group: issued separately, every rank's
            # send would wait on NCCL for a receive queued behind its peer's send (a deadlock
            # at sizes past NCCL's buffers). --async-op changes nothing: they are async anyway.
            for req in dist.batch_isend_irecv(p2p):
                req.wait()

        return sendrecv

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, (group.rank - 1) % group.size)]


class Barrier(Collective):
    spec = OPS["barrier"]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return _one_buffer(count, dtype, device)

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        pg = group.handle
        return _waited(lambda: dist.barrier(group=pg, async_op=async_op))

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return []  # latency only: nothing to check
