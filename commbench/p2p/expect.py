"""What each copy should reach, and why: the topology's verdict for a set of concurrent copies.

Pure Python over a `TopologySnapshot`; no torch. `fabric` routes each copy over the resources
it uses (links in one direction, switch uplinks, device memory), each with a theoretical
capacity and a typical efficiency. Copies that run at once share what they have in common,
max-min fairly, and a copy that finishes early frees its share for the others (`_fluid`).
The result, per copy: `peak_gbps` (alone, theoretical), `ceiling_gbps` (in this set,
theoretical), `expected_gbps` (what such copies typically reach: the ceiling with each
resource at its typical efficiency) and a one-line diagnosis. `judge()` holds a measurement
against them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from commbench.p2p.fabric import Fabric, Resource, Route
from commbench.p2p.plan import Step
from commbench.topology.model import TopologySnapshot

# A measurement under this fraction of what was expected is called slow.
SLOW_FRACTION = 0.5


@dataclass(kw_only=True, slots=True)
class Expectation:
    """The topology's verdict for one copy of a step, or for the step's copies together."""

    pair: str
    """`0->1`, `host->0`, ...; for the total of a step `0->{1,2,4}` or `0<->1`."""
    copy: str
    """`p2p`, `d2d`, `h2d`, `d2h`, or `total`."""
    src: int | None
    dst: int | None
    path: str
    link: str
    nvlinks: int
    p2p: bool | None
    peak_gbps: float | None
    """Theoretical GB/s of this copy alone (for a total: the sum of its copies' peaks)."""
    ceiling_gbps: float | None
    """Theoretical GB/s in this step, after sharing with the copies that run at once."""
    expected_gbps: float | None
    """What such a copy typically reaches in this step."""
    expected_ms: float | None
    """Time of one copy at `expected_gbps` (for a total: until the last copy ends)."""
    shared_with: list[str] = field(default_factory=list)
    """Copies it shares its bottleneck with."""
    bottleneck: str = ""
    assumed: bool = False
    """Some rate behind the figures was assumed, not known."""
    diagnosis: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True, slots=True)
class StepExpectation:
    step: Step
    copies: list[Expectation]
    total: Expectation | None
    """For steps of several copies: all of them together."""


def _fmt(gbps: float) -> str:
    return f"{gbps:.1f} GB/s"


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


# --- sharing ---------------------------------------------------------------------------------


def _share(
    flows: dict[int, tuple[Sequence[str], float | None]], caps: dict[str, float | None]
) -> dict[int, tuple[float | None, str]]:
    """Max-min fair rates (progressive filling): rate and what set it ('' = the copy's own cap).

    A flow bounded by nothing known gets None.
    """
    remaining = {
        r: c for r, c in caps.items() if c is not None and any(r in f for f, _ in flows.values())
    }
    active = set(flows)
    out: dict[int, tuple[float | None, str]] = {}
    while active:
        best: tuple[float, str, list[int]] | None = None
        for r, cap in remaining.items():
            users = sorted(f for f in active if r in flows[f][0])
            if users:
                share = max(cap, 0.0) / len(users)
                if best is None or share < best[0] * (1 - 1e-12):
                    best = (share, r, users)
        for f in sorted(active):
            own = flows[f][1]
            if own is not None and (best is None or own < best[0] * (1 - 1e-12)):
                best = (own, "", [f])
        if best is None:
            out.update({f: (None, "") for f in active})
            break
        share, name, users = best
        for f in users:
            out[f] = (share, name)
            active.discard(f)
            for r in flows[f][0]:
                if r in remaining:
                    remaining[r] -= share
    return out


# A copy that the links would finish faster than this is dominated by its fixed cost, which
# the bandwidth model leaves out (a cudaMemcpyAsync between GPUs costs microseconds however
# small): the bandwidth figures then are bounds, not expectations.
LATENCY_BOUND_S = 20e-6


def _fluid(
    routes: list[Route],
    size: int,
    caps: dict[str, float | None],
    owns: list[float | None],
) -> tuple[list[float | None], dict[int, tuple[float | None, str]]]:
    """Finish time (s) of each copy when all start at once, and the first allocation."""
    left = {i: float(size) for i in range(len(routes))}
    finish: list[float | None] = [None] * len(routes)
    first: dict[int, tuple[float | None, str]] | None = None
    t = 0.0
    while left:
        rates_now = _share({i: (routes[i].resources, owns[i]) for i in left}, caps)
        if first is None:
            first = rates_now
        moving = {i: r for i, (r, _) in rates_now.items() if r is not None and r > 0}
        for i in set(left) - set(moving):
            del left[i]  # unbounded or zero: no finite figure
        if not moving:
            break
        dt = min(left[i] / (moving[i] * 1e9) for i in moving)
        t += dt
        for i, r in moving.items():
            left[i] -= r * 1e9 * dt
            if left[i] <= size * 1e-9:
                finish[i] = t
                del left[i]
    return finish, first or {}


def _gbps(size: int, seconds: float | None) -> float | None:
    return None if not seconds else size / seconds / 1e9


def expect_step(
    snapshot: TopologySnapshot, step: Step, fabric: Fabric | None = None
) -> StepExpectation:
    """The verdict for every copy of `step`, and for the copies together."""
    fabric = fabric or Fabric(snapshot)
    routes = [fabric.route(c) for c in step.copies]
    res = fabric.resources
    peak_caps = {name: r.capacity for name, r in res.items()}
    # A resource typically delivers its efficiency, or less when a copy through it cannot do
    # better (three copies staged through host memory share ~60% of the link, not ~85%)
    typ_caps = {
        name: None
        if r.capacity is None
        else r.capacity
        * min([r.efficiency, *(rt.efficiency for rt in routes if name in rt.resources)])
        for name, r in res.items()
    }
    own_peak = [r.peak_gbps for r in routes]
    own_typ = [None if r.peak_gbps is None else r.peak_gbps * r.efficiency for r in routes]
    size = step.size_bytes
    t_peak, first = _fluid(routes, size, peak_caps, own_peak)
    t_typ, _ = _fluid(routes, size, typ_caps, own_typ)
    together = len(routes) > 1
    out: list[Expectation] = []
    for i, route in enumerate(routes):
        ceiling = _gbps(size, t_peak[i])
        parts = [route.description]
        shared: list[str] = []
        bottleneck = ""
        _, name = first.get(i, (None, ""))
        if name:
            bottleneck = res[name].what
        if together:
            shared = _sharing(i, routes, res, name, ceiling, step.mode, parts)
        if route.assumed:
            parts.append("rates assumed, not known (see `commbench topo`)")
        finish = t_typ[i]
        latency_bound = finish is not None and finish < LATENCY_BOUND_S
        if latency_bound:
            parts.append(
                "latency-bound at this size: a copy's fixed cost (launch, DMA setup, "
                "completion; microseconds) dwarfs its transfer, which the bandwidth model "
                "leaves out: no expectation, the ceiling is only a bound"
            )
        out.append(
            Expectation(
                pair=route.copy.label,
                copy=route.copy.kind,
                src=route.copy.src,
                dst=route.copy.dst,
                path=route.path,
                link=route.link,
                nvlinks=route.nvlinks,
                p2p=route.p2p,
                peak_gbps=route.peak_gbps,
                ceiling_gbps=ceiling,
                expected_gbps=None if latency_bound else _gbps(size, finish),
                expected_ms=None if latency_bound or finish is None else finish * 1e3,
                shared_with=shared,
                bottleneck=bottleneck,
                assumed=route.assumed,
                diagnosis="; ".join(parts),
            )
        )
    total = _total(step, out, t_peak, t_typ) if together else None
    return StepExpectation(step=step, copies=out, total=total)


def _sharing(
    i: int,
    routes: list[Route],
    res: dict[str, Resource],
    name: str,
    ceiling: float | None,
    mode: str,
    parts: list[str],
) -> list[str]:
    """The copies that copy `i` shares its bottleneck (`name`) with, the words for it added
    to `parts`; and the resources of unknown bandwidth it crosses with others, which the
    model cannot share out but a reader should know of."""
    route = routes[i]
    shared: list[str] = []
    users = [j for j, r in enumerate(routes) if j != i and name and name in r.resources]
    limited = (
        ceiling is not None
        and route.peak_gbps is not None
        and ceiling < route.peak_gbps * (1 - 1e-6)
    )
    if users and limited:
        shared = [routes[j].copy.label for j in users]
        parts.append(
            f"shares {res[name].what} with {', '.join(shared)} in {mode} mode: "
            f"{_fmt(ceiling or 0.0)} at most"
        )
    elif route.path != "unknown":
        parts.append("shares no bottleneck with the other copies")
    unknown = [
        (r_name, j)
        for r_name in route.resources
        if res[r_name].capacity is None
        for j, r in enumerate(routes)
        if j != i and r_name in r.resources
    ]
    if unknown:
        names = sorted({routes[j].copy.label for _, j in unknown})
        parts.append(
            f"also crosses {res[unknown[0][0]].what} with {', '.join(names)} "
            "(its bandwidth is not modelled)"
        )
    return shared


def _total(
    step: Step,
    copies: list[Expectation],
    t_peak: list[float | None],
    t_typ: list[float | None],
) -> Expectation:
    nbytes = step.size_bytes * len(copies)
    known = all(t is not None for t in t_peak)
    makespan = max((t for t in t_peak if t is not None), default=None) if known else None
    typ_known = all(t is not None for t in t_typ)
    typ_span = max((t for t in t_typ if t is not None), default=None) if typ_known else None
    if typ_span is not None and typ_span < LATENCY_BOUND_S:
        typ_span = None  # latency-bound: see expect_step
    ceiling = _gbps(nbytes, makespan)
    # copies that share a link cannot add up their peaks: the physical limit of the set is
    # what the links allow together, the ceiling
    peaks = [c.peak_gbps for c in copies]
    peak = (
        ceiling
        if ceiling is not None
        else math.fsum(p for p in peaks if p is not None)
        if all(p is not None for p in peaks)
        else None
    )
    shared = sorted({c.bottleneck for c in copies if c.shared_with})
    what = f"{len(copies)} copies at once"
    if shared:
        what += ", limited by " + " and by ".join(shared)
    elif ceiling is not None:
        what += ", none sharing a bottleneck"
    if ceiling is not None and makespan is not None:
        what += (
            f": {_fmt(ceiling)} together at most ({_bytes(nbytes)} by the end of the "
            f"slowest copy, {makespan * 1e3:.3g} ms)"
        )
    first = copies[0]
    return Expectation(
        pair=step.label,
        copy="total",
        src=first.src if len({c.src for c in copies}) == 1 else None,
        dst=None,
        path="total",
        link="",
        nvlinks=0,
        p2p=None,
        peak_gbps=peak,
        ceiling_gbps=ceiling,
        expected_gbps=_gbps(nbytes, typ_span),
        expected_ms=None if typ_span is None else typ_span * 1e3,
        shared_with=[],
        bottleneck="; ".join(shared),
        assumed=any(c.assumed for c in copies),
        diagnosis=what,
    )


def expect_plan(snapshot: TopologySnapshot, steps: Sequence[Step]) -> list[StepExpectation]:
    fabric = Fabric(snapshot)
    return [expect_step(snapshot, s, fabric) for s in steps]


# --- measured against expected ---------------------------------------------------------------

_SLOW_HINTS = {
    "nvlink": "an NVLink copy this slow usually went through host memory (peer access off) "
    "or over fewer links than listed (nvidia-smi nvlink -s)",
    "pcie": "check the link's current generation and width (nvidia-smi -q) and what else "
    "uses the PCIe switch",
    "staged": "host-memory staging is slow here: check the process's NUMA placement and the IOMMU",
    "host": "another process on the link, or host memory on the far NUMA node",
    "local": "another process may be using the GPU",
    "total": "see the copies' own rows",
}


@dataclass(kw_only=True, slots=True, frozen=True)
class Verdict:
    efficiency: float | None
    """Measured / theoretical peak (alone)."""
    suspicious: bool
    """Faster than the theoretical peak: the number cannot be right as it stands."""
    text: str
    """What to say about the measurement, before the expectation's own diagnosis."""


def judge(exp: Expectation, gbps: float | None) -> Verdict:
    """Hold a measured bandwidth against the expectation for that copy in that step."""
    if gbps is None or math.isnan(gbps):
        return Verdict(efficiency=None, suspicious=False, text="")
    peak = exp.peak_gbps
    eff = gbps / peak if peak else None
    if peak and gbps > peak:
        where = exp.link or exp.path
        return Verdict(
            efficiency=eff,
            suspicious=True,
            text=(
                f"SUSPICIOUS: {_fmt(gbps)} is above the {_fmt(peak)} theoretical peak "
                f"({where}); either the timing missed part of the copy or the topology is "
                "not this machine's"
            ),
        )
    if exp.expected_gbps and gbps < SLOW_FRACTION * exp.expected_gbps:
        share = f"{eff:.0%} of peak, " if eff is not None else ""
        return Verdict(
            efficiency=eff,
            suspicious=False,
            text=(
                f"slow: {share}under half the ~{_fmt(exp.expected_gbps)} expected; "
                f"{_SLOW_HINTS.get(exp.path, '')}"
            ).rstrip("; "),
        )
    if exp.ceiling_gbps and exp.ceiling_gbps < (peak or math.inf) and gbps > exp.ceiling_gbps:
        return Verdict(
            efficiency=eff,
            suspicious=False,
            text=f"above the modelled {_fmt(exp.ceiling_gbps)} for these copies: they shared "
            "less than the model says",
        )
    return Verdict(efficiency=eff, suspicious=False, text="")
