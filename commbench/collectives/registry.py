"""Every collective commbench measures, by (op, strategy): the entries built from the ops'
declarations.

An op is one `OpSpec` in `commbench.ops.OPS`, whose `entry` names the `Collective` that
allocates, issues and checks it (in `ops.py`, or anywhere as `module:Class`): the entry is
built here from it, so nothing else lists it. An all-reduce strategy goes into
`specs.STRATEGIES` and `allreduce.py`, and is listed here. The worker, the probe and the
replay run whatever entry a sweep point or a traced call names.
"""

from __future__ import annotations

import importlib

from commbench.collectives import ops as _ops
from commbench.collectives.allreduce import (
    Direct,
    ReduceBroadcast,
    ReduceScatterAllGather,
    Ring,
    RingNaive,
)
from commbench.collectives.ops import Collective
from commbench.collectives.specs import OPS, STRATEGIES, OpSpec


def entry_of(spec: OpSpec) -> Collective:
    """The `Collective` an op's declaration names (`OpSpec.entry`), built with it."""
    module, _, name = spec.entry.rpartition(":")
    where = importlib.import_module(module) if module else _ops
    cls = getattr(where, name, None) if name else None
    if not (isinstance(cls, type) and issubclass(cls, Collective)):
        raise LookupError(
            f"op {spec.name!r}: its OpSpec's entry {spec.entry!r} is no Collective class of "
            f"{where.__name__}: define it there, or name one that is"
        )
    return cls(spec)


COLLECTIVES: dict[tuple[str, str], Collective] = {
    entry.spec.key: entry
    for entry in (
        *(entry_of(spec) for spec in OPS.values()),
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
    key = (op, strategy)
    if key not in COLLECTIVES and not strategy and op in OPS:  # declared since (`register`)
        COLLECTIVES[key] = entry_of(OPS[op])
    if key not in COLLECTIVES:
        what = f"strategy {strategy!r} of {op}" if strategy else f"op {op!r}"
        raise LookupError(
            f"no collective for {what}: commbench/ops.py's OPS declares "
            f"{', '.join(OPS)}; collectives/specs.py's STRATEGIES {', '.join(STRATEGIES)}"
        )
    return COLLECTIVES[key]


def selected(ops: list[str], strategies: list[str]) -> list[Collective]:
    """The entries `--ops` and `--strategies` name, in that order."""
    specs = [OPS[name] for name in ops] + [STRATEGIES[name] for name in strategies]
    return [collective(*spec.key) for spec in specs]
