"""Every collective op, declared once: one `OpSpec` each, and everything that differs between
ops is a field of it. The command line, the settings and the rows (its busbw factor, how its
size splits, whether it reduces, is rooted, runs in place), the model (`steps`), the network
accounting (`network`), the trace readers and the capture (`traced`: its names in c10d,
torch.distributed, the Flight Recorder, PARAM and Chakra, whether every member passes the
same size), nccl-tests' importer and exporter (`nccl_tests`), the docs' op table (`call`,
`formula`), and the torch half that allocates, issues and checks it and states the tests'
oracle (`entry`) all read it here. A foundation, torch-free and below `results/`, so that
every layer may read it; adding an op is one `OpSpec` in `OPS` and its `Collective` class in
`collectives/ops.py` (or `register` for one made at run time, as a test does), and no test
or doc to edit (tests/test_new_op.py adds one in a copy and runs the op tests).

Conventions follow nccl-tests (doc/PERFORMANCE.md): S is the per-rank buffer in bytes (for
all_gather / gather the whole gathered buffer, for reduce_scatter / scatter / all_to_all /
all_to_allv the whole buffer before the split), algbw = S / t, busbw = algbw x factor(n).
busbw is what makes numbers at different world sizes comparable to the hardware's link
bandwidth. all_to_allv's ranks move unequal amounts: its algbw is the busiest rank's bytes
(S x the skew's max/mean) over t, with alltoall's factor (`OpSpec.skewed`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

Bound = Callable[[int, int, float, float | None], float]
"""(world, ranks per node, the node's usable NIC rate, the fastest NIC's) -> the most busbw
(GB/s) the network allows, for ranks on more than one node (`results.network`)."""


@dataclass(frozen=True, slots=True)
class Traced:
    """An op as a recorded trace names it (`traces.records.Call.op`): most ops are one, a
    sendrecv is two (its send and its recv), all_to_allv none (a trace holds it as an
    all_to_all with its splits)."""

    name: str
    """The call's op in a commbench trace."""
    spellings: tuple[str, ...]
    """Every other tool's name for it, lower case with all but letters removed: c10d's
    operators, torch.distributed's functions, the Flight Recorder's profiling names
    (`nccl:all_reduce`), PARAM's names and aliases (`comms_utils.paramToCommName`),
    Chakra's collective types (`traces.names.canonical_op`)."""
    c10d: tuple[str, ...] = ()
    """The `c10d` operators whose calls `record` notes as this op (`record.capture`)."""
    chakra: tuple[int, ...] = ()
    """Its values of Chakra's `CollectiveCommType` (`traces.chakra`)."""
    symmetric: bool = False
    """Every member passes the same input size, so a size that differs between members is a
    trace that cannot be replayed (all_to_all may be uneven; gather and scatter are not
    symmetric at their root)."""


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One op, or one all-reduce strategy (`collectives.specs.STRATEGIES`): everything that
    differs between them. Its torch half, the buffers, the call and the expected result, is
    the `commbench.collectives.ops.Collective` its `entry` names, built with this spec."""

    op: str
    """The op a row names: the op itself, or what a strategy computes (all_reduce)."""
    factor: Callable[[int], float] | None
    """n -> busbw / algbw (nccl-tests' PERFORMANCE.md); None for latency-only ops (barrier),
    which move no data: their size is 0 and they have no result to check."""
    split: bool
    """True when S is split into n chunks, so the element count must divide by n (and
    nccl-tests prints its count per rank)."""
    reduces: bool
    """True when the op applies --reduce-op (and so depends on dtype x reduce-op support)."""
    in_place: str
    """How --in-place applies: 'always' (torch's op is in-place by nature), 'optional', 'never'."""
    rooted: bool = False
    """True for ops with a root rank (the first rank of the group)."""
    shard: str = ""
    """'in' when its input is one rank's shard of S (all_gather, gather), 'out' when its
    output is (reduce_scatter, scatter), '' otherwise: which buffer holds S / n."""
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
    steps: Callable[[int], int] | None = None
    """n (2 or more) -> the latency steps of its algorithm (NCCL's ring within a node, gloo's
    for most ops), which the replay's model counts beside `factor`'s bytes
    (`replay.explain.op_cost`); None: one step."""
    network: Bound | None = None
    """Its busbw's bound over more than one node (`results.network.busbw_bound`); None for
    an op the network accounting does not bound."""
    traced: tuple[Traced, ...] = ()
    """How a recorded trace names it (`Traced`); () for an op no trace holds."""
    nccl_tests: tuple[str, ...] = ()
    """nccl-tests' spellings of it in program and file names, its program's first
    (`<name>_perf`); () for an op nccl-tests has not."""
    entry: str = ""
    """The `Collective` that allocates, issues and checks it: a class of
    `commbench.collectives.ops`, or `module:Class` for one elsewhere; '' for a strategy
    (its entry is in `collectives.allreduce`)."""
    call: str = ""
    """The torch.distributed call its entry issues, as docs/collectives.md's op table shows it
    (Markdown; `commbench.collectives.table` writes the table from these)."""
    formula: str = ""
    """`factor` as the docs write it, in n (`2(n-1)/n`); '' for a latency-only op. The tests
    evaluate it against `factor`, so the table never says one thing and the rows another."""

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

    def elements(self, count: int, n: int) -> tuple[int, int]:
        """(send, receive) elements of each rank's buffers for S = `count` elements at n ranks,
        nccl-tests' `getCollByteCount`: the buffer `shard` names holds S / n, the other S
        (all_to_allv's, with uniform splits)."""
        if self.shard == "in":
            return (count // n, count)
        if self.shard == "out":
            return (count, count // n)
        return (count, count)

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


# -- the busbw factors (nccl-tests' PERFORMANCE.md) and the steps of each algorithm ----------


def _allreduce(n: int) -> float:
    return 2 * (n - 1) / n


def _split(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


def _ring_steps(n: int) -> int:
    return n - 1


def _allreduce_steps(n: int) -> int:
    return 2 * (n - 1)


def _tree_steps(n: int) -> int:
    return math.ceil(math.log2(n))


# -- the bound of each over the network (`results.network`'s module docstring) ---------------


def _ring_bound(world: int, per_node: int, node: float, nic: float | None) -> float:
    """A ring per NIC, each crossing the node boundary once: the node's rate itself."""
    return node


def _all_to_all_bound(world: int, per_node: int, node: float, nic: float | None) -> float:
    """A node of G ranks pushes G (W - G) / W bytes per byte of S off-node."""
    return node * (world - 1) / (per_node * (world - per_node))


def _rooted_split_bound(world: int, per_node: int, node: float, nic: float | None) -> float:
    """The root's node receives (or sends) the W - G off-node slices of S."""
    return node * (world - 1) / (world - per_node)


def _one_nic_bound(world: int, per_node: int, node: float, nic: float | None) -> float:
    """One rank per node sends off-node, through one NIC."""
    return node if nic is None else min(nic, node)


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            op="all_reduce",
            factor=_allreduce,
            split=False,
            reduces=True,
            in_place="always",
            steps=_allreduce_steps,
            network=_ring_bound,
            traced=(
                Traced(
                    "all_reduce",
                    ("allreduce", "allreducecoalesced", "allreducesparse"),
                    c10d=("allreduce_", "allreduce_coalesced_"),
                    chakra=(0,),
                    symmetric=True,
                ),
            ),
            nccl_tests=("all_reduce", "allreduce"),
            entry="AllReduce",
            call="`all_reduce`",
            formula="2(n-1)/n",
        ),
        OpSpec(
            op="all_gather",
            factor=_split,
            split=True,
            reduces=False,
            in_place="optional",
            shard="in",
            steps=_ring_steps,
            network=_ring_bound,
            traced=(
                Traced(
                    "all_gather",
                    (
                        "allgather",
                        "allgatherbase",
                        "allgatherintotensor",
                        "allgatherintotensorcoalesced",
                        "allgathercoalesced",
                        "allgatherv",
                    ),
                    c10d=(
                        "allgather_",
                        "_allgather_base_",
                        "allgather_coalesced_",
                        "allgather_into_tensor_coalesced_",
                    ),
                    chakra=(2,),
                    symmetric=True,
                ),
            ),
            nccl_tests=("all_gather", "allgather"),
            entry="AllGather",
            call="`all_gather_single` (`all_gather_into_tensor` before torch 2.13)",
            formula="(n-1)/n",
        ),
        OpSpec(
            op="reduce_scatter",
            factor=_split,
            split=True,
            reduces=True,
            in_place="optional",
            shard="out",
            steps=_ring_steps,
            network=_ring_bound,
            traced=(
                Traced(
                    "reduce_scatter",
                    (
                        "reducescatter",
                        "reducescatterbase",
                        "reducescattertensor",
                        "reducescattertensorcoalesced",
                        "reducescatterv",
                        "reducescatterblock",
                    ),
                    c10d=(
                        "reduce_scatter_",
                        "_reduce_scatter_base_",
                        "reduce_scatter_tensor_coalesced_",
                    ),
                    chakra=(7, 8),  # REDUCE_SCATTER, REDUCE_SCATTER_BLOCK
                    symmetric=True,
                ),
            ),
            nccl_tests=("reduce_scatter", "reducescatter"),
            entry="ReduceScatter",
            call="`reduce_scatter_single` (`reduce_scatter_tensor` before torch 2.13)",
            formula="(n-1)/n",
        ),
        OpSpec(
            op="all_to_all",
            factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            steps=_ring_steps,
            network=_all_to_all_bound,
            traced=(
                Traced(
                    "all_to_all",
                    ("alltoall", "alltoallbase", "alltoallsingle", "alltoallv"),
                    c10d=("alltoall_", "alltoall_base_"),
                    chakra=(6,),
                ),
            ),
            nccl_tests=("alltoall", "all_to_all"),
            entry="AllToAll",
            call="`all_to_all_single`",
            formula="(n-1)/n",
        ),
        # split: sizes round as all_to_all's, so uniform moves exactly all_to_all's traffic;
        # a trace holds it as an all_to_all with its splits
        OpSpec(
            op="all_to_allv",
            factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            skewed=True,
            steps=_ring_steps,
            entry="AllToAllV",
            call="`all_to_all_single` with `input_split_sizes` / `output_split_sizes` from `--skew`",
            formula="(n-1)/n",
        ),
        OpSpec(
            op="broadcast",
            factor=_one,
            split=False,
            reduces=False,
            in_place="always",
            rooted=True,
            steps=_ring_steps,
            network=_ring_bound,
            traced=(
                Traced(
                    "broadcast", ("broadcast",), c10d=("broadcast_",), chakra=(5,), symmetric=True
                ),
            ),
            nccl_tests=("broadcast",),
            entry="Broadcast",
            call="`broadcast`",
            formula="1",
        ),
        OpSpec(
            op="reduce",
            factor=_one,
            split=False,
            reduces=True,
            in_place="always",
            rooted=True,
            steps=_ring_steps,
            network=_ring_bound,
            traced=(Traced("reduce", ("reduce",), c10d=("reduce_",), chakra=(1,), symmetric=True),),
            nccl_tests=("reduce",),
            entry="Reduce",
            call="`reduce`",
            formula="1",
        ),
        OpSpec(
            op="gather",
            factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            rooted=True,
            shard="in",
            steps=_ring_steps,
            network=_rooted_split_bound,
            traced=(Traced("gather", ("gather",), c10d=("gather_",), chakra=(3,)),),
            nccl_tests=("gather",),
            entry="Gather",
            call="`gather`",
            formula="(n-1)/n",
        ),
        OpSpec(
            op="scatter",
            factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            rooted=True,
            shard="out",
            steps=_ring_steps,
            network=_rooted_split_bound,
            traced=(Traced("scatter", ("scatter",), c10d=("scatter_",), chakra=(4,)),),
            nccl_tests=("scatter",),
            entry="Scatter",
            call="`scatter`",
            formula="(n-1)/n",
        ),
        OpSpec(
            op="sendrecv",
            factor=_one,
            split=False,
            reduces=False,
            in_place="never",
            min_ranks=2,
            network=_one_nic_bound,
            traced=(
                Traced("send", ("send", "isend"), c10d=("send",)),
                Traced(
                    "recv", ("recv", "irecv", "recvanysource"), c10d=("recv_", "recv_any_source_")
                ),
            ),
            nccl_tests=("sendrecv",),
            entry="SendRecv",
            call="`isend` to rank+1 and `irecv` from rank-1, batched (`batch_isend_irecv`)",
            formula="1",
        ),
        OpSpec(
            op="barrier",
            factor=None,
            split=False,
            reduces=False,
            in_place="never",
            graph_capturable=False,
            steps=_tree_steps,
            traced=(
                Traced(
                    "barrier",
                    ("barrier", "allreducebarrier", "monitoredbarrier"),
                    c10d=("barrier", "monitored_barrier_"),
                    chakra=(9,),
                    symmetric=True,
                ),
            ),
            entry="Barrier",
            call="`barrier`",
        ),
    )
}
"""Every op, in display order (`--ops all`): the one declaration of each."""

P2P = tuple(t.name for t in OPS["sendrecv"].traced)
"""The traced names of a sendrecv's two halves, send and recv: point-to-point calls, each with
one peer."""


# -- what the other modules derive from `OPS` -----------------------------------------------

_T = TypeVar("_T")
_DERIVED: list[Any] = []


def derived(fn: Callable[[], _T]) -> Callable[[], _T]:
    """A table computed once from `OPS`, and again after `register` changes it."""
    cached = functools.cache(fn)
    _DERIVED.append(cached)
    return cached


def register(spec: OpSpec) -> None:
    """Declare an op at run time (a test's made-up one): every table derived from `OPS`
    (`derived`) sees it from now on."""
    OPS[spec.name] = spec
    for cached in _DERIVED:
        cached.cache_clear()


def unregister(name: str) -> None:
    """Undo `register`."""
    del OPS[name]
    for cached in _DERIVED:
        cached.cache_clear()


@derived
def traced() -> dict[str, tuple[OpSpec, Traced]]:
    """Every traced name, with its op and how it is traced, in `OPS`' order."""
    return {t.name: (spec, t) for spec in OPS.values() for t in spec.traced}
