"""What `commbench run` and `commbench.run_suite` are asked: the suite file, the machine's
overrides of its keys, the gate and the launch, declared once (`SuiteRun`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import (
    InHistory,
    Labelled,
    MismatchAllowed,
    NoPlot,
    OutDir,
    PathLike,
    Request,
    Tolerated,
)
from commbench.collectives.placement import PlacementRequest
from commbench.flags import BASELINE
from commbench.launch.request import LaunchRequest
from commbench.options import arg, field_of, option, use

if TYPE_CHECKING:
    from commbench.results.schema import ResultRow


@dataclass(kw_only=True)
class SuiteRun(
    LaunchRequest,
    PlacementRequest,
    NoPlot,
    OutDir,
    Tolerated,
    MismatchAllowed,
    InHistory,
    Labelled,
    Request,
):
    """Every option of `commbench run` and `run_suite`, declared once."""

    config: PathLike = field(
        kw_only=False,
        metadata=arg(metavar="SUITE.yaml", type=Path, help="Suite file, e.g. configs/ci.yaml."),
    )
    baseline: PathLike | None = field_of(
        BASELINE,
        default=None,
        also=("-b",),
        help="Baseline suite (or run) directory: compare every run and exit like `compare`.",
    )
    out = use(default="results/suites", help="Parent directory of the suite directory.")
    nproc = use(
        help="Workers per node (overrides the suite's world_size key, which is per node too).",
    )
    device = use(help="cuda or cpu (overrides the suite).")
    backend = use(help="nccl or gloo (overrides the suite).")
    tolerance = use()
    allow_mismatch = use(help="Compare with a baseline from a different machine.")
    no_plot = use()
    history = use(
        help="A runs history (SQLite file or postgresql:// URL): the suite's runs are added to "
        "it when it ends; with --gate, judged against it first.",
    )
    gate: bool = option(
        default=False,
        help="Judge the suite against --history: each point against how far its median "
        "moved in the history's comparable runs (5 or more since its series last changed).",
    )
    confirm: int = option(
        default=0,
        metavar="K",
        maximum=10,
        help="Measure the points that look worse again K times before the verdict: a drop "
        "that persists (worse in all K) fails, a one-off is a warning.",
    )
    label = use(
        help="What the history records this suite's runs as (a commit, a driver version); "
        "default: the CI's commit variable (GITHUB_SHA, CI_COMMIT_SHA, ...), or the "
        "checkout's.",
    )
    on_event: Callable[[str], None] | None = None
    """Gets the progress lines the CLI prints (API only)."""
    on_progress: Callable[[int, int, ResultRow | None], None] | None = None
    """Gets each entry's points as `collectives` gives them (API only)."""
