"""Every collective commbench measures, by (op, strategy): the one place an entry is listed.

To add an op: give it an `OpSpec` in `specs.OPS` (what the CLI and the rows know) and a
`Collective` in `ops.py` (buffers, call, expected result), then list it here. An all-reduce
strategy likewise goes into `specs.STRATEGIES` and `allreduce.py`. Nothing else changes:
the worker and the probe run whatever entry a sweep point names.
"""

from __future__ import annotations

from commbench.collectives.allreduce import (
    Direct,
    ReduceBroadcast,
    ReduceScatterAllGather,
    Ring,
    RingNaive,
)
from commbench.collectives.ops import (
    AllGather,
    AllReduce,
    AllToAll,
    AllToAllV,
    Barrier,
    Broadcast,
    Collective,
    Gather,
    Reduce,
    ReduceScatter,
    Scatter,
    SendRecv,
)
from commbench.collectives.specs import OPS, STRATEGIES

COLLECTIVES: dict[tuple[str, str], Collective] = {
    entry.spec.key: entry
    for entry in (
        AllReduce(),
        AllGather(),
        ReduceScatter(),
        AllToAll(),
        AllToAllV(),
        Broadcast(),
        Reduce(),
        Gather(),
        Scatter(),
        SendRecv(),
        Barrier(),
        Direct(),
        ReduceBroadcast(),
        ReduceScatterAllGather(),
        Ring(),
        RingNaive(),
    )
}
"""Each entry by its spec's key: (op, '') for an op, ('all_reduce', name) for a strategy.
An op that takes a skew is listed with uniform splits; `Collective.for_skew` gives it others."""


def collective(op: str, strategy: str = "") -> Collective:
    """The entry measuring `op` (with `strategy`, one way to do it), as a sweep point names it."""
    return COLLECTIVES[(op, strategy)]


def selected(ops: list[str], strategies: list[str]) -> list[Collective]:
    """The entries `--ops` and `--strategies` name, in that order."""
    specs = [OPS[name] for name in ops] + [STRATEGIES[name] for name in strategies]
    return [COLLECTIVES[spec.key] for spec in specs]
