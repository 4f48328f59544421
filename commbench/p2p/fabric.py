"""The fabric of one machine: what each copy travels over, how fast each part is, and what
copies typically get out of it.

Pure Python over a `TopologySnapshot`; no torch. Each copy is routed over the resources it
uses, each with a theoretical capacity per direction (GB/s, 1e9 B/s; links are full duplex):

* an NVLink copy uses its pair's bonded links (`nvl-pair`), and its GPUs' NVLink ports
  (`nvl-out`, `nvl-in`): on an NVSwitch machine those ports are what concurrent copies split;
* a PCIe peer copy uses the source's PCIe link outbound (`pcie-up`), the destination's inbound
  (`pcie-down`) and, unless both GPUs sit behind one switch (PIX), the switches' uplinks;
* a copy between GPUs without P2P is staged by the driver through host memory: out over the
  source's PCIe link, in over the destination's, across the CPU sockets for SYS pairs;
* pinned host<->device copies use the GPU's PCIe link; a copy within one GPU reads and
  writes its memory, so it moves at most half the memory bandwidth.

The link rates themselves are `topology.rates`' (the one table of NVLink and PCIe speeds);
this module adds what a copy makes of them: the typical efficiency of each kind of path, the
memory bandwidth of a GPU model, and which resources a copy shares with another. What copies
that run together should reach, and the verdict on a measurement, are `expect`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commbench.p2p.plan import Copy
from commbench.topology import rates
from commbench.topology.model import PCIE_LABELS, Pair, TopologySnapshot

# What copies typically reach, as a fraction of the theoretical rate. Rough on purpose: they
# turn a peak into what a user should expect to see, not into a pass mark.
#   NVLink: V100 NV2 pairs copy at 47.9 of 50 GB/s (Dell, "Deep learning on V100" HPC
#   whitepaper, p2pBandwidthLatencyTest); H100 NVSwitch pairs at ~376 of 450 GB/s
#   (NVIDIA/nccl#1264, same test).
NVLINK_EFFICIENCY = 0.9
#   PCIe, pinned host<->device and P2P: ~55 of 63 GB/s on Gen5 x16 H100/H200 (the p2p issue;
#   lukealonso/p2pmark reports 54.3 GB/s P2P), ~12-13 of 15.8 GB/s on Gen3 x16.
PCIE_EFFICIENCY = 0.85
#   Peer copies without P2P, staged through host memory by the driver: 37 of 63 GB/s on
#   H100 Gen5 (NVIDIA/nccl#1264, P2P=Disabled matrix), 22 of 31.5 GB/s on a Gen4 box
#   (NVIDIA/nccl#814).
STAGED_EFFICIENCY = 0.6
#   A large copy within one GPU against half the datasheet memory bandwidth.
MEMORY_EFFICIENCY = 0.8
# More NVLinks than this on one GPU in an imported matrix means switch links, shared by all
# pairs (an H100 has 18; NVML-discovered snapshots list each GPU's links instead).
MAX_NVLINKS_PER_GPU = 18

# Datasheet memory bandwidth (GB/s) by NVML model name; first match wins.
MEMORY_GBPS: tuple[tuple[re.Pattern[str], float], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), gbps)
    for pattern, gbps in (
        (r"\bH200\b", 4800.0),
        (r"\bH100 NVL\b", 3900.0),
        (r"\bH100\b.*PCIe", 2000.0),
        (r"\bH100\b", 3350.0),
        (r"\bA100\b.*80GB.*PCIe", 1935.0),
        (r"\bA100\b.*80GB", 2039.0),
        (r"\bA100\b", 1555.0),
        (r"\bV100S\b", 1134.0),
        (r"\bV100\b", 900.0),
        (r"\bP100\b", 732.0),
        (r"\bL40S\b", 864.0),
        (r"\bL4\b", 300.0),
        (r"\bA40\b", 696.0),
        (r"\bA10\b", 600.0),
        (r"\bT4\b", 320.0),
        (r"RTX 4090", 1008.0),
        (r"RTX 3090", 936.0),
        (r"RTX A6000", 768.0),
    )
)

_PATH_WORDS = {
    "PIX": "through one PCIe switch",
    "PXB": "through several PCIe switches",
    "PHB": "via the CPU host bridge",
    "NODE": "across host bridges",
    "SYS": "across the CPU sockets",
}


def memory_gbps(model: str) -> float | None:
    """Datasheet memory bandwidth of a GPU model, or None when commbench does not know it."""
    for pattern, gbps in MEMORY_GBPS:
        if pattern.search(model):
            return gbps
    return None


@dataclass(kw_only=True, slots=True)
class Resource:
    """Something copies share: a link in one direction, a switch uplink, device memory."""

    name: str
    what: str
    """How a diagnosis names it (`cuda:0's PCIe Gen3 x16 link, outbound`)."""
    capacity: float | None
    """Theoretical GB/s; None when unknown (then it limits nothing, but is still named)."""
    efficiency: float


@dataclass(kw_only=True, slots=True)
class Route:
    """How one copy travels."""

    copy: Copy
    path: str
    """`nvlink`, `pcie` (P2P over PCIe), `staged` (no P2P: through host memory), `host`
    (pinned host memory), `local` (within one GPU) or `unknown`."""
    link: str
    peak_gbps: float | None
    efficiency: float
    resources: tuple[str, ...]
    assumed: bool
    description: str
    nvlinks: int = 0
    """NVLinks between the pair; 0 for a copy that crosses no GPU pair (host, local)."""
    p2p: bool | None = None
    """Whether the pair can copy peer to peer; None for a copy that crosses no GPU pair."""


class Fabric:
    """The resources of one machine and the route of every copy over them."""

    def __init__(self, snapshot: TopologySnapshot) -> None:
        self.snapshot = snapshot
        self.n = len(snapshot.gpus)
        self.resources: dict[str, Resource] = {}
        self._switch = self._pix_groups()

    # -- building blocks -----------------------------------------------------------------

    def _pix_groups(self) -> list[tuple[int, ...] | None]:
        """The GPUs behind one PCIe switch with each GPU (PIX pairs), or None when alone."""
        parent = list(range(self.n))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for p in self.snapshot.pairs:
            if _pcie_label(p) == "PIX":
                parent[find(p.src)] = find(p.dst)
        groups: dict[int, list[int]] = {}
        for i in range(self.n):
            groups.setdefault(find(i), []).append(i)
        return [tuple(groups[find(i)]) if len(groups[find(i)]) > 1 else None for i in range(self.n)]

    def pcie(self, g: int) -> tuple[float, int, int, bool]:
        """(GB/s, generation, width, assumed) of GPU g's PCIe link at its max."""
        gpu = self.snapshot.gpus[g]
        gen, width = gpu.pcie_max_gen, gpu.pcie_max_width
        gbps = rates.pcie_gbps(gen, width)
        if gbps is None or gen is None or width is None:
            gen, width = rates.PCIE_ASSUMED_GEN, rates.PCIE_ASSUMED_WIDTH
            gbps = rates.pcie_gbps(gen, width)
            assert gbps is not None
            return gbps, gen, width, True
        return gbps, gen, width, False

    def _pcie_words(self, *gpus: int) -> tuple[float, str, bool]:
        """The slower link of `gpus`: (GB/s, `PCIe Gen3 x16`, assumed)."""
        links = [self.pcie(g) for g in gpus]
        gen, width = min(x[1] for x in links), min(x[2] for x in links)
        gbps = rates.pcie_gbps(gen, width) or min(x[0] for x in links)
        assumed = any(x[3] for x in links)
        what = f"PCIe Gen{gen} x{width}" + (" (assumed: generation/width unknown)" * assumed)
        return gbps, what, assumed

    def _add(self, name: str, what: str, capacity: float | None, efficiency: float) -> str:
        if name not in self.resources:
            self.resources[name] = Resource(
                name=name, what=what, capacity=capacity, efficiency=efficiency
            )
        return name

    def _pcie_link(self, g: int, outbound: bool) -> str:
        gbps, gen, width, assumed = self.pcie(g)
        way = "outbound" if outbound else "inbound"
        size = "link" if not assumed else f"link (assumed Gen{gen} x{width})"
        return self._add(
            f"pcie-{'up' if outbound else 'down'}:{g}",
            f"cuda:{g}'s PCIe Gen{gen} x{width} {size}, {way}",
            gbps,
            PCIE_EFFICIENCY,
        )

    def _switch_uplink(self, g: int, outbound: bool) -> list[str]:
        group = self._switch[g]
        if group is None:
            return []
        # The switch's own uplink is not in NVML: take it as wide as its widest GPU link.
        gbps = max(self.pcie(m)[0] for m in group)
        members = " and ".join(f"cuda:{m}" for m in group)
        way = "outbound" if outbound else "inbound"
        key = "+".join(map(str, group))
        return [
            self._add(
                f"switch-{'up' if outbound else 'down'}:{key}",
                f"the uplink of the PCIe switch under {members}, {way}",
                gbps,
                PCIE_EFFICIENCY,
            )
        ]

    def _sockets(self, a: int, b: int) -> str:
        na, nb = self.snapshot.gpus[a].numa_node, self.snapshot.gpus[b].numa_node
        if na is not None and nb is not None and na != nb:
            return self._add(
                f"sockets:{na}>{nb}",
                f"the inter-socket link from NUMA node {na} to {nb}",
                None,
                1.0,
            )
        return self._add(f"sockets:{a}>{b}", "the inter-socket link", None, 1.0)

    def _nvlink_ports(self, g: int) -> float | None:
        """GB/s GPU g's NVLinks carry in one direction, when that can bind a copy."""
        peers = [
            p
            for p in self.snapshot.pairs
            if p.src == g and p.nvlinks > 0 and p.peak_gbps and p.p2p is not False
        ]
        if not peers:
            return None
        per_link = max((p.peak_gbps or 0.0) / p.nvlinks for p in peers)
        gpu = self.snapshot.gpus[g]
        if gpu.nvlinks:
            return gpu.active_nvlinks * per_link
        if sum(p.nvlinks for p in peers) > MAX_NVLINKS_PER_GPU:
            return max(p.nvlinks for p in peers) * per_link  # switch links, shared by all
        return None  # direct links only: the pairs' own links bound each copy

    def _nvlink_port(self, g: int, outbound: bool) -> list[str]:
        gbps = self._nvlink_ports(g)
        if gbps is None:
            return []
        way = "outbound" if outbound else "inbound"
        return [
            self._add(
                f"nvl-{'out' if outbound else 'in'}:{g}",
                f"cuda:{g}'s NVLinks, {way}",
                gbps,
                NVLINK_EFFICIENCY,
            )
        ]

    # -- routes --------------------------------------------------------------------------

    def route(self, copy: Copy) -> Route:
        if copy.kind == "p2p":
            assert copy.src is not None and copy.dst is not None
            return self._peer(copy, self.snapshot.pair(copy.src, copy.dst))
        if copy.kind == "d2d":
            return self._local(copy)
        return self._host(copy)

    def _peer(self, copy: Copy, pair: Pair) -> Route:
        a, b = pair.src, pair.dst
        label = _pcie_label(pair)
        common = {
            "copy": copy,
            "link": pair.link,
            "nvlinks": pair.nvlinks,
            "p2p": pair.p2p,
            "peak_gbps": pair.peak_gbps,
            "assumed": pair.peak_assumed,
        }
        if pair.nvlinks > 0 and pair.p2p is not False:
            res = (
                self._add(
                    f"nvl-pair:{a}>{b}",
                    f"the {pair.link} links from cuda:{a} to cuda:{b}",
                    pair.peak_gbps,
                    NVLINK_EFFICIENCY,
                ),
                *self._nvlink_port(a, True),
                *self._nvlink_port(b, False),
            )
            return Route(
                path="nvlink",
                efficiency=NVLINK_EFFICIENCY,
                resources=res,
                description=f"{pair.link}: {pair.note}" if pair.note else pair.link,
                **common,  # type: ignore[arg-type]
            )
        if label is None:
            return Route(
                path="unknown",
                efficiency=1.0,
                resources=(),
                description="how the two GPUs connect is unknown: no peak",
                **common,  # type: ignore[arg-type]
            )
        _, pcie_what, _ = self._pcie_words(a, b)
        path_words = _PATH_WORDS.get(label, "")
        names = [self._pcie_link(a, True), self._pcie_link(b, False)]
        staged = pair.p2p is False
        if staged or self._switch[a] is None or self._switch[a] != self._switch[b]:
            names += self._switch_uplink(a, True) + self._switch_uplink(b, False)
        if label == "SYS":
            names.append(self._sockets(a, b))
        if staged:
            why = f" ({pair.p2p_status})" if pair.p2p_status else ""
            across = ", across the CPU sockets" if label == "SYS" else ""
            desc = (
                f"P2P not supported between {a} and {b}{why}: staged through host memory, "
                f"bounded by {pcie_what}{across}; such copies typically reach "
                f"~{STAGED_EFFICIENCY:.0%} of it"
            )
            return Route(
                path="staged",
                efficiency=STAGED_EFFICIENCY,
                resources=tuple(names),
                description=desc,
                **common,  # type: ignore[arg-type]
            )
        if pair.p2p is None:
            desc = f"P2P status unknown: assumed to work over {pcie_what} {path_words}".rstrip()
        else:
            desc = f"P2P over {pcie_what} {path_words}".rstrip()
        return Route(
            path="pcie",
            efficiency=PCIE_EFFICIENCY,
            resources=tuple(names),
            description=desc,
            **common,  # type: ignore[arg-type]
        )

    def _local(self, copy: Copy) -> Route:
        g = copy.device
        gpu = self.snapshot.gpus[g]
        bw = memory_gbps(gpu.name)
        peak = None if bw is None else bw / 2
        res = self._add(f"mem:{g}", f"cuda:{g}'s device memory", peak, MEMORY_EFFICIENCY)
        if bw is None:
            desc = (
                f"within cuda:{g}: bounded by device memory, whose bandwidth commbench does "
                f"not know for {gpu.name}"
            )
        else:
            desc = (
                f"within cuda:{g}: every byte is read and written in device memory "
                f"({gpu.name}: {bw:g} GB/s), so a copy moves at most {peak:g} GB/s"
            )
        return Route(
            copy=copy,
            path="local",
            link="local",
            peak_gbps=peak,
            efficiency=MEMORY_EFFICIENCY,
            resources=(res,),
            assumed=False,
            description=desc,
        )

    def _host(self, copy: Copy) -> Route:
        g = copy.device
        outbound = copy.kind == "d2h"
        gbps, what, assumed = self._pcie_words(g)
        names = (self._pcie_link(g, outbound), *self._switch_uplink(g, outbound))
        way = f"cuda:{g} to pinned host memory" if outbound else f"pinned host memory to cuda:{g}"
        return Route(
            copy=copy,
            path="host",
            link="PCIe",
            peak_gbps=gbps,
            efficiency=PCIE_EFFICIENCY,
            resources=names,
            assumed=assumed,
            description=f"{way} over its {what} link",
        )


def _pcie_label(pair: Pair) -> str | None:
    if pair.pcie_path in PCIE_LABELS:
        return pair.pcie_path
    return pair.link if pair.link in PCIE_LABELS else None
