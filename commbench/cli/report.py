"""`commbench report`: one self-contained markdown or HTML document per run or suite."""

from __future__ import annotations

import typer

from commbench.api import ReportRequest
from commbench.cli._common import reported_errors, say, verb_command
from commbench.options import values


def register(app: typer.Typer) -> None:
    @verb_command(app, "report", ReportRequest)
    def report(request: ReportRequest) -> None:
        """Context, summary, topology, tables with their plots, strategies and model, in one
        document for a ticket or $GITHUB_STEP_SUMMARY."""
        with reported_errors():
            import commbench.api

            report = commbench.api.report_run(**values(request))
        if report.out is not None:
            typer.echo(str(report.out), err=True)
            return
        if report.note is not None:
            say(f"note: {report.note}")
        typer.echo(report.text, nl=False)
