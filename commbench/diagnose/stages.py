"""The stages of a diagnosis over a cluster's layout: which ranks each test runs on.

Torch-free, shared by the workers (which run the stages) and the launcher (which replays
them on the recorded results to reach the same verdict), so both read the cluster alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from commbench.diagnose.journal import GPU_PAIRS, INTER, INTRA
from commbench.diagnose.plan import Isolation, Test, for_units, round_robin
from commbench.diagnose.settings import DiagnoseSettings
from commbench.fields import Fields, integer, string


@dataclass(frozen=True, slots=True)
class Layout:
    """The nodes of a run: each node's host and its global ranks by local rank."""

    hosts: list[str]
    ranks: list[list[int]]
    addresses: list[str | None] | None = None
    """The address each node's ranks are reached at (what a peer's error names)."""
    cpu: bool = False
    """The ranks run on CPU cores, not GPUs: a unit inside a node is a rank."""

    @classmethod
    def from_ranks(cls, ranks: Sequence[dict[str, Any]]) -> Layout:
        """From the workers' rank table (`RunContext.ranks`: rank, local_rank, host, node,
        address; a rank without a node is on the first)."""
        table = [Fields(r, f"ranks[{i}]") for i, r in enumerate(ranks)]
        node_of = [f.opt("node", integer) or 0 for f in table]
        index = {n: i for i, n in enumerate(sorted(set(node_of)))}
        hosts = [""] * len(index)
        addresses: list[str | None] = [None] * len(index)
        members: list[list[tuple[int, int]]] = [[] for _ in index]
        devices = {f.opt("device", string) for f in table}
        for f, node in zip(table, node_of):
            i = index[node]
            hosts[i] = f.opt("host", string) or ""
            addresses[i] = addresses[i] or f.opt("address", string) or None
            members[i].append((f.opt("local_rank", integer) or 0, f.req("rank", integer)))
        return cls(
            hosts=hosts,
            ranks=[[rank for _, rank in sorted(m)] for m in members],
            addresses=addresses,
            cpu=devices == {"cpu"},
        )

    def gpu_name(self, unit: int) -> str:
        """A unit of the pairs inside nodes (node * gpus_per_node + local index), as a person
        reads it: `n2 GPU 3`, or `n2 rank 11` (its global rank) for a rank on CPU cores,
        which no one would look for among the GPUs."""
        g = self.gpus_per_node
        node, local = divmod(unit, g)
        if self.cpu:
            return f"{self.hosts[node]} rank {self.ranks[node][local]}"
        return f"{self.hosts[node]} GPU {local}"

    @property
    def gpus_per_node(self) -> int:
        return min((len(r) for r in self.ranks), default=0)


@dataclass(slots=True)
class Stage:
    name: str
    iso: Isolation
    ranks_of: Callable[[Test], list[int]]
    """The global ranks a test runs on."""
    unit_name: Callable[[int], str]
    """A unit as a person reads it: a host, or a host's GPU."""
    node_of: Callable[[int], int]
    """The node a unit belongs to."""


def plan_stages(layout: Layout, settings: DiagnoseSettings) -> list[Stage]:
    """The stages to run, in order: inside every node at once, then across nodes."""
    stages: list[Stage] = []
    nodes = range(len(layout.hosts))
    g = layout.gpus_per_node
    expected = settings.expected_gbps
    common: dict[str, Any] = {
        "tolerance": settings.tolerance,
        "alpha": settings.alpha,
        "max_rounds": settings.max_rounds,
    }
    if "intra" in settings.stages and g >= 2:
        stages.append(
            Stage(
                INTRA,
                Isolation(nodes, mode="singles", expected=expected.get(INTRA), **common),
                lambda t: [r for n in t.units for r in layout.ranks[n]],
                lambda u: layout.hosts[u],
                lambda u: u,
            )
        )
    if "intra" in settings.stages and g >= 3:
        # the same pairs of local GPUs on every node at once: a unit is node * g + gpu
        rounds = [
            [(n * g + a, n * g + b) for n in nodes for a, b in pairs]
            for pairs in round_robin(range(g))
        ]
        stages.append(
            Stage(
                GPU_PAIRS,
                Isolation(
                    [n * g + i for n in nodes for i in range(g)],
                    mode="pairs",
                    pair_rounds=rounds,
                    expected=expected.get(GPU_PAIRS),
                    **common,
                ),
                lambda t: [layout.ranks[u // g][u % g] for u in t.units],
                layout.gpu_name,
                lambda u: u // g,
            )
        )
    if "inter" in settings.stages and len(layout.hosts) >= 2:
        stages.append(
            Stage(
                INTER,
                for_units(nodes, group=settings.group, expected=expected.get(INTER), **common),
                lambda t: [r for n in t.units for r in layout.ranks[n]],
                lambda u: layout.hosts[u],
                lambda u: u,
            )
        )
    return stages
