"""What `commbench replay` is asked to do, beside the launch it shares with `collectives`:
the request (the flags, declared once) and the settings its workers read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.arguments import Fabric, HangTimeout, Iterations, PlanOnly, Request
from commbench.collectives.placement import PlacementRequest
from commbench.errors import UserError
from commbench.fields import known_fields
from commbench.flags import WORLD
from commbench.launch.request import LaunchRequest, LaunchWarnings, RunDirRequest
from commbench.numbers import check_range
from commbench.options import arg, field_of, option, use
from commbench.replay.pace import DEFAULT_MAX_GAP_S
from commbench.results.names import DEFAULT_TIMEOUT
from commbench.traces.names import MAX_WORLD

if TYPE_CHECKING:
    from commbench.collectives.settings import CollectivesSettings
    from commbench.launch.launcher import LaunchOptions
    from commbench.replay.program import Program
    from commbench.results.schema import ResultRow
    from commbench.traces.records import Trace

DEFAULT_REPEATS = 5
"""Times each bucket cap's all-reduces are replayed (one step each): the median is kept."""


@dataclass(kw_only=True, slots=True)
class ReplaySettings:
    """settings.json's `replay`: every worker rebuilds the same program from the trace."""

    trace: str
    """The trace, as an absolute path (every node reads it: a shared file system across nodes)."""
    world: int | None = None
    steps: int | None = None
    rebucket: list[int] = field(default_factory=list)
    """Bucket caps in bytes for the DDP bucket advisor; empty: no advice asked."""
    repeats: int = DEFAULT_REPEATS
    pace: bool = False
    """Issue each call at its recorded time after the step's start (see `ReplayRequest`)."""
    pace_compute: bool = False
    """With `pace`, the gaps are busy compute on the device, not idle."""
    program: str = ""
    """The directory of the compiled program (`replay.compiled`) the workers read."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplaySettings:
        return cls(**known_fields(cls, data))


@dataclass(kw_only=True)
class ReplayRequest(Fabric, PlanOnly, Iterations, HangTimeout):
    """What a user asks of `commbench replay`, beside where its ranks go and the launch."""

    trace: str | Path = field(
        metadata=arg(
            metavar="TRACE",
            type=Path,
            help="A commbench trace directory, or another tool's trace (PARAM, Flight "
            "Recorder JSON, Chakra JSON).",
        ),
    )
    dry_run = use(help="Print the replay plan; launch nothing.")
    world: int | None = field_of(
        WORLD,
        metavar="N",
        minimum=1,
        maximum=MAX_WORLD,
        help="Replay on N ranks, each op's sizes scaled as its collective dictates. "
        "Default: the trace's world size.",
    )
    steps: int | None = option(
        metavar="K", minimum=1, help="Replay the first K steps. Default: all, at most 20."
    )
    rebucket: str | None = option(
        metavar="SIZES",
        help="DDP bucket advisor: measure the trace's gradients bucketed at each cap "
        "(1M-256M:x2) and name the best bucket_cap_mb.",
    )
    pace: bool = option(
        default=False,
        help="Issue each call at its recorded time after the step's start: the job's "
        "compute between calls and its ranks' skew replayed as idle time (a link that "
        "idles between bursts behaves otherwise than one kept busy), except the CPU "
        "time a job on CPUs spent between two calls, replayed as computation on the "
        "host. Default: each call as soon as the one before allows.",
    )
    pace_compute: bool = option(
        default=False,
        help="--pace, with each recorded gap replayed as busy compute on the device (a "
        "loop of small matrix products, as long as the gap) instead of idle: the job's "
        "compute competing with its communication for the cores, memory and, on a GPU, "
        "the device's streaming multiprocessors.",
    )
    max_gap: float | None = option(
        metavar="SECONDS",
        help="With --pace, the longest idle wait replayed between two calls of a step: a "
        "longer recorded gap (a job paused, a clock that jumped) is replayed this long, "
        f"and the output says how many were. Default: {DEFAULT_MAX_GAP_S:g} s, at most "
        "half of --timeout.",
    )
    timeout: float = use(
        default=DEFAULT_TIMEOUT,
        help="Seconds without progress before the replay is declared hung "
        "(start-up, until the first row, gets at least 120 s).",
    )
    bw = use(
        help="With --latency and --rebucket: also predict each cap on another fabric, "
        "this link bandwidth in GB/s, at the replay's world size (with --dry-run, "
        "launching nothing).",
    )
    latency = use(help="With --bw: that fabric's latency per step in us.")
    iters = use(help="Timed iterations per row. Default: enough for 0.2 s.")
    warmup = use(help="Warm-up iterations per row. Default: adapts to the size.")


def prepare(
    request: ReplayRequest, where: PlacementRequest, launch: LaunchOptions
) -> tuple[Trace, Program, ReplaySettings, CollectivesSettings]:
    """The trace read, its program, the workers' settings and the launch's: every bad input
    refused here, in one line, before anything starts. The API, the CLI and tests build them
    here."""
    from commbench.collectives.placement import resolve_placement
    from commbench.collectives.settings import Timing, build_settings
    from commbench.replay.program import build_program
    from commbench.traces.formats import load_any

    max_gap, caps = check_flags(request)
    trace = load_any(Path(request.trace))
    program = build_program(
        trace,
        world=request.world,
        steps=request.steps,
        max_gap_s=max_gap,
        pace=request.pace or request.pace_compute,
    )
    left_out = trace.manifest.parameters_left_out
    if request.rebucket is not None and left_out and not trace.manifest.parameters:
        raise UserError(
            f"--rebucket: the trace does not list the job's {left_out} parameters (more than "
            "a trace holds): the bucket advisor has nothing to regroup"
        )
    if request.rebucket is not None and not trace.manifest.parameters:
        raise UserError(
            "--rebucket: the trace has no parameter list: record it with commbench record, "
            "whose job must step an optimizer"
        )
    nproc = nproc_for(where.nproc, program.world, launch.nnodes)
    place = resolve_placement(where.device, nproc, where.backend)
    ops = sorted({r.op for r in program.rows} | ({"all_reduce"} if caps else set()))
    sizes = sorted({r.size_bytes for r in program.rows if r.size_bytes > 0}) or [1]
    timing = Timing(warmup=request.warmup, iters=request.iters, timeout=request.timeout)
    collectives = build_settings(place, timing, ops=ops or ["barrier"], sizes=sizes)
    settings = ReplaySettings(
        trace=str(Path(request.trace).resolve()),
        world=program.world,
        steps=request.steps,
        rebucket=caps,
        repeats=request.iters or DEFAULT_REPEATS,
        pace=request.pace or request.pace_compute,
        pace_compute=request.pace_compute,
    )
    return trace, program, settings, collectives


def check_flags(request: ReplayRequest) -> tuple[float, list[int]]:
    """What the flags alone say, without the trace: the cap on a paced gap and the bucket
    caps to try; `ReplayRun` checks them as it is built, before the launcher is imported."""
    from commbench.sizes import parse_sizes

    max_gap = max_gap_for(request.max_gap, request.timeout)
    caps = parse_sizes(request.rebucket) if request.rebucket is not None else []
    if (request.bw is None) != (request.latency is None):
        raise UserError("--bw and --latency describe another fabric together: give both")
    if request.bw is not None and request.rebucket is None:
        raise UserError(
            "--bw and --latency predict the bucket advisor's caps on another fabric: "
            "give --rebucket too"
        )
    return max_gap, caps


def max_gap_for(max_gap: float | None, timeout: float) -> float:
    """The cap `--pace` puts on an idle gap: `--max-gap`, else DEFAULT_MAX_GAP_S, and at
    most half of `--timeout`: a replay that waits longer without issuing a call reads as
    hung to the watchdog."""
    limit = timeout / 2 if isinstance(timeout, int | float) and timeout > 0 else DEFAULT_TIMEOUT / 2
    if max_gap is None:
        return min(DEFAULT_MAX_GAP_S, limit)
    if isinstance(max_gap, bool) or not isinstance(max_gap, int | float):
        raise UserError(f"--max-gap: expected a number of seconds, got {type(max_gap).__name__}")
    check_range(max_gap, "--max-gap")
    if max_gap <= 0:
        raise UserError(f"--max-gap {max_gap:g}: expected a positive number of seconds")
    if max_gap > limit:
        raise UserError(
            f"--max-gap {max_gap:g} s is longer than half of --timeout {timeout:g} s: a paced "
            "wait that long would read as a hang; give a shorter --max-gap or a longer --timeout"
        )
    return float(max_gap)


def nproc_for(nproc: int | None, world: int, nnodes: int) -> int:
    """Ranks per node: the replay's world on one node, else the world over the nodes,
    exactly (a replay plays every traced rank)."""
    if nproc is None:
        if world % nnodes:
            raise UserError(
                f"the replay runs on {world} ranks, which {nnodes} nodes cannot share evenly: "
                "give --world a multiple of --nnodes"
            )
        return world // nnodes
    if nproc * nnodes != world:
        raise UserError(
            f"--nproc {nproc} x {nnodes} node(s) is {nproc * nnodes} ranks, but the replay runs "
            f"on {world}: leave --nproc out, or give --world {nproc * nnodes}"
        )
    return nproc


@dataclass(kw_only=True)
class ReplayRun(
    RunDirRequest, LaunchRequest, LaunchWarnings, ReplayRequest, PlacementRequest, Request
):
    """Every option of `commbench replay` and `replay_trace`, declared once."""

    on_progress: Callable[[int, int, ResultRow | None], None] | None = None
    """Called as rows are measured: `(done, total, row)` (API only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_flags(self)  # refused before the launcher is imported, or the trace read
