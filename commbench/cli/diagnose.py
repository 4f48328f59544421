"""`commbench diagnose`: find the slow node, GPU or link; run it on every node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from commbench.api import DiagnoseRun
from commbench.cli._common import (
    SaidAtOnce,
    place_ranks,
    progress_bar,
    reported_errors,
    said_first,
    say,
    verb_command,
)
from commbench.flags import Output
from commbench.formats import Choice, Writes
from commbench.options import values

if TYPE_CHECKING:
    from commbench.diagnose.run import Diagnosis


def register(app: typer.Typer) -> None:
    @verb_command(app, "diagnose", DiagnoseRun, output=Output(Writes.DIAGNOSIS, lead=""))
    def diagnose(request: DiagnoseRun, fmt: Choice) -> None:
        """Find the one slow node, GPU or link: tests inside every node, then across nodes."""
        with reported_errors():
            import commbench.api

            notes = place_ranks(request)  # without a GPU: gloo on CPU ranks, said first
            progress = progress_bar()
            task = progress.add_task("starting workers", total=None)

            def on_test(event: dict[str, Any]) -> None:
                label = f"{event.get('stage')} round {int(event.get('round', 0)) + 1}"
                progress.update(task, advance=1, description=label)

            request.on_test = said_first(notes, on_test)
            request.on_warning = warned = SaidAtOnce()  # a node's limits, before the muster
            with progress:
                diagnosis = commbench.api.run_diagnose(**values(request))
            typer.echo(render(diagnosis, fmt), nl=False)
            for note in warned.unsaid(diagnosis.notes):
                say(f"warning: {note}")
            say(
                f"{diagnosis.verdict}: {len(diagnosis.nodes)} node(s); "
                f"diagnosis in {diagnosis.path}"
            )
            if diagnosis.failure:
                say(diagnosis.failure)
        raise typer.Exit(diagnosis.exit_code)


def render(diagnosis: Diagnosis, fmt: Choice) -> str:
    from commbench.diagnose.render import render_diagnosis

    return render_diagnosis(diagnosis, fmt.value)
