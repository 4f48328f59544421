"""What `commbench run` and `commbench.run_suite` are asked: the suite file, the machine's
overrides of its keys, the gate and the launch, declared once (`SuiteRun`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import Fraction, PathLike, Request
from commbench.flags import (
    ALLOW_MISMATCH,
    BACKEND,
    BASELINE,
    DEVICE,
    HISTORY,
    LABEL,
    NO_PLOT,
    NPROC,
    OUT,
    TOLERANCE,
)
from commbench.launch.request import LaunchRequest
from commbench.options import arg, cli, field_of

if TYPE_CHECKING:
    from commbench.results.schema import ResultRow


@dataclass(kw_only=True)
class SuiteRun(LaunchRequest, Request):
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
    out: PathLike = field_of(
        OUT, default="results/suites", help="Parent directory of the suite directory."
    )
    nproc: int | None = field_of(
        NPROC,
        default=None,
        help="Workers per node (overrides the suite's world_size key, which is per node too).",
    )
    device: str | None = field_of(DEVICE, default=None, help="cuda or cpu (overrides the suite).")
    backend: str | None = field_of(
        BACKEND, default=None, help="nccl or gloo (overrides the suite)."
    )
    tolerance: Fraction | None = field_of(
        TOLERANCE, default=None, help="Override the suite's compare.tolerance, e.g. 5%."
    )
    allow_mismatch: bool = field_of(
        ALLOW_MISMATCH, default=False, help="Compare with a baseline from a different machine."
    )
    no_plot: bool = field_of(NO_PLOT, default=False, help="Do not write plots after each run.")
    history: str | None = field_of(
        HISTORY,
        default=None,
        help="A runs history (SQLite file or postgresql:// URL): the suite's runs are added to "
        "it when it ends; with --gate, judged against it first.",
    )
    gate: bool = field(
        default=False,
        metadata=cli(
            help="Judge the suite against --history: each point against how far its median "
            "moved in the history's comparable runs (5 or more since its series last changed)."
        ),
    )
    confirm: int = field(
        default=0,
        metadata=cli(
            metavar="K",
            maximum=10,
            help="Measure the points that look worse again K times before the verdict: a drop "
            "that persists (worse in all K) fails, a one-off is a warning.",
        ),
    )
    label: str | None = field_of(
        LABEL,
        default=None,
        help="What the history records this suite's runs as (a commit, a driver version); "
        "default: the CI's commit variable (GITHUB_SHA, CI_COMMIT_SHA, ...), or the "
        "checkout's.",
    )
    on_event: Callable[[str], None] | None = None
    """Gets the progress lines the CLI prints (API only)."""
    on_progress: Callable[[int, int, ResultRow | None], None] | None = None
    """Gets each entry's points as `collectives` gives them (API only)."""
