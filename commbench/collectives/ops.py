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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from commbench.collectives import pattern
from commbench.ops import OpSpec
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


Splits = tuple[Sequence[int], Sequence[int]]
"""An all_to_all's (input, output) split sizes: the elements sent to each member, received
from each."""
Operation = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
"""A torch.distributed function and its arguments, all but `async_op`."""


class Collective(ABC):
    """One entry of the registry: an op, or a way to do an all-reduce."""

    spec: OpSpec
    """Its torch-free facts: the op's declaration (`commbench.ops.OpSpec`), which names this
    class as its `entry` and is given to it (`registry.entry_of`); a strategy's class
    states its own (`collectives.specs.STRATEGIES`)."""

    def __init__(self, spec: OpSpec | None = None) -> None:
        if spec is not None:
            self.spec = spec

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        """Allocate the buffers for S = `count` elements (zeros; see the module docstring), as
        the op's declaration says: one buffer for an op in place by nature or without data;
        else an input and an output of S each, but the one its `shard` names, which holds
        this rank's S / n (in place, where the op may be, a view of its part of the other)."""
        spec = self.spec
        if spec.in_place == "always" or spec.latency_only:
            return _one_buffer(count, dtype, device)
        whole = _zeros(count, dtype, device)
        if not spec.shard:
            return Buffers(inp=whole, out=_zeros(count, dtype, device))
        chunk = count // group.size
        if in_place and spec.in_place == "optional":
            part = whole.narrow(0, group.rank * chunk, chunk)
        else:
            part = _zeros(chunk, dtype, device)
        return Buffers(inp=part, out=whole) if spec.shard == "in" else Buffers(inp=whole, out=part)

    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        """The one torch.distributed call that runs the op on `bufs` over `group`, `root`
        (a global rank) its root if it has one, and its arguments but `async_op`: what both
        `call` (a sweep's) and `issue` (a replayed trace's) run. `splits` are an
        all_to_all's recorded (input, output) split sizes; None: even."""
        raise NotImplementedError(f"{self.spec.title} is not one torch.distributed call")

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        """A no-argument function that runs the op once and returns when it has completed
        from the host's point of view (on CUDA: enqueued, with the current stream ordered
        after it). Everything it needs besides the communication is allocated here."""
        fn, args, kwargs = self.operation(bufs, group, group.root, reduce_op, None)
        return _waited(lambda: fn(*args, async_op=async_op, **kwargs))

    def issue(
        self, bufs: Buffers, group: Group, root: int, splits: Splits | None = None, half: str = ""
    ) -> Any:
        """Issue the op once, asynchronously, as a traced call is replayed (with sum for a
        reduction, from the recorded `root`): its Work. `half` is a traced point-to-point
        call's op (`commbench.ops.P2P`), for an op a trace holds as two (sendrecv)."""
        fn, args, kwargs = self.operation(bufs, group, root, "sum", splits)
        return fn(*args, async_op=True, **kwargs)

    @abstractmethod
    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        """What this rank's output holds after a correct run on the check's inputs (rank q's
        input is pattern table q from global index 0, unless `inputs` says otherwise); []
        where nothing is defined here."""

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        """The test oracle: what group rank `rank`'s output holds after a correct op, computed
        with plain tensor arithmetic from every member's input (as the check fills them), not
        from `expected`'s tables; None where its output is not defined (a rooted op off its
        root, an op without data). tests/test_ops_check.py holds `check` to it, for every op
        `OPS` declares."""
        raise NotImplementedError(
            f"{type(self).__name__} ({self.spec.title}): no `reference`, the oracle its "
            "check is tested against: define it beside its `operation`, in "
            f"{type(self).__module__}"
        )

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


def _reduced(inputs: Sequence[torch.Tensor], reduce_op: str) -> torch.Tensor:
    """Every input reduced by `reduce_op`, in float64, then rounded once to their dtype."""
    stack = torch.stack([x.double() for x in inputs])
    reduce = {
        "sum": lambda: stack.sum(0),
        "avg": lambda: stack.sum(0) / len(inputs),
        "prod": lambda: stack.prod(0),
        "max": lambda: stack.amax(0),
        "min": lambda: stack.amin(0),
    }[reduce_op]
    return reduce().to(inputs[0].dtype)


def _chunk(x: torch.Tensor, r: int, n: int) -> torch.Tensor:
    """Chunk r of x's n equal chunks."""
    size = x.numel() // n
    return x[r * size : (r + 1) * size]


def _is(group: Group, root: int) -> bool:
    """This rank is `root` (a global rank)."""
    return group.ranks[group.rank] == root


def _all_to_all_v(
    bufs: Buffers, group: Group, send: Sequence[int], recv: Sequence[int]
) -> Operation:
    """all_to_all_single with `send` elements to each member and `recv` from each."""
    return (
        dist.all_to_all_single,
        (bufs.out, bufs.inp),
        {"output_split_sizes": list(recv), "input_split_sizes": list(send), "group": group.handle},
    )


# --- torch's own ops --------------------------------------------------------------------------


class AllReduce(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        return dist.all_reduce, (bufs.inp,), {"op": REDUCE_OPS[reduce_op], "group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, None)]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return _reduced(inputs, reduce_op)


class AllGather(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        return all_gather_tensor, (bufs.out, bufs.inp), {"group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(piece, 0, s) for s, piece in enumerate(_pieces(bufs.out, group.size))]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return torch.cat(list(inputs))


class ReduceScatter(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        red = REDUCE_OPS[reduce_op]
        return reduce_scatter_tensor, (bufs.out, bufs.inp), {"op": red, "group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, group.rank * bufs.out.numel(), None)]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return _chunk(_reduced(inputs, reduce_op), rank, len(inputs))


class AllToAll(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        if splits is None:
            return dist.all_to_all_single, (bufs.out, bufs.inp), {"group": group.handle}
        return _all_to_all_v(bufs, group, *splits)

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        # Output chunk s on rank r is rank s's input chunk r.
        start = group.rank * (bufs.inp.numel() // group.size)
        return [Expect(piece, start, s) for s, piece in enumerate(_pieces(bufs.out, group.size))]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return torch.cat([_chunk(x, rank, len(inputs)) for x in inputs])


class AllToAllV(Collective):
    """all_to_all with uneven splits, as a mixture-of-experts layer routes its tokens: rank r
    sends `skew.send(r)` elements to each rank and receives `skew.recv(r)` from each, both
    computed on every rank from (skew, seed, rank, world, S) without an exchange. S is what
    each rank sends; what it receives varies, the busiest rank's most of all."""

    def __init__(self, spec: OpSpec | None = None, skew: Skew | None = None) -> None:
        super().__init__(spec)
        self.skew = skew or Skew("uniform")

    def for_skew(self, skew: Skew) -> Collective:
        return AllToAllV(self.spec, skew)

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        received = sum(self.skew.recv(group.rank, count, group.size))
        return Buffers(inp=_zeros(count, dtype, device), out=_zeros(received, dtype, device))

    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        count, r, n = bufs.inp.numel(), group.rank, group.size
        return _all_to_all_v(bufs, group, self.skew.send(r, count, n), self.skew.recv(r, count, n))

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

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        n = len(inputs)
        pieces = []
        for s, x in enumerate(inputs):
            send = self.skew.send(s, x.numel(), n)
            pieces.append(x[sum(send[:rank]) :][: send[rank]])
        return torch.cat(pieces)


class Broadcast(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        return dist.broadcast, (bufs.inp,), {"src": root, "group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, 0)]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return inputs[0]


class Reduce(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        red = REDUCE_OPS[reduce_op]
        return dist.reduce, (bufs.inp,), {"dst": root, "op": red, "group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, None)] if group.rank == 0 else []  # only the root's is defined

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return _reduced(inputs, reduce_op) if rank == 0 else None


class Gather(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        gather_list = _pieces(bufs.out, group.size) if _is(group, root) else None
        return dist.gather, (bufs.inp, gather_list), {"dst": root, "group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        if group.rank != 0:
            return []  # only the root's is defined
        return [Expect(piece, 0, s) for s, piece in enumerate(_pieces(bufs.out, group.size))]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return torch.cat(list(inputs)) if rank == 0 else None


class Scatter(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        scatter_list = _pieces(bufs.inp, group.size) if _is(group, root) else None
        return dist.scatter, (bufs.out, scatter_list), {"src": root, "group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, group.rank * bufs.out.numel(), 0)]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return _chunk(inputs[0], rank, len(inputs))


class SendRecv(Collective):
    """Every rank sends its buffer to the next group rank and receives the previous one's."""

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

    def issue(
        self, bufs: Buffers, group: Group, root: int, splits: Splits | None = None, half: str = ""
    ) -> Any:
        """A traced send (of the input) or recv (into the output), `root` its peer."""
        if half == "send":
            return dist.isend(bufs.inp, dst=root)
        return dist.irecv(bufs.out, src=root)

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, (group.rank - 1) % group.size)]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return inputs[(rank - 1) % len(inputs)]


class Barrier(Collective):
    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        return dist.barrier, (), {"group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return []  # latency only: nothing to check

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return None
