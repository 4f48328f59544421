"""`commbench model`: the alpha-beta prediction of each all-reduce strategy."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.collectives.settings import GPU_DEFAULT_SIZES
from commbench.results.exporters import Format


def register(app: typer.Typer) -> None:
    @app.command("model")
    def model(
        world: str = typer.Option(
            None,
            "--world",
            "-w",
            help="World sizes, e.g. 8,64,1024. Default: 8; with --from, the run's then 8,64,1024.",
        ),
        bw: float = typer.Option(
            None,
            "--bw",
            help="Link bandwidth in GB/s (beta). Needed without --from; with it, held while the latency is fitted.",
        ),
        latency: float = typer.Option(
            None,
            "--latency",
            help="Latency per step in us (alpha). Needed without --from; with it, held while the bandwidth is fitted.",
        ),
        launch: float = typer.Option(
            0.0, "--launch", help="Cost of one host-side launch/sync in us (default 0)."
        ),
        sizes: str = typer.Option(
            GPU_DEFAULT_SIZES,
            "--sizes",
            "-s",
            help=f"Sizes per rank, e.g. 1K-1G. Default {GPU_DEFAULT_SIZES}.",
        ),
        backend: str = typer.Option(
            None,
            "--backend",
            metavar="nccl|gloo",
            help="Whose algorithms to model: nccl or gloo. Default: the run's, else nccl.",
        ),
        strategies: str = typer.Option(
            "all", "--strategies", help="Strategies to predict: 'all' or a comma list."
        ),
        from_run: Path = typer.Option(
            None,
            "--from",
            help="Fit latency and bandwidth to this run's direct all_reduce rows.",
        ),
        fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format."),
    ) -> None:
        """Predict each all-reduce strategy with the alpha-beta model (latency + bytes / bandwidth)."""
        with reported_errors():
            import commbench.api
            from commbench.strategies.report import render_predictions

            modelled = commbench.api.model_strategies(
                world=world,
                bw=bw,
                latency=latency,
                launch=launch,
                sizes=sizes,
                backend=backend,
                strategies=strategies,
                from_run=from_run,
            )
            text = render_predictions(modelled.predictions, modelled.params, fmt, modelled.fitted)
        typer.echo(text, nl=False)
