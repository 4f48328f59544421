"""`commbench report`: one self-contained markdown or HTML document per run or suite."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.report.options import Images, ReportFormat


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
            None,
            "--images",
            help="embed: plots as data URIs (self-contained; the HTML default); files: PNGs in "
            "<name>_files/ beside --out, linked (the markdown default with --out); none: tables "
            "only (markdown on stdout: a terminal or $GITHUB_STEP_SUMMARY, which drops data URIs).",
        ),
    ) -> None:
        """Context, summary, topology, tables with their plots, strategies and model, in one
        document for a ticket or $GITHUB_STEP_SUMMARY."""
        with reported_errors():
            import commbench.api

            report = commbench.api.report_run(
                run,
                fmt=fmt.value,
                out=out,
                baseline=baseline,
                allow_mismatch=allow_mismatch,
                images=None if images is None else images.value,
            )
        if report.out is not None:
            typer.echo(str(report.out), err=True)
            return
        if report.note is not None:
            typer.echo(f"commbench: note: {report.note}", err=True)
        typer.echo(report.text, nl=False)
