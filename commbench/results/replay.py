"""A replay's own part of run.json (`"replay"`): what the trace recorded and what the replay
measured, per step, and the bucket advisor's caps. A sub-record of `RunRecord`, converted
when written, checked when read; a record without it (every other kind) reads as None.
Optional, like the other kinds' additions, so it needs no new schema version."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from commbench.fields import Fields, boolean, integer_in, list_of, number_in, one_of, pick, text
from commbench.results.schema import MAX_COUNT, MAX_SIZE_BYTES, MAX_WORLD_SIZE

MAX_SECONDS = 1e10
"""Longest time a replay record holds: a trace's clock is 64-bit nanoseconds (2^63 ns is
9.2e9 s), so a recorded time past it is not one."""
_seconds = number_in(0, MAX_SECONDS)
_MAX_STEPS = 1 << 20


_MAX_PASSES = 1 << 16


def _nullable_seconds(value: Any, path: str) -> float | None:
    return None if value is None else _seconds(value, path)


def _nullable_step(value: Any, path: str) -> int | None:
    return None if value is None else integer_in(0, 1 << 62)(value, path)


def median_of(values: Sequence[float | None]) -> float | None:
    """The median of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass(kw_only=True, slots=True)
class RebucketCap:
    """One cap the bucket advisor measured."""

    cap_bytes: int
    buckets: int
    """All-reduces per step at this cap (DDP's buckets)."""
    measured_s_per_step: float | None
    predicted_s_per_step: float | None
    """The alpha-beta model's, fitted to the run's rows; None without a fit."""

    def to_dict(self) -> dict[str, Any]:
        return pick(self, "cap_bytes", "buckets", "measured_s_per_step", "predicted_s_per_step")

    @classmethod
    def read(cls, f: Fields) -> RebucketCap:
        return cls(
            cap_bytes=f.req("cap_bytes", integer_in(1, MAX_SIZE_BYTES)),
            buckets=f.req("buckets", integer_in(0, MAX_COUNT)),
            measured_s_per_step=f.opt("measured_s_per_step", _seconds),
            predicted_s_per_step=f.opt("predicted_s_per_step", _seconds),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Elsewhere:
    """The bucket advisor's caps predicted on another fabric (`--bw`, `--latency`), at the
    replay's world size: no measurement, the model alone."""

    bw_gbps: float
    latency_us: float
    world: int
    caps: tuple[tuple[int, int, float], ...]
    """(cap_bytes, buckets, predicted seconds per step) per cap."""

    @property
    def best_cap_mb(self) -> float | None:
        if not self.caps:
            return None
        cap = min(self.caps, key=lambda c: (c[2], c[0]))[0]
        return cap / (1 << 20)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bw_gbps": self.bw_gbps,
            "latency_us": self.latency_us,
            "world": self.world,
            "caps": [
                {"cap_bytes": c, "buckets": b, "predicted_s_per_step": t} for c, b, t in self.caps
            ],
            "best_cap_mb": self.best_cap_mb,
        }

    @classmethod
    def read(cls, f: Fields) -> Elsewhere:
        return cls(
            bw_gbps=f.req("bw_gbps", number_in(0, 1e9)),
            latency_us=f.req("latency_us", number_in(0, 1e12)),
            world=f.req("world", integer_in(1, MAX_WORLD_SIZE)),
            caps=tuple(
                (
                    item.req("cap_bytes", integer_in(1, MAX_SIZE_BYTES)),
                    item.req("buckets", integer_in(0, MAX_COUNT)),
                    item.req("predicted_s_per_step", _seconds),
                )
                for item in (x.obj() for x in f.items("caps", required=False, max_items=MAX_COUNT))
            ),
        )


@dataclass(kw_only=True, slots=True)
class ReplayRecord:
    """run.json's `replay`."""

    trace: str
    """The trace replayed, as given."""
    traced_world: int
    world: int
    steps: int
    """Steps replayed."""
    complete: bool
    """Whether the trace was complete (an incomplete one is replayed, and its notes say so)."""
    recorded_comm_s_per_step: list[float | None] = field(default_factory=list)
    """Per replayed step, the job's communication time (`replay.program.recorded_step_times`);
    null where the trace has no times."""
    recorded_wait_s_per_step: list[float | None] = field(default_factory=list)
    """Per replayed step, the part of the recorded time the slowest rank spent waiting for a
    peer to issue the same collective (recorded minus the aligned time: rank skew, a slow
    rank's compute); a replay, whose ranks start each step together, has none."""
    replayed_comm_s_per_step: list[float | None] = field(default_factory=list)
    """Per replayed step, the replay's: first issue to last completion, max over ranks, the
    median over the timed passes."""
    replayed_span_s_per_step: list[float | None] = field(default_factory=list)
    """Per replayed step, its start to its last completion, gaps included (with `--pace`,
    the recorded gaps between calls)."""
    step_numbers: list[int | None] = field(default_factory=list)
    """The trace's number of each replayed step (null for a trace without step markers)."""
    replayed_passes_s: list[list[float]] = field(default_factory=list)
    """Every timed pass over the steps (the samples behind each median)."""
    notes: list[str] = field(default_factory=list)
    rebucket: list[RebucketCap] = field(default_factory=list)
    best_cap_mb: float | None = None
    """The advisor's `bucket_cap_mb`: the cap with the least measured time per step."""
    elsewhere: Elsewhere | None = None
    """The caps predicted on the fabric `--bw` and `--latency` describe."""
    max_gap_s: float | None = None
    """With `--pace`, the longest idle wait replayed between two calls of a step (null
    without `--pace`)."""
    gaps_capped: int = 0
    """With `--pace`, the recorded gaps longer than `max_gap_s`, each replayed as it."""
    gaps_backwards: int = 0
    """With `--pace`, calls recorded as issued before the call before them on their rank (a
    clock that stepped back), each issued right after it."""
    gaps_as: str | None = None
    """With `--pace`, what filled the recorded gaps: `idle` (waiting), `host` (the CPU time
    the job's process spent in each gap, recorded on CPUs, as computation on the host's
    CPU, the rest idle) or `compute` (busy compute on the device throughout,
    `--pace-compute`); null without `--pace`."""

    @property
    def recorded_comm_s(self) -> float | None:
        """The median over the steps."""
        return median_of(self.recorded_comm_s_per_step)

    @property
    def recorded_wait_s(self) -> float | None:
        return median_of(self.recorded_wait_s_per_step)

    @property
    def replayed_comm_s(self) -> float | None:
        return median_of(self.replayed_comm_s_per_step)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "trace": self.trace,
            "traced_world": self.traced_world,
            "world": self.world,
            "steps": self.steps,
            "complete": self.complete,
            "recorded_comm_s_per_step": list(self.recorded_comm_s_per_step),
            "recorded_wait_s_per_step": list(self.recorded_wait_s_per_step),
            "replayed_comm_s_per_step": list(self.replayed_comm_s_per_step),
            "replayed_span_s_per_step": list(self.replayed_span_s_per_step),
            "step_numbers": list(self.step_numbers),
            "replayed_passes_s": [list(p) for p in self.replayed_passes_s],
            "recorded_comm_s": self.recorded_comm_s,
            "replayed_comm_s": self.replayed_comm_s,
            "recorded_wait_s": self.recorded_wait_s,
            "notes": list(self.notes),
            "max_gap_s": self.max_gap_s,
            "gaps_capped": self.gaps_capped,
            "gaps_backwards": self.gaps_backwards,
            "gaps_as": self.gaps_as,
        }
        if self.rebucket:
            data["rebucket"] = [c.to_dict() for c in self.rebucket]
            data["best_cap_mb"] = self.best_cap_mb
        if self.elsewhere is not None:
            data["elsewhere"] = self.elsewhere.to_dict()
        return data

    @classmethod
    def read(cls, f: Fields) -> ReplayRecord:
        per_step = list_of(_nullable_seconds, max_items=_MAX_STEPS)
        return cls(
            trace=f.req("trace", text),
            traced_world=f.req("traced_world", integer_in(1, MAX_WORLD_SIZE)),
            world=f.req("world", integer_in(1, MAX_WORLD_SIZE)),
            steps=f.req("steps", integer_in(0, _MAX_STEPS)),
            complete=f.req("complete", boolean),
            recorded_comm_s_per_step=f.opt("recorded_comm_s_per_step", per_step) or [],
            recorded_wait_s_per_step=f.opt("recorded_wait_s_per_step", per_step) or [],
            replayed_comm_s_per_step=f.opt("replayed_comm_s_per_step", per_step) or [],
            replayed_span_s_per_step=f.opt("replayed_span_s_per_step", per_step) or [],
            step_numbers=f.opt("step_numbers", list_of(_nullable_step, max_items=_MAX_STEPS)) or [],
            replayed_passes_s=f.opt(
                "replayed_passes_s",
                list_of(list_of(_seconds, max_items=_MAX_STEPS), max_items=_MAX_PASSES),
            )
            or [],
            notes=f.opt("notes", list_of(text, max_items=MAX_COUNT)) or [],
            rebucket=[
                RebucketCap.read(item.obj())
                for item in f.items("rebucket", required=False, max_items=MAX_COUNT)
            ],
            best_cap_mb=f.opt("best_cap_mb", number_in(0, 1e12)),
            elsewhere=Elsewhere.read(sub) if (sub := f.sub("elsewhere")) is not None else None,
            max_gap_s=f.opt("max_gap_s", _seconds),
            gaps_capped=f.opt("gaps_capped", integer_in(0, MAX_COUNT)) or 0,
            gaps_backwards=f.opt("gaps_backwards", integer_in(0, MAX_COUNT)) or 0,
            gaps_as=f.opt("gaps_as", one_of(("idle", "host", "compute"))),
        )
