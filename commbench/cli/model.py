"""`commbench model`: the alpha-beta prediction of each all-reduce strategy."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.collectives.settings import GPU_DEFAULT_SIZES
from commbench.errors import UserError
from commbench.results.exporters import Format

# World sizes a fitted model extrapolates to when --world is not given.
# More ranks than any machine runs: a typo, not a world to model.
MAX_WORLD = 1 << 24
MAX_WORLDS = 256
"""World sizes one `model` call tabulates: a table each."""


def parse_worlds(text: str) -> list[int]:
    from commbench.errors import quoted
    from commbench.lists import split_list
    from commbench.numbers import MAX_DIGITS, check_range, is_digits

    items = split_list(text, "--world", max_items=MAX_WORLDS)
    if not all(is_digits(t) and len(t) <= MAX_DIGITS for t in items):  # ASCII digits only
        raise UserError(f"--world must be a comma list of integers, got {quoted(text)}")
    worlds = [check_range(int(t), "--world", maximum=MAX_WORLD) for t in items]
    if not worlds:
        raise UserError("--world is empty")
    bad = [w for w in worlds if w < 2]
    if bad:
        raise UserError(
            f"--world: a world size must be at least 2 (one rank has nothing to reduce), got {bad[0]}"
        )
    return list(dict.fromkeys(worlds))


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
            from commbench.collectives.specs import parse_strategies
            from commbench.sizes import parse_sizes
            from commbench.strategies.model import SCALE_WORLDS, Fit, Params, fit, predict
            from commbench.strategies.report import render_predictions

            names = parse_strategies(strategies)
            size_list = parse_sizes(sizes)
            fitted: Fit | None = None
            worlds = parse_worlds(world) if world is not None else [8]
            if from_run is not None:
                from commbench.results.runs import load_run

                run = load_run(from_run)
                run_backend = str(run.record.settings.get("backend") or "nccl")
                backend = backend or run_backend
                fitted = fit(run.rows, backend, launch, alpha_us=latency, bw_gbps=bw)
                if world is None:
                    worlds = list(dict.fromkeys([*fitted.world_sizes, *SCALE_WORLDS]))
                alpha, beta = fitted.params.alpha_us, fitted.params.bw_gbps
            else:
                if bw is None or latency is None:
                    raise UserError("give --bw and --latency, or --from RUN to fit them")
                alpha, beta = latency, bw
            params = Params(
                alpha_us=alpha, bw_gbps=beta, launch_us=launch, backend=backend or "nccl"
            )
            predictions = predict(params, worlds, size_list, names)
            typer.echo(render_predictions(predictions, params, fmt, fitted), nl=False)
