"""`commbench history`: a store of runs, their series over time and the change points in them
(docs/history.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from commbench.api import HistoryAdd, HistoryChanges, HistoryList, HistoryPlot, HistoryShow
from commbench.cli._common import reported_errors, verb_command
from commbench.flags import Output
from commbench.formats import Writes
from commbench.options import values
from commbench.results.exporters import Format

if TYPE_CHECKING:
    from commbench.history.store import FoundChange

history_app = typer.Typer(
    name="history",
    help="A history of runs: their series over time, change points and what changed at them.",
    no_args_is_help=True,
)

_OUTPUT = Output(Writes.TABLES)


@verb_command(history_app, "add", HistoryAdd)
def add(request: HistoryAdd) -> None:
    """Add runs (or a suite's runs) to the history; a run already there is stored once.

    One line per run on stdout (added, or already there), then each change point the new runs
    revealed. A run that did not finish or failed is refused (exit 2), and nothing is added."""
    with reported_errors():
        import commbench.api

        added = commbench.api.history_add(**values(request))
    for run in added.runs:
        state = "added" if run.added else "already there"
        typer.echo(f"{state}: {run.path} ({run.run_id}, id {run.id}, {run.points} points)")
    for change in added.changes:
        typer.echo(f"change: {_change_line(change)}")


def _change_line(change: FoundChange) -> str:
    from commbench.tables import fixed

    changed = "; ".join(f"{k} {a} -> {b}" for k, (a, b) in change.changed.items()) or "nothing"
    return (
        f"{change.series.label} [series {change.series.id}]: x{fixed(change.ratio)} "
        f"[{fixed(change.ratio_low)}, {fixed(change.ratio_high)}] at {change.run_id} "
        f"(p={change.p_value:.1e}); changed: {changed}"
    )


@verb_command(history_app, "list", HistoryList, output=_OUTPUT)
def list_runs(request: HistoryList, fmt: Format) -> None:
    """The runs of the history, oldest first: id, run_id, time, label, kind, machine, points."""
    with reported_errors():
        import commbench.api
        from commbench.history.render import runs_document
        from commbench.results.exporters import write

        runs = commbench.api.history_list(**values(request))
        typer.echo(write(runs_document(runs), fmt), nl=False)


@verb_command(history_app, "show", HistoryShow, output=_OUTPUT)
def show(request: HistoryShow, fmt: Format) -> None:
    """A run's points (with their series' ids), or a series' values over its runs with its
    change points."""
    with reported_errors():
        import commbench.api
        from commbench.history.render import run_document, series_document
        from commbench.results.exporters import write

        shown = commbench.api.history_show(**values(request))
        if shown.run is not None:
            doc = run_document(shown.run, shown.points)
        else:
            assert shown.series is not None
            doc = series_document(shown.series, shown.values, shown.changes)
        typer.echo(write(doc, fmt), nl=False)


@verb_command(history_app, "changes", HistoryChanges, output=_OUTPUT)
def changes(request: HistoryChanges, fmt: Format) -> None:
    """The change points of every series, oldest first: the first run after each, the ratio
    of the medians with its 95% interval and p-value, and what changed between the runs on
    either side (--format json: an array)."""
    with reported_errors():
        import commbench.api
        from commbench.history.render import changes_document
        from commbench.results.exporters import write

        found = commbench.api.history_changes(**values(request))
        typer.echo(write(changes_document(found), fmt), nl=False)


@verb_command(history_app, "plot", HistoryPlot)
def plot(request: HistoryPlot) -> None:
    """Each series over its runs, its change points marked and what changed written beside
    them: one figure per series (choose with --op, --sizes, --series)."""
    with reported_errors():
        import commbench.api

        written = commbench.api.history_plot(**values(request))
    for path in written:
        typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.add_typer(history_app, name="history")
