"""`commbench plot`: PNG/SVG figures drawn from stored results."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.lists import split_list


def expand_runs(paths: list[Path]) -> list[Path]:
    """Run directories as given; a suite directory stands for every run it holds."""
    from commbench.results.runs import is_suite, load_suite

    out = []
    for path in paths:
        if is_suite(path):
            out += [path / e.path for e in load_suite(path).entries if e.path]
        else:
            out.append(path)
    return out


def register(app: typer.Typer) -> None:
    @app.command("plot")
    def plot(
        runs: list[Path] = typer.Argument(
            ...,
            metavar="RUN_DIR",
            help="Run directories; several draw one line per run on each chart.",
        ),
        out: Path = typer.Option(
            None,
            "--out",
            "-o",
            help="Directory for the figures. Default: RUN_DIR/plots (SUITE_DIR/plots) for one, ./plots for several.",
        ),
        formats: str = typer.Option("png,svg", "--formats", help="Comma list: png, svg."),
        peak: str = typer.Option(
            None,
            "--peak",
            metavar="GBPS",
            help="Draw this theoretical peak (GB/s) on the bandwidth panels. Default: the "
            "slowest link among the run's GPUs from its recorded topology; none for CPU runs.",
        ),
        labels: list[str] = typer.Option(
            None,
            "--label",
            metavar="NAME",
            help="Name a run in the legends; repeat once per run, in order (a suite counts "
            "one per entry). Default: the suite entry's name, else the directory name.",
        ),
    ) -> None:
        """Plot latency and busbw against message size per op, the strategies and the p2p heatmap."""
        with reported_errors():
            from commbench.numbers import parse_number
            from commbench.report.plots import check_labels, check_peak, plot_runs
            from commbench.results.runs import load_run
            from commbench.results.store import PLOTS_DIR

            peak_gbps = check_peak(parse_number(peak, "--peak")) if peak is not None else None
            loaded = [load_run(p).held_here() for p in expand_runs(runs)]
            for run in loaded:  # its points are drawn, but they are not a finished run's
                if run.unfinished:
                    typer.echo(f"commbench: warning: {run.path} {run.unfinished}", err=True)
            single = runs[0] if len(runs) == 1 else None  # one run, or one suite
            target = out or (single / PLOTS_DIR if single is not None else Path(PLOTS_DIR))
            names = check_labels(labels or None, loaded)
            written = plot_runs(
                loaded,
                target,
                split_list(formats, "--formats"),
                peak_gbps=peak_gbps,
                labels=names,
                reads=runs,
            )
        for path in written:
            typer.echo(str(path))
