"""`commbench replay`: replay a trace's collectives here, and explain them with the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from commbench.api import ReplayRun
from commbench.cli._common import SaidAtOnce, reported_errors, say, verb_command
from commbench.options import values

if TYPE_CHECKING:
    from commbench.replay.program import Program
    from commbench.results.runs import Run


def register(app: typer.Typer) -> None:
    @verb_command(app, "replay", ReplayRun)
    def replay(request: ReplayRun) -> None:
        """Replay a trace's collectives, rank by rank, and compare with the recorded times."""
        with reported_errors():
            import commbench.api
            from commbench.cli.live import LiveRows
            from commbench.results.runs import Run

            if request.dry_run:
                done = commbench.api.replay_trace(**values(request))
                assert not isinstance(done, Run)
                dry_run(done)
                return
            request.on_warning = warned = SaidAtOnce()  # a node's limits, before the launch
            with LiveRows() as on_progress:
                request.on_progress = on_progress
                run = commbench.api.replay_trace(**values(request))
            assert isinstance(run, Run)
            report(run, warned)


def dry_run(program: Program) -> None:
    """The plan on stdout; what the trace leaves to say on stderr."""
    from commbench.traces.plan import render_plan

    typer.echo(render_plan(program.plan), nl=False)
    if program.elsewhere is not None:
        from commbench.replay.explain import elsewhere_lines

        typer.echo("")
        for line in elsewhere_lines(program.elsewhere):
            typer.echo(line)
    for note in program.notes:
        if note not in program.plan.notes:  # render_plan says its own
            say(f"note: {note}")


def measured(run: Run) -> str:
    """What the replay measured, as its progress counted it (`[8/14]`: each row, the step
    sequence and each bucket cap): `8 rows, the step sequence, 5 bucket caps`."""
    replay = run.record.replay
    parts = [f"{len(run.rows)} rows"]
    if replay is not None and any(s is not None for s in replay.replayed_comm_s_per_step):
        parts.append("the step sequence")
    if replay is not None and replay.rebucket:
        parts.append(f"{len(replay.rebucket)} bucket caps")
    return ", ".join(parts)


def report(run: Run, warned: SaidAtOnce) -> None:
    """The rows, the step times recorded against replayed, the rows that dominate with the
    model beside them and the advisor's caps on stdout; notes and the status on stderr; then
    exit as the run's verdict says."""
    from commbench.replay.explain import explanation
    from commbench.results.exporters import export
    from commbench.tables import text_table

    rows, record = run.rows, run.record
    if rows:
        typer.echo(export(rows, "table"), nl=False)
    replay = record.replay
    if replay is not None:
        summary = explanation(replay, rows, str(record.settings.get("backend") or "nccl"))
        typer.echo("\nCommunication time per step:")
        for line in text_table(*summary.steps):
            typer.echo(f"  {line}")
        typer.echo(f"  median: {summary.steps_note}")
        if summary.dominant is not None:
            typer.echo("\nWhat dominates (calls x time):")
            for line in text_table(*summary.dominant, left=(0, 2, 8)):
                typer.echo(f"  {line}")
        typer.echo(summary.model)
        if summary.rebucket is not None:
            typer.echo("\nDDP bucket advisor:")
            for line in text_table(*summary.rebucket):
                typer.echo(f"  {line}")
            if summary.advice:
                typer.echo(summary.advice)
        if replay.elsewhere is not None:
            from commbench.replay.explain import elsewhere_lines

            typer.echo("")
            for line in elsewhere_lines(replay.elsewhere):
                typer.echo(line)
        for note in replay.notes:
            say(f"note: {note}")
    for said in warned.unsaid(record.warnings):  # those not said as the run started
        say(f"warning: {said}")
    say(f"{record.status}: {measured(run)} in {run.path}")
    error = run.verdict.error()
    if error is not None:
        raise error
