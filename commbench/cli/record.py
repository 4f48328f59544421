"""`commbench record -- CMD ...`: run a job unchanged and capture its collectives."""

from __future__ import annotations

import typer

from commbench.api import RecordRequest, record_job
from commbench.cli._common import reported_errors, verb_command
from commbench.options import values


def register(app: typer.Typer) -> None:
    @verb_command(
        app,
        "record",
        RecordRequest,
        context_settings={
            "allow_extra_args": True,
            "ignore_unknown_options": True,
            "allow_interspersed_args": False,  # the job's own -o after its command is its own
        },
    )
    def record_command(request: RecordRequest, ctx: typer.Context) -> None:
        """Run a training job unchanged and record every collective it makes.

        Everything after `--` is the job's command, run as the shell would: its output passes
        through and its exit status is commbench's. Every Python process of the job that
        imports torch records its calls (the DDP reducer's and FSDP's included) into the
        trace directory, for `commbench replay`. E.g.
        `commbench record -o trace -- torchrun --nproc-per-node 2 train.py`.
        """
        with reported_errors():
            request.command = ctx.args
            recorded = record_job(**values(request))
        if recorded.lost is not None:  # the job broke its trace directory: that is all
            said = (
                f" (the job exited with status {recorded.exit_code})" if recorded.exit_code else ""
            )
            typer.echo(f"commbench record: {recorded.lost}{said}", err=True)
            raise typer.Exit(recorded.exit_code)
        state = "complete" if recorded.manifest.complete else "incomplete"
        typer.echo(
            f"commbench record: {recorded.calls} calls from {len(recorded.ranks)} of "
            f"{recorded.manifest.world_size} ranks in {recorded.directory} ({state})",
            err=True,
        )
        for note in recorded.notes:
            typer.echo(f"commbench record: {note}", err=True)
        raise typer.Exit(recorded.exit_code)
