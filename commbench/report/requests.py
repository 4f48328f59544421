"""What `commbench plot`, `report` and `export` (and their verbs) are asked, declared once;
light at import, as `--help` reads them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import (
    Against,
    InHistory,
    MismatchAllowed,
    OneOp,
    OutFile,
    PathLike,
    Request,
)
from commbench.flags import FORMAT, LABEL
from commbench.formats import Writes, help_text
from commbench.options import Group, arg, field_of, option, paths, use
from commbench.report.options import ExportFormat, Images, ReportFormat

if TYPE_CHECKING:
    from commbench.results.runs import Run, Suite


@dataclass(kw_only=True)
class OneRun(Group):
    """The stored run (or suite) `report` and `export` read."""

    run: PathLike | Run | Suite = field(
        kw_only=False,
        metadata=arg(metavar="RUN_DIR", type=Path, help="Run directory or suite directory."),
    )


@dataclass(kw_only=True)
class PlotRequest(OutFile, Request):
    """Every option of `commbench plot` and `plot_run`, declared once."""

    runs: PathLike | Run | Suite | Sequence[PathLike | Run | Suite] = field(
        kw_only=False,
        metadata=paths(
            "RUN_DIR", help="Run directories; several draw one line per run on each chart."
        ),
    )
    out = use(
        help="Directory for the figures. Default: RUN_DIR/plots (SUITE_DIR/plots) for one, "
        "./plots for several.",
    )
    formats: str | Sequence[str] = option(default="png,svg", type=str, help="Comma list: png, svg.")
    peak: str | float | None = option(
        metavar="GBPS",
        type=str,
        help="Draw this theoretical peak (GB/s) on the bandwidth panels. Default: the "
        "slowest link among the run's GPUs from its recorded topology; none for CPU runs.",
    )
    labels: Sequence[str] | None = field_of(
        LABEL,
        type=list[str],
        help="Name a run in the legends; repeat once per run, in order (a suite counts "
        "one per entry). Default: the suite entry's name, else the directory name.",
    )


@dataclass(kw_only=True)
class ReportRequest(OneRun, OutFile, Against, MismatchAllowed, InHistory, Request):
    """Every option of `commbench report` and `report_run`, declared once."""

    run = use()
    fmt: str = field_of(FORMAT, default="md", type=ReportFormat, help=help_text(Writes.REPORT))
    out = use()
    baseline = use()
    allow_mismatch = use()
    history = use(
        help="A runs history (SQLite file or postgresql:// URL): add each run's trend in "
        "it, its points against the runs before, and each op's series with its change points.",
    )
    images: str | None = option(
        type=Images,
        help="embed: plots as data URIs (self-contained; the HTML default); files: PNGs "
        "in <name>_files/ beside --out, linked (the markdown default with --out); none: "
        "tables only (markdown on stdout: a terminal or $GITHUB_STEP_SUMMARY, which "
        "drops data URIs).",
    )


@dataclass(kw_only=True)
class ExportRequest(OneRun, OutFile, Against, MismatchAllowed, OneOp, Request):
    """Every option of `commbench export` and `export_run`, declared once."""

    run = use(help="Run directory (a diagnose run adds its verdicts).")
    fmt: str = field_of(
        FORMAT, default="openmetrics", type=ExportFormat, help=help_text(Writes.EXPORT)
    )
    out = use(
        help="Write here instead of stdout, atomically (a temporary file beside it, then "
        "renamed): e.g. FILE.prom in node_exporter's textfile directory.",
    )
    baseline = use(
        help="Add the regression gate against this run: each point's verdict and speed ratio."
    )
    allow_mismatch = use()
    op = use(
        help="With --format nccl-tests-json: the op to write, when the run measured "
        "several (nccl-tests' file holds one op's results).",
    )


@dataclass(frozen=True, slots=True)
class Plotted:
    """What `plot_run` wrote, and what it has to say of the runs it drew (a run that did not
    finish is drawn, with a warning)."""

    written: list[Path]
    warnings: list[str]


@dataclass(frozen=True, slots=True)
class Report:
    """A rendered report: its text, and where it was written (None: the caller prints it)
    with the image files beside it; `note` is a hint for the person reading it."""

    text: str
    out: Path | None
    note: str | None = None
