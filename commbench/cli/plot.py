"""`commbench plot`: PNG/SVG figures drawn from stored results."""

from __future__ import annotations

import typer

from commbench.api import PlotRequest
from commbench.cli._common import reported_errors, say, verb_command
from commbench.options import values


def register(app: typer.Typer) -> None:
    @verb_command(app, "plot", PlotRequest)
    def plot(request: PlotRequest) -> None:
        """Plot latency and busbw against message size per op, the strategies and the p2p heatmap."""
        with reported_errors():
            import commbench.api

            plotted = commbench.api.plot_run(**values(request))
        for warning in plotted.warnings:  # its points are drawn, but not a finished run's
            say(f"warning: {warning}")
        for path in plotted.written:
            typer.echo(str(path))
