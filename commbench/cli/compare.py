"""`commbench compare`: the regression gate between a baseline and a new run (or suite)."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.files import write_text
from commbench.results.exporters import Format
from commbench.results.store import writing


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
            from commbench.compare import parse_fraction
            from commbench.report.comparison import render_many
            from commbench.suites.store import compare_targets, exit_code, gate_for

            settings = gate_for(
                baseline,
                new,
                allow_mismatch=allow_mismatch,
                tolerance=None if tolerance is None else parse_fraction(tolerance, "--tolerance"),
                latency_tolerance=None
                if latency_tolerance is None
                else parse_fraction(latency_tolerance, "--latency-tolerance"),
                alpha=alpha,
                noisy_cv=noisy_cv,
            )
            results = compare_targets(baseline, new, settings)
            text = render_many(results, fmt)
            if out is not None:
                with writing(out):
                    out.parent.mkdir(parents=True, exist_ok=True)
                    write_text(out, text)
            code = exit_code(results)
        typer.echo(text, nl=False)
        for _, result in results:  # whatever the format: csv has no verdict line to say it
            if result.incomplete:
                typer.echo(f"commbench: error: {result.new}: {result.incomplete}", err=True)
        raise typer.Exit(code)
