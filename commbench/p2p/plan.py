"""What to copy: the measurements a p2p run makes, in order (`Step`s of `Copy`s, declared in
`commbench.p2p.steps`). Pure: no torch, no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.errors import UserError
from commbench.p2p.settings import P2PSettings
from commbench.p2p.steps import BANDWIDTH, BI, HOST, LATENCY, UNI, Copy, Step


@dataclass(kw_only=True, slots=True)
class Plan:
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Things to tell the user about what will (not) be measured."""


NO_GPU = "p2p needs a CUDA GPU, and none is visible"
DRY_RUN_HINT = (
    "without one, `commbench p2p --dry-run --topology SNAPSHOT.json` says what each copy of "
    "another machine should reach (SNAPSHOT.json: `commbench topo --format json` there)"
)


def no_gpu(reason: str | None = None) -> UserError:
    """The refusal of a p2p run without a GPU: why, and what can be done here instead."""
    why = f" ({reason})" if reason else ""
    return UserError(f"{NO_GPU}{why}; {DRY_RUN_HINT}")


def _check_gpu(index: int, n: int, flag: str) -> None:
    if not 0 <= index < n:
        visible = "0" if n == 1 else f"0..{n - 1}"
        raise UserError(f"{flag} {index}: no such GPU (visible: {visible})")


def fanouts(settings: P2PSettings, n: int) -> list[tuple[int, list[int]]]:
    """(src, [dst, ...]) groups to measure on `n` GPUs; UserError for GPUs that do not exist."""
    if n < 1:
        raise no_gpu()
    if settings.pairs is not None:
        groups: dict[int, list[int]] = {}
        for s, d in settings.pairs:
            _check_gpu(s, n, "pair source")
            _check_gpu(d, n, "pair destination")
            if d not in groups.setdefault(s, []):
                groups[s].append(d)
        return list(groups.items())
    if settings.matrix:
        return [(s, [d for d in range(n) if d != s]) for s in range(n)] if n > 1 else []
    _check_gpu(settings.src, n, "--src")
    if settings.dsts is None:
        return [(settings.src, [d for d in range(n) if d != settings.src])] if n > 1 else []
    for d in settings.dsts:
        _check_gpu(d, n, "--dst")
    return [(settings.src, list(settings.dsts))]


def _pair(src: int | None, dst: int | None, bidirectional: bool) -> tuple[Copy, ...]:
    there = Copy(src, dst)
    return (there, Copy(dst, src)) if bidirectional else (there,)


def _step(mode: str, size: int, copies: tuple[Copy, ...], test: str = BANDWIDTH) -> Step:
    both = any(Copy(c.dst, c.src) in copies for c in copies if c.src != c.dst)
    return Step(test=test, mode=mode, direction=BI if both else UNI, size_bytes=size, copies=copies)


def plan(settings: P2PSettings, n: int) -> Plan:
    """Every step of the run on `n` visible GPUs, in the order they are measured."""
    groups = fanouts(settings, n)
    result = Plan()
    local: list[int] = []
    if not groups:
        local = [settings.src] if not settings.matrix else list(range(n))
        result.notes.append(
            f"one GPU visible: there are no peers; measuring device-to-device copies within "
            f"cuda:{local[0]}" + (" and pinned host<->device copies" if settings.host else "")
        )
    hosts = sorted({s for s, _ in groups}) or local
    concurrent = "concurrent" in settings.modes
    sequential = "sequential" in settings.modes
    for size in settings.sizes:
        result.steps.extend(_step("sequential", size, (Copy(s, s),)) for s in local)
        for src, dsts in groups:
            alone = [_pair(src, d, settings.bidirectional) for d in dsts]
            # One destination: concurrent and sequential time the same thing; keep one.
            if concurrent and (len(dsts) > 1 or not sequential):
                together = tuple(c for copies in alone for c in copies)
                result.steps.append(_step("concurrent", size, together))
            if sequential:
                result.steps.extend(_step("sequential", size, copies) for copies in alone)
        if settings.host:
            for g in hosts:
                result.steps.extend(
                    _step("sequential", size, copies)
                    for copies in _host_steps(g, settings.bidirectional)
                )
    if settings.latency:
        singles = [Copy(s, s) for s in local] + [Copy(s, d) for s, ds in groups for d in ds]
        if settings.host:
            singles += [c for g in hosts for c in (Copy(HOST, g), Copy(g, HOST))]
        for size in settings.latency_sizes:
            result.steps.extend(_step("sequential", size, (c,), LATENCY) for c in singles)
    return result


def _host_steps(g: int, bidirectional: bool) -> list[tuple[Copy, ...]]:
    there, back = Copy(HOST, g), Copy(g, HOST)
    return [(there, back)] if bidirectional else [(there,), (back,)]


def gpu_buffer_bytes(steps: list[Step]) -> dict[int, int]:
    """The most bytes of copy buffers each GPU holds at once over a run of `steps`.

    Mirrors `commbench.p2p.measure.Buffers`: one source per (GPU, size) and one destination per
    (GPU, size, slot), the slot counting the copies into that GPU within a step; buffers of a
    size stay allocated across the steps of that size. So a copy within one GPU, or a
    bidirectional pair, holds 2 x size on each GPU, not 1 x.
    """
    held: dict[int, dict[int, set[tuple[str, int]]]] = {}  # size -> GPU -> buffers
    for step in steps:
        per_gpu = held.setdefault(step.size_bytes, {})
        slots: dict[int, int] = {}
        for c in step.copies:
            if c.src is not None:
                per_gpu.setdefault(c.src, set()).add(("src", 0))
            if c.dst is not None:
                slot = slots.get(c.dst, 0)
                slots[c.dst] = slot + 1
                per_gpu.setdefault(c.dst, set()).add(("dst", slot))
    need: dict[int, int] = {}
    for size, per_gpu in held.items():
        for gpu, buffers in per_gpu.items():
            need[gpu] = max(need.get(gpu, 0), size * len(buffers))
    return need
