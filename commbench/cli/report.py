"""`commbench report`: one self-contained markdown or HTML document per run or suite."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.errors import UserError
from commbench.files import write_bytes, write_text
from commbench.report.options import Images, ReportFormat
from commbench.results.store import check_output, writing


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
            from commbench.report.document import render_report

            chosen = images
            if chosen is None:
                if fmt is ReportFormat.html:
                    chosen = Images.embed
                else:
                    chosen = Images.files if out is not None else Images.none
            if chosen is Images.files and out is None:
                raise UserError("--images files writes PNGs beside the report: give --out FILE")
            reads = [run] if baseline is None else [run, baseline]
            if out is not None:  # refused before the work, its image files after it
                check_output([out], reads)
            comparisons = None
            if baseline is not None:
                from commbench.suites.store import compare_targets, gate_for

                settings = gate_for(baseline, run, allow_mismatch=allow_mismatch)
                comparisons = compare_targets(baseline, run, settings)
            folder = f"{out.stem}_files" if out is not None else "report_files"
            rendered = render_report(run, fmt, chosen, comparisons, folder=folder)
            if out is not None:
                check_output([out, *(out.parent / rel for rel in rendered.files)], reads)
                with writing(out):
                    out.parent.mkdir(parents=True, exist_ok=True)
                    for rel, png in rendered.files.items():
                        target = out.parent / rel
                        target.parent.mkdir(parents=True, exist_ok=True)
                        write_bytes(target, png)
                    write_text(out, rendered.text)
                typer.echo(str(out), err=True)
                return
            if images is None and fmt is ReportFormat.md:
                typer.echo(
                    "commbench: note: plots left out of markdown on stdout: --out FILE writes "
                    "them beside it, "
                    "--images embed puts them inline",
                    err=True,
                )
        typer.echo(rendered.text, nl=False)
