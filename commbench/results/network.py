"""Inter-node numbers explained: each op's busbw against what the nodes' NICs can carry.

A run over more than one node is bounded by the network, and a busbw means little until it is
set against the NICs' line rate. The bound is the fewest bytes one node must push through its
NICs per call, over the node's usable NIC rate B (bytes/s, all usable NICs together):

- ring-style ops (all_reduce, all_gather, reduce_scatter, broadcast, reduce): NCCL runs one
  ring (or tree channel) per NIC, each crossing the node boundary once, and a ring's busbw is
  the bandwidth of its slowest hop, so the node's busbw is bounded by B itself, not by the
  per-GPU share B / G. Two DGX A100 (8 x 200 Gb/s HDR, B = 200 GB/s) measure all_reduce busbw
  around 185 GB/s. Reading busbw against B / G ("41 GB/s = 82% of a 400 Gb/s NIC") would call
  a run at 20% of the fabric healthy.
- all_to_all: each rank sends (W - G) / W of its buffer off-node, so a node of G ranks pushes
  G (W - G) / W bytes per byte of S: busbw <= B (W - 1) / (G (W - G)).
- gather / scatter: the root's node receives (or sends) the (W - G) off-node slices of S:
  busbw <= B (W - 1) / (W - G).
- sendrecv (each rank to the next): one rank per node sends off-node, through one NIC (NCCL
  takes the GPU's nearest, gloo its one interface), so its busbw is bounded by the fastest
  usable NIC's rate, B / N for N equal NICs: 50 GB/s on an 8 x 400 Gb/s node, the whole 12.5
  GB/s of a node with one 100 GbE port, however many ranks share that node.

Usable NICs are those up, not virtual, with a known rate, restricted to NCCL_IB_HCA /
NCCL_SOCKET_IFNAME (nccl) or GLOO_SOCKET_IFNAME (gloo) when the run set them. Every node's
workers send their NICs to the record's writer, and the bound is the slowest node's (a node
with a port down bounds the whole ring); a node that sent none is assumed like the writer's.
A rate the kernel does not report is said to be unknown, never guessed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from commbench.ops import OPS
from commbench.results.record import RunContext
from commbench.results.schema import ResultRow
from commbench.results.summary import bandwidth_bound, busbw_of, series_key, series_peaks
from commbench.sizes import format_size
from commbench.topology.model import Nic

ABOVE_LINE_RATE = (
    "above the NICs' line rate: traffic stayed inside NVLink domains, or the peak is wrong"
)
UNKNOWN_RATE = "network rate unknown (veth/virtio report no speed)"
_RDMA_KINDS = ("infiniband", "roce")


@dataclass(frozen=True, slots=True)
class NetworkPeak:
    """The usable NICs of one node and what they add up to."""

    nics: tuple[Nic, ...]
    """The NICs counted (up, not virtual, known rate, named by the run's env if it did)."""
    assumptions: tuple[str, ...] = ()
    """What the figure rests on (nodes alike, gloo's single interface, ...)."""
    unknown: str | None = None
    """Why there is no figure; None when there is one."""

    @property
    def node_gbps(self) -> float:
        """All usable NICs together, GB/s (bytes) per direction."""
        return sum(n.speed_gbps or 0.0 for n in self.nics) / 8

    @property
    def nic_gbps(self) -> float:
        """The fastest usable NIC alone, GB/s: what one rank's point-to-point traffic gets."""
        return max((n.speed_gbps or 0.0 for n in self.nics), default=0.0) / 8

    def describe(self) -> str:
        """`8 x 400 Gb/s` (or `8 x 400 Gb/s + 1 x 100 Gb/s`)."""
        counts = Counter(n.speed_gbps for n in self.nics)
        return " + ".join(
            f"{c} x {rate:g} Gb/s" for rate, c in sorted(counts.items(), reverse=True)
        )


def _named(nic: Nic) -> list[str]:
    return [nic.name, *(nic.netdev or "").split(",")]


def _nccl_list(spec: str, names: list[str]) -> bool:
    """NCCL's interface-list syntax: `^` excludes, `=` matches exactly, else prefixes; an
    HCA entry may end in `:port`."""
    exclude = spec.startswith("^")
    body = spec.lstrip("^")
    exact = body.startswith("=")
    entries = [e.split(":")[0].strip() for e in body.lstrip("=").split(",") if e.strip()]
    hit = any((n == e) if exact else n.startswith(e) for e in entries for n in names if n)
    return hit != exclude


def usable_nics(
    nics: Sequence[Nic], env: Mapping[str, object], backend: str | None
) -> tuple[list[Nic], list[str]]:
    """The NICs the run's traffic could use, and what that choice assumed."""
    up = [n for n in nics if not n.virtual and n.state == "up" and n.kind != "loopback"]
    notes: list[str] = []
    if backend == "gloo":
        spec = str(env.get("GLOO_SOCKET_IFNAME") or "")
        if spec:
            wanted = {s.strip() for s in spec.split(",") if s.strip()}
            return [n for n in up if wanted & set(_named(n))], notes
        known = [n for n in up if n.speed_gbps is not None]
        best = max(known, key=lambda n: n.speed_gbps or 0.0, default=None)
        notes.append("gloo uses one interface (GLOO_SOCKET_IFNAME unset: assumed the fastest)")
        return ([best] if best is not None else up[:1]), notes
    rdma = [n for n in up if n.kind in _RDMA_KINDS]
    if rdma and str(env.get("NCCL_IB_DISABLE", "0")) != "1":
        hca = str(env.get("NCCL_IB_HCA") or "")
        return ([n for n in rdma if _nccl_list(hca, [n.name])] if hca else rdma), notes
    ifname = str(env.get("NCCL_SOCKET_IFNAME") or "")
    plain = [n for n in up if n.kind not in _RDMA_KINDS] or up
    return ([n for n in plain if _nccl_list(ifname, _named(n))] if ifname else plain), notes


def network_peak(context: RunContext) -> NetworkPeak | None:
    """The usable NIC rate of a multi-node run's slowest node; None for a single-node one.

    The run's own node is read from its topology snapshot, the others from the NICs their
    workers sent (`context.health.nodes[].nics`); a node that sent none is assumed like the
    record's own, and the assumption is said."""
    if (context.nnodes or 1) <= 1:
        return None
    snapshot = context.topology
    if snapshot is None:
        return NetworkPeak(nics=(), unknown="network rate unknown (the run has no topology)")
    chosen, notes = usable_nics(snapshot.nics, context.env, context.backend)
    others = [n for n in (context.health.nodes if context.health else []) if n.nics is not None]
    own_gbps = _known_gbps(chosen)
    slowest = None
    if own_gbps is not None:  # an unknown rate here says unknown whatever the others have
        rated = []
        for node in others:
            theirs, _ = usable_nics(node.nics or [], context.env, context.backend)
            gbps = _known_gbps(theirs)
            rated.append((-1.0 if gbps is None else gbps, node.node, node, theirs))
        low = min(rated, key=lambda r: (r[0], r[1]), default=None)
        if low is not None and low[0] < own_gbps:
            slowest = (low[2], low[3])
    unrecorded = (context.nnodes or 1) - 1 - len(others)
    if unrecorded > 0:
        notes.append(
            f"{unrecorded} of {context.nnodes} nodes assumed like this one (their NICs were not "
            "recorded)"
        )
    where = ""
    if slowest is not None:
        node, theirs = slowest
        name = node.host or f"node {node.node}"
        where = f" on {name}"
        mine = NetworkPeak(nics=tuple(chosen)).describe() or "none"
        notes.append(f"the slowest node's NICs ({name}; this node has {mine})")
        chosen = theirs
    if not chosen:
        return NetworkPeak(
            nics=(), assumptions=tuple(notes), unknown=f"no usable NIC recorded{where}"
        )
    if any(n.speed_gbps is None for n in chosen):
        names = ", ".join(n.name for n in chosen if n.speed_gbps is None)
        return NetworkPeak(
            nics=tuple(chosen),
            assumptions=tuple(notes),
            unknown=f"{UNKNOWN_RATE}: {names}{where}",
        )
    return NetworkPeak(nics=tuple(chosen), assumptions=tuple(notes))


def _percent(value: float) -> str:
    """`82%`, but `<1%` where rounding would print a 0% that reads as nothing moved."""
    return "<1%" if 0 < value < 0.5 else f"{value:.0f}%"


def _gbps(value: float) -> str:
    """12.5, 400.0, but 0.125 (a 1 GbE port), never 0.1."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _known_gbps(nics: Sequence[Nic]) -> float | None:
    """Their rates together (Gb/s), or None if there are none or one is unknown."""
    if not nics or any(n.speed_gbps is None for n in nics):
        return None
    return sum(n.speed_gbps or 0.0 for n in nics)


def busbw_bound(
    op: str, world: int, nnodes: int, node_gbps: float, nic_gbps: float | None = None
) -> float | None:
    """The most busbw (GB/s) the network allows `op` over `world` ranks on `nnodes` nodes,
    whose usable NICs carry `node_gbps` together and `nic_gbps` the fastest alone (default:
    all of it); None for an op that moves no data or ranks that all fit on one node."""
    per_node = math.ceil(world / nnodes)
    off = world - per_node
    if off <= 0:
        return None
    spec = OPS.get(op)  # the op's own bound (`commbench.ops.OpSpec.network`)
    if spec is None or spec.network is None:
        return None
    return spec.network(world, per_node, node_gbps, nic_gbps)


@dataclass(frozen=True, slots=True)
class NetPoint:
    """One bandwidth-bound point set against the network bound."""

    row: ResultRow
    bound_gbps: float
    percent: float

    def line(self, peak: NetworkPeak) -> str:
        r = self.row
        head = (
            f"{r.op}{' ' + r.strategy if r.strategy else ''} {format_size(r.size_bytes)}: "
            f"busbw {r.busbw_gbps:.3g} GB/s = {_percent(self.percent)} of "
        )
        if math.isclose(self.bound_gbps, peak.node_gbps):
            head += peak.describe()
        else:  # the percentage is of the op's own bound, never of the NICs' total
            head += f"{self.bound_gbps:.3g} GB/s ({r.op}'s bound on {peak.describe()})"
        return head + (f"; {ABOVE_LINE_RATE}" if self.percent > 100 else "")


def net_points(rows: Sequence[ResultRow], context: RunContext) -> list[NetPoint]:
    """Every bandwidth-bound point (busbw at least half its series' peak, the summary's and the
    gate's rule) against its bound; empty unless multi-node with a known rate. Latency-bound
    points are left out: a 1 KiB all_reduce at 0.1% of the fabric says nothing about it."""
    peak = network_peak(context)
    if peak is None or peak.unknown is not None or peak.node_gbps <= 0:
        return []
    peaks = series_peaks(r for r in rows if r.size_bytes > 0)
    points = []
    for r in rows:
        busbw = busbw_of(r)
        if r.size_bytes <= 0 or not bandwidth_bound(busbw, peaks.get(series_key(r), 0.0)):
            continue
        assert busbw is not None
        bound = busbw_bound(r.op, r.world_size, context.nnodes or 1, peak.node_gbps, peak.nic_gbps)
        if bound:
            points.append(NetPoint(row=r, bound_gbps=bound, percent=100 * busbw / bound))
    return points


def network_lines(
    rows: Sequence[ResultRow], context: RunContext, *, every_point: bool = False
) -> list[str]:
    """The network note of a multi-node run: the peak, then one line per op (and strategy)
    for its best point, or with `every_point` (the report) one per bandwidth-bound point;
    empty for a single-node run."""
    peak = network_peak(context)
    if peak is None:
        return []
    if peak.unknown is not None:
        return [f"network: {peak.unknown}"]
    lines = [
        f"network peak: {peak.describe()} per node = {_gbps(peak.node_gbps)} GB/s "
        f"({', '.join(n.name for n in peak.nics)}; {'; '.join(peak.assumptions)})"
    ]
    points = net_points(rows, context)
    if every_point:
        return lines + [p.line(peak) for p in points]
    best: dict[tuple[str, str], NetPoint] = {}
    for p in points:
        key = (p.row.op, p.row.strategy)
        if key not in best or p.percent > best[key].percent:
            best[key] = p
    lines += [p.line(peak) for p in best.values()]
    return lines
