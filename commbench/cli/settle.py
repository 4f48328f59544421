"""`commbench settle`: write into a run whose launcher was killed outright what its readers
already take it as (reading never writes: docs/collectives.md)."""

from __future__ import annotations

import typer

from commbench.api import SettleRequest
from commbench.cli._common import reported_errors, verb_command
from commbench.options import values


def register(app: typer.Typer) -> None:
    @verb_command(app, "settle", SettleRequest)
    def settle(request: SettleRequest) -> None:
        """End runs whose launcher was killed outright: the points only events.jsonl holds
        into results.json and results.csv, run.json interrupted; say what was done."""
        with reported_errors():
            import commbench.api

            settled = commbench.api.settle_runs(**values(request))
        for one in settled:
            typer.echo(str(one))
