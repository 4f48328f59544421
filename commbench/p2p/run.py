"""A p2p run, start to end: topology, plan, expectations, measurements, result files.

`dry_run()` needs only a topology; `run_p2p()` measures (through `commbench.p2p.measure`
unless a test passes another measurer) and writes `results/<run-id>/` after every step, so a
run that dies keeps what it measured. Both return data; printing is the CLI's business.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from commbench.errors import Interrupted, UserError
from commbench.fields import pick
from commbench.gpu_memory import P2P_RESERVE, P2P_RESERVE_FOR, GpuMemory, refuse_if_short
from commbench.p2p.expect import (
    Expectation,
    StepExpectation,
    Verdict,
    expect_plan,
    expect_step,
    judge,
)
from commbench.p2p.fabric import Fabric
from commbench.p2p.plan import Plan, Step, gpu_buffer_bytes, no_gpu, plan
from commbench.p2p.settings import P2PRun, P2PSettings
from commbench.results.schema import (
    CHECK_FAILED,
    CHECK_OK,
    CHECK_SKIPPED,
    P2P_OP,
    P2PCopy,
    ResultRow,
)
from commbench.sizes import format_size
from commbench.stats import Stats
from commbench.topology import Gpu, Pair, TopologySnapshot, discover, load_snapshot
from commbench.topology.discover import no_gpu_reason

if TYPE_CHECKING:  # what measuring needs, imported when it starts: a refusal is said first
    from commbench.results.record import RunRecord, RunStatus
    from commbench.results.runs import Run

HEATMAP_FILE = "p2p-matrix.png"


class Timing(Protocol):
    samples_ms: list[list[float]]
    total_ms: list[float]
    checks: list[bool | None]
    warmup: int
    dtype: str


class Measurer(Protocol):
    """What `run_p2p` needs from whatever times the copies."""

    @property
    def device_count(self) -> int: ...

    def device_names(self) -> list[str]: ...

    def context(self) -> dict[str, Any]: ...

    def measure(self, step: Step) -> Timing: ...

    def memory(self, devices: list[int]) -> GpuMemory:
        """(free, total) bytes of those GPUs, where known."""
        ...

    def close(self) -> None: ...


@dataclass(kw_only=True, slots=True)
class DryRun:
    """What each copy should reach, without touching a GPU."""

    snapshot: TopologySnapshot
    plan: Plan
    expectations: list[StepExpectation]


@dataclass(kw_only=True, slots=True)
class P2POutcome:
    run_dir: Path
    status: RunStatus
    rows: list[ResultRow]
    """One per copy, each with its `P2PCopy` (`row.p2p`)."""
    record: RunRecord
    """What run.json says."""
    notes: list[str] = field(default_factory=list)
    failure: str | None = None

    @property
    def checks_failed(self) -> list[ResultRow]:
        return [r for r in self.rows if r.check == CHECK_FAILED and r.p2p and r.p2p.copy != "total"]

    @property
    def suspicious(self) -> list[ResultRow]:
        return [r for r in self.rows if r.p2p and r.p2p.suspicious]


def load_topology(path: Path | None) -> TopologySnapshot:
    """The snapshot in `path`, or this machine's (never raises for a missing GPU)."""
    return load_snapshot(path) if path is not None else discover()


def snapshot_memory(snapshot: TopologySnapshot) -> GpuMemory:
    """Each GPU's total memory as its free memory: all a snapshot (maybe of another machine)
    can tell."""
    return {g.index: (g.memory_bytes, g.memory_bytes) for g in snapshot.gpus if g.memory_bytes}


def check_fits(the_plan: Plan, memory: GpuMemory) -> None:
    """Refuse, before allocating or predicting anything, copies whose buffers do not fit in a
    GPU's free memory less `P2P_RESERVE` (a copy within one GPU or a bidirectional pair holds
    a source and a destination there: 2 x size)."""
    if not the_plan.steps:
        return
    largest = max(step.size_bytes for step in the_plan.steps)
    refuse_if_short(
        gpu_buffer_bytes(the_plan.steps),
        memory,
        P2P_RESERVE,
        f"--size {format_size(largest)} (copy sources and destinations)",
        P2P_RESERVE_FOR,
    )


def dry_run(settings: P2PSettings, snapshot: TopologySnapshot) -> DryRun:
    if not snapshot.gpus:
        raise UserError(
            f"--dry-run needs a topology with GPUs, and this one has none "
            f"({snapshot.no_gpu_message}); pass --topology SNAPSHOT.json"
        )
    the_plan = plan(settings, len(snapshot.gpus))
    check_fits(the_plan, snapshot_memory(snapshot))
    return DryRun(
        snapshot=snapshot,
        plan=the_plan,
        expectations=expect_plan(snapshot, the_plan.steps),
    )


def unknown_topology(names: list[str], reason: str) -> TopologySnapshot:
    """A snapshot that knows only the GPUs' names: every pair's link is `N/A`."""
    n = len(names)
    return TopologySnapshot(
        source="torch",
        gpus=[Gpu(index=i, name=name) for i, name in enumerate(names)],
        pairs=[Pair(src=a, dst=b, link="N/A") for a in range(n) for b in range(n) if a != b],
        warnings=[f"topology unknown: {reason}"],
    )


def _topology_for(
    snapshot: TopologySnapshot, measurer: Measurer
) -> tuple[TopologySnapshot, list[str]]:
    n = measurer.device_count
    if len(snapshot.gpus) == n:
        return snapshot, []
    if not snapshot.gpus:
        reason = snapshot.no_gpu_message
        return unknown_topology(measurer.device_names(), reason), [
            f"topology unknown ({reason}): links and peaks cannot be explained; pass "
            "--topology SNAPSHOT.json from `commbench topo --format json` to get them"
        ]
    raise UserError(
        f"the topology describes {len(snapshot.gpus)} GPUs but CUDA sees {n} here; "
        "pass the snapshot of this machine (or none)"
    )


def copy_row(
    *,
    index: int,
    step: Step,
    exp: Expectation,
    samples_ms: list[float],
    dtype: str,
    check: str,
    warmup: int,
    world_size: int,
) -> ResultRow:
    """The row of one copy (or a step's total) from its samples: stats (in microseconds, as
    every row's), bandwidth and the verdict against what the topology expects."""
    samples_us = [ms * 1000 for ms in samples_ms]
    stats = Stats.of(samples_us)
    copies = len(step.copies) if exp.copy == "total" else 1
    bw = _bw(step.size_bytes * copies, stats.median)
    # Small copies measure latency: bandwidth figures and their verdict mean nothing there.
    latency = step.test == "latency"
    verdict = Verdict(efficiency=None, suspicious=False, text="") if latency else judge(exp, bw)
    copy = P2PCopy(
        step=index,
        **pick(step, "test", "mode", "direction"),
        **pick(exp, "copy", "src", "dst", "pair"),
        peak_gbps=None if latency else exp.peak_gbps,
        ceiling_gbps=None if latency else exp.ceiling_gbps,
        expected_gbps=None if latency else exp.expected_gbps,
        efficiency=verdict.efficiency,
        **pick(exp, "link", "nvlinks", "path"),
        peer_access=exp.p2p,
        suspicious=verdict.suspicious,
        diagnosis="; ".join(t for t in (verdict.text, exp.diagnosis) if t),
    )
    return ResultRow(
        op=P2P_OP,
        strategy=copy.name,
        dtype=dtype,
        world_size=world_size,
        size_bytes=step.size_bytes,
        count=step.size_bytes,
        algbw_gbps=None if latency else bw,
        busbw_gbps=None if latency else bw,
        check=check,
        stats=stats,
        warmup=warmup,
        requested_bytes=step.size_bytes,
        samples_us=samples_us,
        p2p=copy,
    )


def _bw(nbytes: int, us: float) -> float | None:
    if math.isnan(us) or us <= 0:
        return None
    return nbytes / (us * 1e-6) / 1e9


def _rows(
    index: int, step: Step, se: StepExpectation, timing: Timing, world_size: int
) -> list[ResultRow]:
    def check(ok: bool | None) -> str:
        return CHECK_SKIPPED if ok is None else (CHECK_OK if ok else CHECK_FAILED)

    def row(exp: Expectation, samples_ms: list[float], ok: bool | None) -> ResultRow:
        return copy_row(
            index=index,
            step=step,
            dtype=timing.dtype,
            warmup=timing.warmup,
            exp=exp,
            samples_ms=samples_ms,
            check=check(ok),
            world_size=world_size,
        )

    rows = [row(exp, timing.samples_ms[k], timing.checks[k]) for k, exp in enumerate(se.copies)]
    if se.total is not None:
        checks = timing.checks
        together = None if any(c is None for c in checks) else all(c for c in checks)
        rows.append(row(se.total, timing.total_ms, together))
    return rows


StepFn = Callable[[int, int, Step], None]


def run_p2p(
    options: P2PSettings | Mapping[str, Any],
    out_parent: Path = Path("results"),
    *,
    snapshot: TopologySnapshot | None = None,
    measurer: Measurer | None = None,
    on_step: StepFn | None = None,
) -> P2POutcome:
    """Measure every step of the plan and write the run directory; returns what was measured.

    `options` is a `P2PSettings` or a plain mapping (a suite file's `p2p:` section). Raises
    UserError before measuring anything when no GPU is visible or the input is wrong.
    """
    settings = options if isinstance(options, P2PSettings) else P2PSettings.from_options(options)
    given = snapshot is not None
    snapshot = snapshot if snapshot is not None else discover()
    if measurer is None:
        # before torch is imported (seconds), a machine without a GPU is told at once; this
        # machine's GPUs, not those of the snapshot given (a --topology file's)
        reason = no_gpu_reason(discover() if given else snapshot)
        if reason is not None:
            raise no_gpu(reason)
        from commbench.torch_version import require_torch

        require_torch()
        from commbench.p2p.measure import TorchMeasurer

        measurer = TorchMeasurer(
            warmup=settings.warmup, iters=settings.iters, min_time=settings.min_time
        )
    try:
        return _run(settings, snapshot, measurer, out_parent, on_step)
    finally:
        measurer.close()


def _run(
    settings: P2PSettings,
    snapshot: TopologySnapshot,
    measurer: Measurer,
    out_parent: Path,
    on_step: StepFn | None,
) -> P2POutcome:
    from commbench.context import host_context
    from commbench.results.lifecycle import start_run
    from commbench.results.record import RunContext, RunKind, RunStatus

    snapshot, topo_notes = _topology_for(snapshot, measurer)
    the_plan = plan(settings, measurer.device_count)
    devices = sorted({gpu for step in the_plan.steps for gpu in step.devices})
    check_fits(the_plan, {**snapshot_memory(snapshot), **measurer.memory(devices)})
    notes = the_plan.notes + topo_notes
    steps = the_plan.steps
    fabric = Fabric(snapshot)
    context = RunContext.from_dict({**host_context(), **measurer.context()}, "context")
    context.topology = snapshot
    life = start_run(
        out_parent,
        RunKind.P2P,
        settings=settings.to_dict(),
        context=context,
        health=True,
        notes=notes,
        steps_total=len(steps),
        steps_done=0,
    )
    record, run_dir = life.record, life.path
    rows: list[ResultRow] = []
    life.dir.write_rows(rows, p2p=True)
    try:
        with life.guarded():
            for i, step in enumerate(steps):
                se = expect_step(snapshot, step, fabric)
                rows.extend(_rows(i, step, se, measurer.measure(step), measurer.device_count))
                record.steps_done = i + 1
                life.dir.write_rows(rows, p2p=True)
                life.save()
                if on_step is not None:
                    on_step(i + 1, len(steps), step)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; the {len(rows)} rows measured are in {run_dir}") from None
    except Exception as exc:
        if type(exc).__name__ == "OutOfMemoryError":
            raise UserError(
                f"out of GPU memory at step {(record.steps_done or 0) + 1} of {len(steps)}; "
                f"try a smaller --size (rows so far are in {run_dir})"
            ) from None
        raise
    if settings.matrix and rows:
        notes.extend(_heatmap(run_dir, rows, measurer.device_count))
    outcome = P2POutcome(
        run_dir=run_dir, status=RunStatus.COMPLETE, rows=rows, record=record, notes=notes
    )
    failed = outcome.checks_failed
    if failed:
        outcome.status = RunStatus.FAILED
        outcome.failure = "wrong data after the copy: " + ", ".join(
            r.p2p.label for r in failed[:5] if r.p2p
        )
    record.notes = notes
    record.suspicious = [r.p2p.label for r in outcome.suspicious if r.p2p]
    life.finish(outcome.status, outcome.failure)
    return outcome


def _heatmap(run_dir: Path, rows: list[ResultRow], n: int) -> list[str]:
    try:
        from commbench.p2p.heatmap import write_heatmap

        write_heatmap(rows, n, run_dir / HEATMAP_FILE)
    except Exception as exc:  # a figure must never cost the measurements
        return [f"could not draw {HEATMAP_FILE}: {type(exc).__name__}: {exc}"]
    return []


def run_request(request: P2PRun) -> Run | DryRun:
    """`run_p2p`'s work: the plan alone with `dry_run`, else the copies measured into a run
    directory, explained by NVML's topology or the snapshot given."""
    from commbench.results.store import check_parent

    settings = request.settings()
    out, topology = Path(request.out), request.topology
    if not request.dry_run:
        check_parent(out)
    snapshot = load_topology(None if topology is None else Path(topology))
    if request.dry_run:
        return dry_run(settings, snapshot)
    outcome = run_p2p(settings, out, snapshot=snapshot, on_step=request.on_step)
    from commbench.results.runs import Run

    return Run(path=outcome.run_dir, record=outcome.record, rows=outcome.rows)
