"""`commbench run`: a suite from a YAML file, optionally gated against a baseline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commbench.api import SuiteRun
from commbench.cli._common import reported_errors, say, verb_command
from commbench.flags import Output
from commbench.formats import Writes
from commbench.options import values
from commbench.results.exporters import Format

if TYPE_CHECKING:
    from commbench.results.record import Entry


def _tables(suite_dir: Path, entries: list[Entry], fmt: Format) -> str:
    """What the collectives and strategies runs measured, as `commbench collectives` prints
    it: a table per run, or one CSV/JSON document of every row (op, strategy and dtype tell
    the runs apart)."""
    from commbench.results.exporters import export
    from commbench.results.runs import load_run
    from commbench.results.summary import render, summarise

    runs = [
        (entry, load_run(suite_dir / entry.path).rows)
        for entry in entries
        if entry.path is not None and entry.section in ("collectives", "strategies")
    ]
    if not fmt.human:
        every = [row for _, rows in runs for row in rows]
        return export(every, fmt) if every else ""
    markdown = fmt.markdown
    return "\n".join(
        f"=== {entry.name} ({entry.status}) ===\n\n{export(rows, fmt)}"
        + (f"\n{summary}" if (summary := render(summarise(rows), markdown=markdown)) else "")
        for entry, rows in runs
        if rows
    )


def register(app: typer.Typer) -> None:
    @verb_command(
        app, "run", SuiteRun, output=Output(Writes.TABLES, "Format of the comparison on stdout")
    )
    def run(request: SuiteRun, fmt: Format) -> None:
        """Run a suite (collectives, strategies, p2p, topo) into one suite directory."""
        with reported_errors():
            import commbench.api
            from commbench.cli.live import LiveRows

            # `[i/n] entry: measuring`, then the entry's points as `collectives` shows them
            with LiveRows() as on_progress:
                request.on_event, request.on_progress = say, on_progress
                outcome = commbench.api.run_suite(**values(request))
            if outcome.comparisons is not None:
                from commbench.report.comparison import render_many

                typer.echo(render_many(outcome.comparisons, fmt), nl=False)
            else:
                typer.echo(_tables(outcome.path, outcome.entries, fmt), nl=False)
            for entry in outcome.failed:
                say(f"{entry.name} {entry.status}: {entry.failure}")
            say(f"suite written to {outcome.path}")
            code = outcome.exit_code
        sys.stdout.flush()
        raise typer.Exit(code)
