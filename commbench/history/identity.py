"""What a run is to the history: the machine it ran on, the series its points belong to, its
label (the commit it measured), its software, and the figures stored for each point.

A series is compare's point key (`ResultRow.key`: op, strategy, dtype, reduce op, world
size, size, in-place, skew) on one machine. A machine is what compare holds comparable
(`RunContext.comparable`: backend, device, GPU models, world size, the GPU link matrix) plus
its hosts and the run's family (an nccl-tests import measures what a collectives run does:
`family`), so a run from another machine starts series of its own and is never mixed in.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from commbench.results.exporters import group_title
from commbench.results.record import RunContext, RunKind
from commbench.results.runs import Run
from commbench.results.schema import CHECK_FAILED, ResultRow, RowKey
from commbench.sizes import format_size
from commbench.stats import quantile

CI_COMMITS = (
    "GITHUB_SHA",  # GitHub Actions
    "CI_COMMIT_SHA",  # GitLab CI
    "BUILDKITE_COMMIT",  # Buildkite
    "GIT_COMMIT",  # Jenkins' git plugin
    "CIRCLE_SHA1",  # CircleCI
    "TRAVIS_COMMIT",  # Travis CI
    "BUILD_SOURCEVERSION",  # Azure Pipelines
    "DRONE_COMMIT_SHA",  # Drone
    "BITBUCKET_COMMIT",  # Bitbucket Pipelines
    "BUILD_VCS_NUMBER",  # TeamCity
)
"""The CI systems' own variables for the commit a job builds, read when `--label` is not
given, in this order; then the run's own `cwd_git_commit`."""

SOFTWARE = ("torch", "nccl", "cuda", "driver", "commbench", "python", "platform")
"""What a run ran with, beside its communication settings (`RunContext.env`)."""

DIGEST_SHOWN = 12
"""Hex digits of a digest shown to a user as a run's or a series' id."""


def family(kind: RunKind) -> str:
    """What a run's points measure (`RunKind.family`), as the series key stores it."""
    return kind.family.value


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Machine:
    """A machine's identity: two runs share series only where every field is the same."""

    family: str
    backend: str | None
    device: str | None
    gpus: tuple[str, ...]
    """The GPU models (each once, sorted)."""
    topology: str | None
    """A hash of the GPU link matrix (`topology_hash`); None without a snapshot."""
    hosts: tuple[str, ...]
    world_size: int | None

    @property
    def digest(self) -> str:
        return _digest(
            [
                self.family,
                self.backend,
                self.device,
                self.gpus,
                self.topology,
                self.hosts,
                self.world_size,
            ]
        )

    @property
    def label(self) -> str:
        """`2x cpu gloo on vm`, `8x NVIDIA H100 80GB HBM3 nccl on gpu-node-17 (topology 1a2b3c)`."""
        what = ", ".join(self.gpus) or self.device or "?"
        count = f"{self.world_size}x " if self.world_size else ""
        hosts = ",".join(self.hosts[:2]) + (
            f" +{len(self.hosts) - 2}" if len(self.hosts) > 2 else ""
        )
        parts = [f"{count}{what}", self.backend or "", f"on {hosts}" if hosts else ""]
        if self.topology:
            parts.append(f"(topology {self.topology[:6]})")
        if self.family != RunKind.COLLECTIVES.value:
            parts.append(f"[{self.family}]")
        return " ".join(p for p in parts if p)


def topology_hash(context: RunContext) -> str | None:
    """A stable hash of the run's GPU link matrix (what compare calls its topology); None
    when the run has no snapshot, or one without pairs."""
    links = context.comparable()["topology_links"]
    return _digest(links)[:16] if links else None


def machine_of(run: Run) -> Machine:
    ctx = run.context
    hosts = sorted(set(ctx.hosts)) or ([ctx.host] if ctx.host else [])
    return Machine(
        family=family(run.kind),
        backend=ctx.backend,
        device=ctx.device,
        gpus=tuple(sorted(set(ctx.device_names))),
        topology=topology_hash(ctx),
        hosts=tuple(hosts),
        world_size=ctx.world_size or ctx.device_count,
    )


def series_digest(machine: Machine, key: RowKey) -> str:
    return _digest([machine.digest, list(key)])


def point_label(row: ResultRow) -> str:
    """`all_reduce float32 op=sum 2 ranks 1 MiB`: the point, as the tables title it."""
    title = " ".join(group_title(row).split("  "))
    return title if row.op == "barrier" else f"{title} {format_size(row.size_bytes)}"


@dataclass(frozen=True, slots=True)
class Point:
    """What the history keeps of a measured point: figures from its samples (the samples
    decide, never a stats block that disagrees with them)."""

    row: ResultRow
    median_us: float
    busbw_gbps: float | None
    n: int
    q1_us: float | None
    q3_us: float | None

    @property
    def value(self) -> float:
        """The series' figure, higher is better: busbw where the point has one, else
        operations per second (1e6 / the median time in µs)."""
        return self.busbw_gbps if self.busbw_gbps is not None else 1e6 / self.median_us


def points_of(run: Run) -> list[Point]:
    """The run's measured points (not failed, a finite positive time), each key once."""
    found: dict[RowKey, Point] = {}
    for row in run.rows:
        if row.check == CHECK_FAILED or row.key in found:
            continue
        median = row.sample_median_us()
        if not (math.isfinite(median) and median > 0):
            continue
        busbw = row.sample_busbw_gbps()
        if busbw is not None and not (math.isfinite(busbw) and busbw > 0):
            busbw = None
        samples = sorted(row.samples_us)
        q1, q3 = (
            (quantile(samples, 0.25), quantile(samples, 0.75))
            if samples
            else (row.stats.q1, row.stats.q3)
        )
        found[row.key] = Point(
            row=row,
            median_us=median,
            busbw_gbps=busbw,
            n=len(samples) or row.stats.n,
            q1_us=q1 if math.isfinite(q1) else None,
            q3_us=q3 if math.isfinite(q3) else None,
        )
    return list(found.values())


def run_digest(run: Run) -> str:
    """The run's content: the same run added twice, from any path, is stored once."""
    ctx = run.context
    rows = [[list(r.key), r.samples_us or [r.stats.median]] for r in run.rows]
    return _digest([run.record.run_id, ctx.host, ctx.started_at, run.kind.value, rows])


def run_time(run: Run) -> str | None:
    """When the run started, as UTC text that sorts as time does (`at`); None when its
    record does not say (an import: when it was imported)."""
    record = run.record
    for text in (record.context.started_at, record.imported_at, record.finished_at):
        if text:
            at = utc(text)
            if at is not None:
                return at
    return None


def utc(text: str) -> str | None:
    """An ISO 8601 time (`2026-11-21T05:50:44+0000`) as `2026-11-21T05:50:44.000000Z`."""
    for parse in (_strptime, datetime.fromisoformat):
        try:
            when = parse(text)
        except ValueError:
            continue
        if when.tzinfo is None:
            when = when.astimezone()  # a time without an offset is the local one
        return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return None


def _strptime(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z")


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def label_of(
    given: str | None, environ: Mapping[str, str], context: RunContext
) -> tuple[str | None, str | None]:
    """The run's label and where it came from: `--label`, else the CI's commit variable
    (`CI_COMMITS`), else the commit of the directory the run was started in."""
    if given:
        return given, "--label"
    for name in CI_COMMITS:
        value = environ.get(name, "").strip()
        if value:
            return value, name
    if context.cwd_git_commit:
        return context.cwd_git_commit, "cwd_git_commit"
    return None, None


def software_of(context: RunContext) -> dict[str, Any]:
    return {name: getattr(context, name) for name in SOFTWARE if getattr(context, name)}


def environment() -> Mapping[str, str]:
    """The variables `label_of` reads (this process's)."""
    return os.environ
