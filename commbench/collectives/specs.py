"""The all-reduce strategies, the op names' parsers and the size each op really moves: the
torch-free facts the CLI and the settings check names and sizes against without importing
torch. Each op's own declaration is its `OpSpec` in `commbench.ops` (re-exported here, as
`OPS`); each strategy is an `OpSpec` too, the all_reduce's with a name (`STRATEGIES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from commbench.errors import UserError
from commbench.lists import split_list
from commbench.ops import NOT_MEASURED_ONE_RANK, OPS, OpSpec
from commbench.results.names import DTYPES, REDUCE_OPS

__all__ = [
    "DTYPES",
    "NOT_MEASURED_ONE_RANK",
    "OPS",
    "REDUCE_OPS",
    "STRATEGIES",
    "OpSpec",
]  # the ops live in `commbench.ops`, the names in `results.names`


def _strategy(name: str, short: str, *, nccl: str, gloo: str) -> OpSpec:
    """all_reduce's spec under a strategy's name: its entry is in `collectives.allreduce`,
    and no trace or other tool names it."""
    return replace(
        OPS["all_reduce"],
        strategy=name,
        short=short,
        counts={"nccl": nccl, "gloo": gloo},
        traced=(),
        nccl_tests=(),
        entry="",
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
    return _parse_names(text, "--ops", OPS, "op", ", ".join(OPS))


def parse_strategies(text: str) -> list[str]:
    """`ring,direct` or `all` -> strategy names (display order for `all`, else as given)."""
    return _parse_names(
        text, "--strategies", STRATEGIES, "strategy", f"all, {', '.join(STRATEGIES)}"
    )


def _parse_names(
    text: str, flag: str, table: Mapping[str, OpSpec], what: str, choices: str
) -> list[str]:
    """A comma list of `table`'s names, or `all` (the table's order), each named once."""
    names = split_list(text, flag, max_items=4 * len(table))
    if names == ["all"]:
        return list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise UserError(f"unknown {what} {unknown[0]!r}; choose from: {choices}")
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
