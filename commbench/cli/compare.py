"""`commbench compare`: the regression gate between a baseline and a new run (or suite)."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.files import write_text
from commbench.results.exporters import Format
from commbench.results.store import check_output, writing


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        baseline: Path = typer.Argument(
            ..., metavar="BASELINE", help="Baseline run directory (or suite directory)."
        ),
        new: Path = typer.Argument(
            ..., metavar="NEW", help="New run directory (or suite directory)."
        ),
        tolerance: str = typer.Option(
            None,
            "--tolerance",
            "-t",
            help="Largest busbw drop accepted at bandwidth-bound sizes. Default 5%, or what "
            "the suite's config says when comparing suites.",
        ),
        latency_tolerance: str = typer.Option(
            None,
            "--latency-tolerance",
            help="Largest drop accepted at latency-bound sizes (busbw under half the peak). "
            "Default 15%, or the suite's.",
        ),
        alpha: float = typer.Option(
            None,
            "--alpha",
            help="Significance level of the one-sided Mann-Whitney test. Default 0.01.",
        ),
        noisy_cv: float = typer.Option(
            None,
            "--noisy-cv",
            help="Robust spread (IQR / 1.349 median) above which a point, or the whole "
            "baseline, only warns. Default 0.2.",
        ),
        allow_mismatch: bool = typer.Option(
            False,
            "--allow-mismatch",
            help="Compare runs whose GPU model, world size, backend or topology differ.",
        ),
        fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format."),
        out: Path = typer.Option(None, "--out", "-o", help="Also write the output to this file."),
    ) -> None:
        """Fail (exit 1) when the new run is significantly slower than the baseline; 2 = incomparable."""
        with reported_errors():
            import commbench.api
            from commbench.report.comparison import render_many

            if out is not None:
                check_output([out], [baseline, new])
            gate = commbench.api.compare_runs(
                baseline,
                new,
                tolerance=tolerance,
                latency_tolerance=latency_tolerance,
                alpha=alpha,
                noisy_cv=noisy_cv,
                allow_mismatch=allow_mismatch,
            )
            text = render_many(gate.comparisons, fmt)
            if out is not None:
                with writing(out):
                    out.parent.mkdir(parents=True, exist_ok=True)
                    write_text(out, text)
        typer.echo(text, nl=False)
        for _, result in gate:  # whatever the format: csv has no verdict line to say it
            if result.incomplete:
                typer.echo(f"commbench: error: {result.new}: {result.incomplete}", err=True)
        raise typer.Exit(gate.exit_code)
