"""`commbench collectives`: time every torch.distributed collective across a size sweep."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from commbench.api import CollectivesRun
from commbench.cli._common import (
    SaidAtOnce,
    place_ranks,
    reported_errors,
    said_first,
    say,
    verb_command,
)
from commbench.flags import Output
from commbench.formats import Writes
from commbench.options import values
from commbench.results.exporters import Format

if TYPE_CHECKING:  # heavy or launch-time modules, imported inside the command at run time
    from commbench.results.runs import Run

STRAGGLER_LINES = 5
"""At most this many lines about the ranks the others waited for; the report lists them all."""


def register(app: typer.Typer) -> None:
    @verb_command(
        app, "collectives", CollectivesRun, output=Output(Writes.TABLES, "Output format on stdout")
    )
    def collectives(request: CollectivesRun, fmt: Format) -> None:
        """Time every torch.distributed collective across message sizes (algbw/busbw as nccl-tests)."""
        with reported_errors():
            import commbench.api
            from commbench.cli.live import LiveRows

            notes = place_ranks(request)  # no GPU: gloo on CPU ranks; -n, said first
            request.on_warning = warned = SaidAtOnce()  # a node's limits, before the launch

            # every point on stderr as it is measured; stdout gets only what --format asks for
            with LiveRows() as on_progress:
                request.on_progress = said_first(notes, on_progress)
                run = commbench.api.run_collectives(**values(request))
            report(run, fmt, warned)


def report(run: Run, fmt: Format, warned: SaidAtOnce | None = None) -> None:
    """Print a finished run: its table (and the strategy comparison), the devices used and
    the bandwidth summary on stdout (csv and json: the rows alone, so they stay parseable);
    the noise warning, the ranks the others waited for and the status line on stderr; then
    exit as the run's verdict says. `warned`: what the run said as it started."""
    from commbench.compare import noisy_warning
    from commbench.health.findings import notes_block
    from commbench.results.exporters import export
    from commbench.results.stragglers import summary_lines
    from commbench.results.summary import render, summarise

    rows, record = run.rows, run.record
    if rows:
        typer.echo(export(rows, fmt), nl=False)
        human = fmt.human
        if human and any(r.strategy for r in rows):
            from commbench.strategies.report import render_comparison

            typer.echo(
                "\n" + render_comparison(rows, fmt, record.settings.get("backend")), nl=False
            )
        summary = render(summarise(rows, run.context.ranks), markdown=fmt.markdown)
        if human and summary:
            typer.echo("\n" + summary, nl=False)
        if human:
            from commbench.escape import markdown_text
            from commbench.results.network import network_lines

            network = network_lines(rows, run.context)
            if network:  # a titled block, like the link health notes below it
                md = fmt.markdown
                title = "\n**Network efficiency**\n" if md else "\nNetwork efficiency:"
                typer.echo(title)
                for line in network:
                    typer.echo(f"- {markdown_text(line)}" if md else f"  {line}")
    health = notes_block(run.context.health, markdown=fmt.markdown)
    if health:  # after the table on stdout; on stderr where stdout is csv or json
        typer.echo(health, nl=False, err=not fmt.human)
    warning = noisy_warning(rows)
    # the run's own (a degraded cross-node watch), less those said as it started
    for text in (warned or SaidAtOnce()).unsaid([t for t in [warning, *record.warnings] if t]):
        say(f"warning: {text}")
    for line in summary_lines(run.straggler_summary(), limit=STRAGGLER_LINES):
        say(line)
    if record.note and not rows:
        # a node without global rank 0: its ranks measured, another node holds the rows
        say(f"{record.status}: {record.note}")
    else:
        say(f"{record.status}: {len(rows)}/{record.points_total or 0} points in {run.path}")
    if run.plots:
        say(run.plots)
    error = run.verdict.error()
    if error is not None:
        raise error
