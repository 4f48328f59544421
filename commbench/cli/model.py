"""`commbench model`: the alpha-beta prediction of each all-reduce strategy."""

from __future__ import annotations

import typer

from commbench.api import ModelRequest
from commbench.cli._common import reported_errors, verb_command
from commbench.flags import Output
from commbench.formats import Writes
from commbench.options import values
from commbench.results.exporters import Format


def register(app: typer.Typer) -> None:
    @verb_command(app, "model", ModelRequest, output=Output(Writes.TABLES))
    def model(request: ModelRequest, fmt: Format) -> None:
        """Predict each all-reduce strategy with the alpha-beta model (latency + bytes / bandwidth)."""
        with reported_errors():
            import commbench.api
            from commbench.strategies.report import render_predictions

            modelled = commbench.api.model_strategies(**values(request))
            text = render_predictions(modelled.predictions, modelled.params, fmt, modelled.fitted)
        typer.echo(text, nl=False)
