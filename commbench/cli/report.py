"""`commbench report`: one self-contained markdown or HTML document per run or suite."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.files import write_text
from commbench.report.options import Images, ReportFormat
from commbench.results.store import writing


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        run: Path = typer.Argument(
            ..., metavar="RUN_DIR", help="Run directory or suite directory."
        ),
        fmt: ReportFormat = typer.Option(ReportFormat.md, "--format", "-f", help="md or html."),
        out: Path = typer.Option(None, "--out", "-o", help="Write here instead of stdout."),
        baseline: Path = typer.Option(
            None, "--baseline", help="Add the regression gate against this run or suite."
        ),
        allow_mismatch: bool = typer.Option(
            False,
            "--allow-mismatch",
            help="With --baseline: compare runs whose GPU model, world size, backend or topology differ.",
        ),
        images: Images = typer.Option(
            Images.embed,
            "--images",
            help="embed: plots as data URIs (self-contained); none: tables only (GitHub step summaries drop data URIs).",
        ),
    ) -> None:
        """Context, topology, tables and plots in one document for a ticket or $GITHUB_STEP_SUMMARY."""
        with reported_errors():
            from commbench.report.document import render_report

            comparisons = None
            if baseline is not None:
                from commbench.suites.store import compare_targets, gate_for

                settings = gate_for(baseline, run, allow_mismatch=allow_mismatch)
                comparisons = compare_targets(baseline, run, settings)
            text = render_report(run, fmt, images, comparisons)
            if out is not None:
                with writing(out):
                    out.parent.mkdir(parents=True, exist_ok=True)
                    write_text(out, text)
                typer.echo(str(out), err=True)
                return
        typer.echo(text, nl=False)
