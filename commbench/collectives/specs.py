"""What each collective is, independent of torch: its bus-bandwidth factor, how its size
splits across ranks, whether it reduces. One `OpSpec` per op and per all-reduce strategy;
the CLI and the settings validate names here without importing torch.

Conventions follow nccl-tests (doc/PERFORMANCE.md): S is the per-rank buffer in bytes (for
all_gather / gather the whole gathered buffer, for reduce_scatter / scatter / all_to_all /
all_to_allv the whole buffer before the split), algbw = S / t, busbw = algbw x factor(n).
busbw is what makes numbers at different world sizes comparable to the hardware's link
bandwidth. all_to_allv's ranks move unequal amounts: its algbw is the busiest rank's bytes
(S x the skew's max/mean) over t, with alltoall's factor (`OpSpec.skewed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from commbench.errors import UserError
from commbench.lists import split_list
from commbench.results.names import DTYPES, REDUCE_OPS

__all__ = ["DTYPES", "OPS", "REDUCE_OPS", "STRATEGIES"]  # the names live in `results.names`


@dataclass(frozen=True, slots=True)
class OpSpec:
    """The torch-free half of a registry entry: what the CLI, the settings and the rows need
    to know about an op or an all-reduce strategy. Its other half, the buffers, the call and
    the expected result, is the `commbench.collectives.ops.Collective` with the same `key`."""

    op: str
    """The op a row names: the op itself, or what a strategy computes (all_reduce)."""
    factor: Callable[[int], float] | None
    """n -> busbw / algbw (nccl-tests' PERFORMANCE.md); None for latency-only ops (barrier),
    which move no data: their size is 0 and they have no result to check."""
    split: bool
    """True when S is split into n chunks, so the element count must divide by n."""
    reduces: bool
    """True when the op applies --reduce-op (and so depends on dtype x reduce-op support)."""
    in_place: str
    """How --in-place applies: 'always' (torch's op is in-place by nature), 'optional', 'never'."""
    rooted: bool = False
    """True for ops with a root rank (the first rank of the group)."""
    min_ranks: int = 1
    """The fewest ranks the op runs on (a send needs a receiver); a smaller group gets a row
    saying so instead of a measurement."""
    skewed: bool = False
    """True when `--skew` sets how each rank's S splits over its destinations (all_to_allv):
    its rows carry the skew's label, and algbw is the busiest rank's bytes over the time
    (`commbench.skew`)."""
    graph_capturable: bool = True
    """False for ops that synchronise the stream, which a CUDA graph capture forbids: timed
    eagerly under --graph."""
    strategy: str = ""
    """The all-reduce strategy's name; '' for the op itself."""
    short: str = ""
    """The strategy's column header where its name would not fit; '' for the name itself."""
    counts: Mapping[str, str] = field(default_factory=dict)
    """Per backend (nccl, gloo), what the cost model (`commbench.strategies.model.cost`)
    counts for the strategy, in one line; empty for an op."""

    @property
    def name(self) -> str:
        """What the user types: `--ops` for an op, `--strategies` for a strategy."""
        return self.strategy or self.op

    @property
    def key(self) -> tuple[str, str]:
        """(op, strategy), as a row and a sweep point name it."""
        return (self.op, self.strategy)

    @property
    def header(self) -> str:
        """The name as a table's column header: `short` where there is one."""
        return self.short or self.name

    @property
    def title(self) -> str:
        """How messages name it: `all_reduce`, or `the ring all-reduce`."""
        if self.strategy:
            return f"the {self.strategy} {self.op.replace('_', '-')}"
        return self.op

    @property
    def latency_only(self) -> bool:
        """No data (barrier): size 0, nothing to check, nothing that depends on the dtype."""
        return self.factor is None

    def busbw_factor(self, n: int) -> float | None:
        """busbw / algbw at world size n; None where there is no bandwidth: latency-only ops,
        and one rank (`no_bandwidth`)."""
        if self.factor is None or self.no_bandwidth(n):
            return None
        return self.factor(n)

    def too_few_ranks(self, n: int) -> str:
        """Why the op cannot run on n ranks, or '' when it can."""
        if n >= self.min_ranks:
            return ""
        return f"{self.name} needs {_WORDS.get(self.min_ranks, str(self.min_ranks))} ranks"

    def no_bandwidth(self, n: int) -> str:
        """Why a point on n ranks is timed but has no bandwidth, or '' when it has one. On one
        rank nothing moves between ranks (NCCL's in-place ops return at once, an out-of-place
        one is a local copy, a CUDA graph captures next to nothing), so the time is the
        dispatch and any bandwidth would be made up. The op still runs and is checked."""
        return NOT_MEASURED_ONE_RANK if n == 1 and not self.latency_only else ""


_WORDS = {2: "two", 3: "three", 4: "four"}

NOT_MEASURED_ONE_RANK = (
    "bandwidth not measured (1 rank): nothing moves between ranks, the time is the dispatch"
)


def _allreduce(n: int) -> float:
    return 2 * (n - 1) / n


def _split(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(op="all_reduce", factor=_allreduce, split=False, reduces=True, in_place="always"),
        OpSpec(op="all_gather", factor=_split, split=True, reduces=False, in_place="optional"),
        OpSpec(op="reduce_scatter", factor=_split, split=True, reduces=True, in_place="optional"),
        OpSpec(op="all_to_all", factor=_split, split=True, reduces=False, in_place="never"),
        # split: sizes round as all_to_all's, so uniform moves exactly all_to_all's traffic
        OpSpec(
            op="all_to_allv",
            factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            skewed=True,
        ),
        OpSpec(
            op="broadcast", factor=_one, split=False, reduces=False, in_place="always", rooted=True
        ),
        OpSpec(op="reduce", factor=_one, split=False, reduces=True, in_place="always", rooted=True),
        OpSpec(
            op="gather", factor=_split, split=True, reduces=False, in_place="never", rooted=True
        ),
        OpSpec(
            op="scatter", factor=_split, split=True, reduces=False, in_place="never", rooted=True
        ),
        OpSpec(
            op="sendrecv", factor=_one, split=False, reduces=False, in_place="never", min_ranks=2
        ),
        OpSpec(
            op="barrier",
            factor=None,
            split=False,
            reduces=False,
            in_place="never",
            graph_capturable=False,
        ),
    )
}
"""Every op, in display order (`--ops all`)."""


def _strategy(name: str, short: str, *, nccl: str, gloo: str) -> OpSpec:
    return replace(
        OPS["all_reduce"], strategy=name, short=short, counts={"nccl": nccl, "gloo": gloo}
    )


_RING = "ring all-reduce: 2(n-1) steps of S/n"
_HOST_RING = "direct's traffic in 2(n-1) host-driven p2p steps"
_NAIVE = "the whole S on each of n-1 steps"

STRATEGIES: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        _strategy("direct", "direct", nccl=_RING, gloo=_RING),
        _strategy(
            "reduce_broadcast",
            "red+bcast",
            nccl="pipelined chain reduce then chain broadcast: every link carries S twice",
            gloo="ring reduce + gather at the root, then a binomial-tree broadcast of the whole S",
        ),
        _strategy(
            "reduce_scatter_all_gather",
            "rs+ag",
            nccl="ring reduce-scatter + ring all-gather: direct's traffic in two launches",
            gloo="gloo's reduce_scatter is a whole all-reduce (+ copy), then a ring all-gather",
        ),
        _strategy("ring", "ring", nccl=_HOST_RING, gloo=_HOST_RING),
        _strategy("ring_naive", "ring_naive", nccl=_NAIVE, gloo=_NAIVE),
    )
}
"""Every all-reduce strategy (`--strategies`), in display order: the one table of them, which
the cost model's legend and the strategy tables' headers read. Each is an all_reduce: its
rows have op=all_reduce and all_reduce's busbw factor, so the numbers compare directly; how
each one works is the docstring of its entry in `commbench.collectives.allreduce`. Its names
are `results.names.STRATEGY_NAMES`, which stored files are checked against."""

# The hand-written ring splits each 1/n chunk into two slices once a chunk reaches this
# size, so one slice is on the wire while the other is being reduced (double buffering,
# as gloo's and NCCL's rings do). Below it, the extra message per step costs more latency
# than the overlap saves. The cost model counts the same slices.
PIPELINE_MIN_BYTES = 64 * 1024


def ring_slices(chunk_bytes: int) -> int:
    """Slices per chunk and ring step: 2 (pipelined) for large chunks, else 1."""
    return 2 if chunk_bytes >= PIPELINE_MIN_BYTES else 1


def parse_ops(text: str) -> list[str]:
    """`all_reduce,all_gather` or `all` -> op names, in registry order for `all`."""
    names = split_list(text, "--ops", max_items=4 * len(OPS))
    if names == ["all"]:
        return list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise UserError(f"unknown op {unknown[0]!r}; choose from: {', '.join(OPS)}")
    return list(dict.fromkeys(names))


def parse_strategies(text: str) -> list[str]:
    """`ring,direct` or `all` -> strategy names (display order for `all`, else as given)."""
    names = split_list(text, "--strategies", max_items=4 * len(STRATEGIES))
    if names == ["all"]:
        return list(STRATEGIES)
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise UserError(
            f"unknown strategy {unknown[0]!r}; choose from: all, {', '.join(STRATEGIES)}"
        )
    return list(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class SizePlan:
    """The buffer an op really uses for a requested size."""

    requested_bytes: int
    size_bytes: int
    count: int
    """Elements in S."""
    note: str


def plan_size(op: str, requested_bytes: int, dtype: str, world_size: int) -> SizePlan:
    """Round a requested size to what `op` can move: whole elements, divisible by n if split.

    Sizes round down (never measure more than asked), except that a size too small for the
    world size rounds up to one element per rank. Any change is stated in `note`.
    """
    spec = OPS[op]
    elem = DTYPES[dtype]
    unit = world_size if spec.split else 1
    count = (requested_bytes // elem) // unit * unit
    note = ""
    if count < unit:
        count = unit
    size = count * elem
    if spec.latency_only:
        return SizePlan(requested_bytes=0, size_bytes=0, count=0, note="")
    if size != requested_bytes:
        why = (
            f"a multiple of {elem * unit} B ({elem} B x {unit} ranks)"
            if unit > 1
            else f"whole {dtype} elements"
        )
        note = f"rounded from {requested_bytes} B to {why}"
    return SizePlan(requested_bytes=requested_bytes, size_bytes=size, count=count, note=note)


def busbw_factor(op: str, world_size: int) -> float | None:
    return OPS[op].busbw_factor(world_size)
