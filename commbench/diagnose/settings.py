"""What `commbench diagnose` is asked to do, beside the launch it shares with `collectives`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.arguments import HangTimeout, Iterations, Request, Tolerated
from commbench.collectives.placement import PlacementRequest, placement_for
from commbench.diagnose.plan import MAX_ROUNDS
from commbench.errors import UserError
from commbench.fields import known_fields
from commbench.flags import BASELINE, SIZES
from commbench.launch.request import LaunchRequest, LaunchWarnings, RunDirRequest
from commbench.lists import split_list
from commbench.options import field_of, option, use
from commbench.results.names import DIAGNOSE_STAGES

if TYPE_CHECKING:
    from commbench.collectives.placement import Placement
    from commbench.collectives.settings import CollectivesSettings
    from commbench.launch.job import MultiNodeJob

STAGES = DIAGNOSE_STAGES
GPU_DEFAULT_SIZE = "64M"
CPU_DEFAULT_SIZE = "1M"
"""Bandwidth-bound on each: a GPU link needs tens of MiB to reach its peak, gloo ~1 MiB."""
DEFAULT_TOLERANCE = 0.25
DEFAULT_ALPHA = 0.01
DEFAULT_ITERS = 10
DEFAULT_WARMUP = 3


@dataclass(kw_only=True, slots=True)
class DiagnoseSettings:
    size_bytes: int
    """Bytes per rank of each test's all_reduce."""
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    tolerance: float = DEFAULT_TOLERANCE
    """A test is short when more than this below its expectation (and significantly so)."""
    alpha: float = DEFAULT_ALPHA
    group: int = 2
    """Nodes per screening test (screen mode: more than `plan.SMALL` nodes)."""
    max_rounds: int = MAX_ROUNDS
    expected_gbps: dict[str, float] = field(default_factory=dict)
    """Expectations by stage (an expectations file or a baseline); peers' median otherwise."""
    baseline_notes: list[str] = field(default_factory=list)
    """What reading the baseline left to say (the lines it skipped): said on stderr with the
    verdict, and not stored (run.json keeps what decides the diagnosis)."""

    def __post_init__(self) -> None:
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            raise UserError(
                f"--stages: choose from {', '.join(STAGES)}, got {','.join(self.stages) or 'none'}"
            )
        if not 0 < self.tolerance < 1:
            raise UserError(f"--tolerance must be between 0% and 100%, got {self.tolerance}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["baseline_notes"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiagnoseSettings:
        return cls(**known_fields(cls, data))


@dataclass(kw_only=True)
class DiagnoseRequest(Tolerated, Iterations, HangTimeout):
    """What a user asks of `commbench diagnose`, beside where its ranks go and the launch:
    each field is declared once here and is the flag and the `run_diagnose` keyword."""

    sizes: str | int | None = field_of(
        SIZES,
        default=None,
        metavar="SIZE",
        help="Bytes per rank of each test (bandwidth-bound). "
        f"Default {GPU_DEFAULT_SIZE} on GPUs, {CPU_DEFAULT_SIZE} on CPU.",
    )
    tolerance = use(
        help=f"How far below its expectation a test may fall. Default {DEFAULT_TOLERANCE:.0%}."
    )
    stages: str | Sequence[str] | None = option(
        metavar="intra,inter", type=str, help="Stages to run. Default both."
    )
    baseline: str | Path | None = field_of(
        BASELINE,
        default=None,
        metavar="EXPECTATIONS",
        help="Expected GB/s per stage (JSON) or a diagnose run of a good cluster; "
        "default: the median of the peers.",
    )
    iters = use(help=f"Timed iterations per test. Default {DEFAULT_ITERS}.")
    warmup = use(help=f"Warm-up iterations per test. Default {DEFAULT_WARMUP}.")
    timeout = use(help="Seconds without progress before a node is declared hung.")


def diagnose_settings(
    place: Placement, request: DiagnoseRequest
) -> tuple[DiagnoseSettings, CollectivesSettings]:
    """What a `diagnose` command line asks for, on nodes placed as `place`: the diagnosis's
    own settings and the collectives settings of its launch. The command, the Python API
    and `slurm-script` (checking the command it wraps) all build them here."""
    from commbench.collectives.settings import DEFAULT_TIMEOUT, Timing, build_settings
    from commbench.diagnose.expectations import load_expectations
    from commbench.sizes import parse_sizes

    sizes, stages, baseline = request.sizes, request.stages, request.baseline
    tolerance, iters, timeout = request.tolerance, request.iters, request.timeout
    if sizes is None:
        sizes = GPU_DEFAULT_SIZE if place.device == "cuda" else CPU_DEFAULT_SIZE
    parsed = parse_sizes(str(sizes))
    if len(parsed) != 1:
        raise UserError(f"--sizes: diagnose tests at one size, got {len(parsed)} ({sizes})")
    if isinstance(stages, str):
        stages = split_list(stages, "--stages")
    expected = load_expectations(Path(baseline)) if baseline is not None else None
    settings = DiagnoseSettings(
        size_bytes=parsed[0],
        stages=list(stages) if stages is not None else list(STAGES),
        tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance,
        expected_gbps=expected.gbps if expected else {},
        baseline_notes=expected.notes if expected else [],
    )
    timing = Timing(
        warmup=request.warmup,
        iters=DEFAULT_ITERS if iters is None else iters,
        timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
    )
    collectives = build_settings(place, timing, ops=["all_reduce"], sizes=parsed, check=False)
    return settings, collectives


@dataclass(kw_only=True)
class DiagnoseRun(
    RunDirRequest, LaunchRequest, LaunchWarnings, DiagnoseRequest, PlacementRequest, Request
):
    """Every option of `commbench diagnose` and `run_diagnose`, declared once."""

    on_test: Callable[[dict[str, object]], None] | None = None
    """Called as each test ends, with its event (API only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # every value that needs no machine refused before the machine is asked: the
        # settings on a node of one GPU, as `CollectivesRun` checks its own (issue 43)
        diagnose_settings(placement_for(1, self.device, self.nproc, self.backend), self)


def check_wrapped(request: DiagnoseRun, job: MultiNodeJob) -> None:
    """What `slurm-script` and `k8s-manifest` check of the `diagnose` they wrap: the
    diagnosis and its launch's settings, placed on the job's nodes."""
    place = job.place(request.device, request.nproc, request.backend)
    _, diagnosed = diagnose_settings(place, request)
    job.check_gpus(diagnosed.placement.device, diagnosed.placement.nproc)
