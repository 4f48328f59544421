"""`commbench plot`: PNG/SVG figures drawn from stored results."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors


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
            import commbench.api

            plotted = commbench.api.plot_run(
                runs, out=out, formats=formats, peak=peak, labels=labels or None
            )
        for warning in plotted.warnings:  # its points are drawn, but not a finished run's
            typer.echo(f"commbench: warning: {warning}", err=True)
        for path in plotted.written:
            typer.echo(str(path))
