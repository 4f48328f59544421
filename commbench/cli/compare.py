"""`commbench compare`: the regression gate between a baseline and a new run (or suite)."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.api import CompareRequest
from commbench.cli._common import reported_errors, say, verb_command
from commbench.files import write_text
from commbench.flags import OUT, Output
from commbench.formats import Writes
from commbench.options import values
from commbench.results.exporters import Format


def register(app: typer.Typer) -> None:
    @verb_command(app, "compare", CompareRequest, output=Output(Writes.TABLES))
    def compare(
        request: CompareRequest,
        fmt: Format,
        out: Path = OUT.option(None, help="Also write the output to this file."),
    ) -> None:
        """Fail (exit 1) when the new run is significantly slower than the baseline; 2 = incomparable."""
        with reported_errors():
            import commbench.api
            from commbench.report.comparison import render_many
            from commbench.results.lifecycle import settle_written
            from commbench.results.store import check_output, writing

            reads = [Path(str(request.baseline)), Path(str(request.new))]
            if out is not None:
                check_output([out], reads)
            gate = commbench.api.compare_runs(**values(request))
            text = render_many(gate.comparisons, fmt)
            if out is not None:
                with writing(out):
                    out.parent.mkdir(parents=True, exist_ok=True)
                    write_text(out, text)
                settle_written([out], reads, "commbench compare")
        typer.echo(text, nl=False)
        for _, result in gate:  # whatever the format: csv has no verdict line to say it
            if result.incomplete:
                say(f"error: {result.new}: {result.incomplete}")
        raise typer.Exit(gate.exit_code)
