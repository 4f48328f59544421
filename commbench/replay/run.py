"""Run a replay and conclude it: launch the workers on the program, then write what the trace
recorded beside what the replay measured into run.json (`replay`), with the bucket advisor's
caps and the model's predictions. Nothing here prints: the command renders what comes back."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from commbench.collectives.settings import CollectivesSettings, Point
from commbench.launch.launcher import LaunchOptions, preflight, resolve_launch, run_collectives
from commbench.launch.protocol import EVENTS_FILE
from commbench.replay import compiled
from commbench.replay.buckets import cap_mb
from commbench.replay.events import CapTimes, SequenceTimes, read_event
from commbench.replay.explain import fit_rows, predict_buckets_s
from commbench.replay.program import Program
from commbench.replay.settings import ReplayRun, ReplaySettings
from commbench.results.record import RunKind
from commbench.results.replay import RebucketCap, ReplayRecord
from commbench.results.runs import Run
from commbench.results.schema import ResultRow
from commbench.results.store import RunDir
from commbench.traces.records import Trace

WORKER = "commbench.replay.worker"
PROGRAM_DIR = "program"


def points_of(program: Program, settings: ReplaySettings) -> list[Point]:
    """What the watchdog names a hang by: each row, the sequence, each cap."""
    points = [
        Point(op=r.op, strategy="", requested_bytes=r.size_bytes, dtype=r.dtype)
        for r in program.rows
    ]
    points.append(Point(op="all_reduce", strategy="replay sequence", requested_bytes=0))
    points += [
        Point(op="all_reduce", strategy=f"bucket cap {cap_mb(c):g} MB", requested_bytes=c)
        for c in settings.rebucket
    ]
    return points


def run_replay(
    trace: Trace,
    program: Program,
    settings: ReplaySettings,
    collectives: CollectivesSettings,
    out_parent: Path,
    launch: LaunchOptions | None = None,
    on_progress: Callable[[int, int, ResultRow | None], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Run:
    """Launch the replay, then add its `replay` record to run.json. The program is compiled
    for the workers (`compiled`) beside the run directories before they start, and kept in
    the run directory (`program/`) after. What the launch would refuse (more ranks than
    this node holds) is refused first, before anything is written."""
    preflight(collectives, launch)
    events: list[dict[str, Any]] = []
    out_parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".replay-program-", dir=out_parent))
    try:
        compiled.write(trace, program, staging)
        outcome = run_collectives(
            collectives,
            out_parent,
            launch,
            on_progress,
            kind=RunKind.REPLAY,
            worker=WORKER,
            extra_settings={"replay": replace(settings, program=str(staging)).to_dict()},
            points=points_of(program, settings),
            on_event=events.append,
            on_warning=on_warning,
        )
        if outcome.run_dir.is_dir() and not (outcome.run_dir / PROGRAM_DIR).exists():
            shutil.move(str(staging), outcome.run_dir / PROGRAM_DIR)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    sequence: SequenceTimes | None = None
    caps: dict[int, CapTimes] = {}
    for i, event in enumerate(events):
        where = f"{EVENTS_FILE}: event {i + 1}:"
        read = read_event(event, where)
        if isinstance(read, SequenceTimes):
            sequence = read
        elif isinstance(read, CapTimes):
            caps[read.cap_bytes] = read
    record = outcome.record
    record.replay = conclude(trace, program, settings, outcome.rows, sequence, caps, collectives)
    if record.holds_results is not False:
        RunDir.of(outcome.run_dir).write_record(record)
    return Run(
        path=outcome.run_dir, record=record, rows=outcome.rows, stopped=outcome.stop_requested
    )


def conclude(
    trace: Trace,
    program: Program,
    settings: ReplaySettings,
    rows: list[ResultRow],
    sequence: SequenceTimes | None,
    caps: dict[int, CapTimes],
    collectives: CollectivesSettings,
) -> ReplayRecord:
    """run.json's `replay` from what the workers journalled (what is missing, a run that
    died, stays null)."""
    params, _ = fit_rows(rows, collectives.placement.backend)
    rebucket = []
    for cap in settings.rebucket:
        reductions = [nbytes for _, nbytes in program.reducer.reductions(cap)]
        got = caps.get(cap)
        measured = statistics.median(got.samples_s) if got and got.samples_s else None
        predicted = (
            predict_buckets_s(reductions, program.world, params) if params is not None else None
        )
        rebucket.append(
            RebucketCap(
                cap_bytes=cap,
                buckets=len(program.reducer.buckets(cap)),
                measured_s_per_step=measured,
                predicted_s_per_step=predicted,
            )
        )
    timed = [c for c in rebucket if c.measured_s_per_step is not None]
    best = min(timed, key=lambda c: c.measured_s_per_step or 0.0) if timed else None
    replayed: list[float | None] = list(sequence.step_s) if sequence is not None else []
    return ReplayRecord(
        trace=settings.trace,
        traced_world=program.traced_world,
        world=program.world,
        steps=len(program.steps),
        complete=trace.manifest.complete,
        recorded_comm_s_per_step=list(program.recorded_step_s),
        recorded_wait_s_per_step=[
            max(0.0, total - aligned) if total is not None and aligned is not None else None
            for total, aligned in zip(
                program.recorded_step_s, program.recorded_aligned_step_s, strict=False
            )
        ],
        replayed_comm_s_per_step=replayed,
        replayed_span_s_per_step=list(sequence.span_s) if sequence is not None else [],
        step_numbers=list(program.steps),
        replayed_passes_s=[list(p) for p in sequence.passes_s] if sequence is not None else [],
        notes=list(program.notes),
        rebucket=rebucket,
        best_cap_mb=cap_mb(best.cap_bytes) if best is not None else None,
        elsewhere=program.elsewhere,
        max_gap_s=program.gaps.max_gap_s if settings.pace else None,
        gaps_capped=program.gaps.capped if settings.pace else 0,
        gaps_backwards=program.gaps.backwards if settings.pace else 0,
        gaps_as=_gaps_as(settings, trace) if settings.pace else None,
    )


def _gaps_as(settings: ReplaySettings, trace: Trace) -> str:
    """What `--pace` fills the recorded gaps with (`ReplayRecord.gaps_as`)."""
    if settings.pace_compute:
        return "compute"
    recorded = (
        c.cpu_ns is not None and c.device.startswith("cpu")
        for calls in trace.calls.values()
        for c in calls
    )
    return "host" if any(recorded) else "idle"


def run_request(request: ReplayRun) -> Run | Program:
    """`replay_trace`'s work: the trace read into a program (with the model's prediction
    elsewhere, given `bw` and `latency`), returned with `dry_run`, else replayed."""
    from commbench.replay.settings import prepare
    from commbench.results.store import check_parent

    out = Path(request.out)
    launch = resolve_launch(request)
    trace, program, settings, collectives = prepare(request, request, launch)
    if request.bw is not None and request.latency is not None:
        from commbench.replay.explain import predict_elsewhere

        elsewhere = predict_elsewhere(
            program.reducer, settings.rebucket, program.world, request.bw, request.latency
        )
        program = replace(program, elsewhere=elsewhere)
    if request.dry_run:
        return program
    check_parent(out)
    return run_replay(
        trace,
        program,
        settings,
        collectives,
        out,
        launch,
        on_progress=request.on_progress,
        on_warning=request.on_warning,
    )
