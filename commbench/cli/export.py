"""`commbench export`: a run's metrics for Prometheus (OpenMetrics or text format 0.0.4)."""

from __future__ import annotations

import typer

from commbench.api import ExportRequest
from commbench.cli._common import reported_errors, verb_command
from commbench.options import values


def register(app: typer.Typer) -> None:
    @verb_command(app, "export", ExportRequest)
    def export(request: ExportRequest) -> None:
        """Metrics of a run: busbw, algbw and time quantiles per point, link health, the
        diagnose and compare verdicts, for a node_exporter textfile collector (docs/metrics.md)."""
        with reported_errors():
            import commbench.api

            text = commbench.api.export_run(**values(request))
        if request.out is not None:
            typer.echo(str(request.out), err=True)
            return
        typer.echo(text, nl=False)
