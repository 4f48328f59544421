"""`commbench collectives`: time every torch.distributed collective across a size sweep."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from commbench.cli._common import (
    DEBUG,
    NNODES,
    NODE_RANK,
    RDZV_ENDPOINT,
    RDZV_ID,
    check_out,
    progress_bar,
    reported_errors,
)
from commbench.errors import Interrupted, RunFailed, UserError, quoted
from commbench.results.exporters import Format

if TYPE_CHECKING:  # heavy or launch-time modules, imported inside the command at run time
    from commbench.collectives.placement import Placement
    from commbench.collectives.settings import CollectivesSettings
    from commbench.launch.launcher import LaunchOptions
    from commbench.results.schema import ResultRow

CPU_DEFAULT_SIZES = "1K-1M"
GPU_DEFAULT_SIZES = "1K-1G"
DEFAULT_MIN_TIME = 0.2


def check_iteration_flags(iters: int | None, min_time: float | None) -> None:
    """`--iters` fixes the count and `--min-time` adapts it: both at once is a contradiction
    the settings could not record honestly."""
    if iters is not None and min_time is not None:
        raise UserError(
            "--iters and --min-time both given: --iters fixes the count, "
            "--min-time adapts it; give one"
        )


def parse_ranks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    from commbench.numbers import is_digits

    items = [t.strip() for t in text.split(",") if t.strip()]
    if not all(is_digits(t) and len(t) <= 9 for t in items):  # ASCII digits, no sign
        raise UserError(f"--ranks must be a comma list of rank numbers, got {quoted(text)}")
    ranks = [int(t) for t in items]
    if not ranks:
        raise UserError("--ranks is empty")
    return ranks


def register(app: typer.Typer) -> None:
    @app.command("collectives")
    def collectives(
        ctx: typer.Context,
        sizes: str = typer.Option(
            None,
            "--sizes",
            "-s",
            metavar="SIZES",
            help=f"Sizes: 1K-1G (doubling), 8-128M:x4, 1K,64K,1M. Default {GPU_DEFAULT_SIZES} on GPUs, {CPU_DEFAULT_SIZES} on CPU.",
        ),
        ops: str = typer.Option(
            None,
            "--ops",
            metavar="OPS",
            help="Comma list of ops, or 'all' (the default unless --strategies).",
        ),
        strategies: str = typer.Option(
            None,
            "--strategies",
            metavar="NAMES",
            help="All-reduce strategies to compare: 'all' or a comma list.",
        ),
        nproc: int = typer.Option(
            None, "--nproc", "-n", help="Workers per node. Default: every visible GPU, else 2."
        ),
        backend: str = typer.Option(
            None,
            "--backend",
            metavar="nccl|gloo",
            help="nccl or gloo. Default: nccl on GPUs, gloo on CPU.",
        ),
        device: str = typer.Option(
            None,
            "--device",
            metavar="cuda|cpu",
            help="cuda or cpu. Default: cuda when a GPU is visible.",
        ),
        dtype: str = typer.Option(
            "float32",
            "--dtype",
            metavar="DTYPE",
            help="float32, float16, bfloat16, float64, int32, int64, int8, uint8.",
        ),
        reduce_op: str = typer.Option(
            "sum", "--reduce-op", metavar="sum|avg|max|min|prod", help="sum, avg, max, min or prod."
        ),
        warmup: int = typer.Option(
            None, "--warmup", help="Warm-up iterations per point. Default adapts (2-20)."
        ),
        iters: int = typer.Option(
            None, "--iters", help="Timed iterations per point. Default: fill --min-time."
        ),
        min_time: float = typer.Option(
            None,
            "--min-time",
            help="Seconds of timed iterations per point (10-1000 iterations). Default 0.2.",
        ),
        in_place: bool = typer.Option(
            False, "--in-place", help="In-place all_gather / reduce_scatter."
        ),
        check: bool = typer.Option(
            True, "--check/--no-check", help="Verify every op's result after timing."
        ),
        async_op: bool = typer.Option(
            False, "--async-op", help="Call ops with async_op=True and wait()."
        ),
        graph: bool = typer.Option(
            False, "--graph", help="Time CUDA-graph replays (launch overhead out)."
        ),
        ranks: str = typer.Option(
            None, "--ranks", metavar="RANKS", help="Run the ops on this subgroup, e.g. 0,2."
        ),
        timeout: float = typer.Option(
            300.0,
            "--timeout",
            help="Seconds without progress before the run is declared hung "
            "(start-up, until the first point, gets at least 120 s).",
        ),
        out: Path = typer.Option(
            Path("results"), "--out", "-o", help="Parent directory of the run directory."
        ),
        fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format on stdout."),
        nnodes: int = NNODES,
        node_rank: int = NODE_RANK,
        rdzv_endpoint: str = RDZV_ENDPOINT,
        rdzv_id: str = RDZV_ID,
        debug: bool = DEBUG,
        profile: bool = typer.Option(
            False, "--profile", help="torch.profiler Chrome trace per rank (untimed iterations)."
        ),
        no_plot: bool = typer.Option(
            False, "--no-plot", help="Do not write plots (RUN_DIR/plots) after the run."
        ),
    ) -> None:
        """Time every torch.distributed collective across message sizes (algbw/busbw as nccl-tests)."""
        with reported_errors():
            from commbench.collectives.placement import resolve_placement
            from commbench.launch.launcher import resolve_launch

            check_out(out)
            launch = resolve_launch(
                nnodes=nnodes,
                node_rank=node_rank,
                rdzv_endpoint=rdzv_endpoint,
                rdzv_id=rdzv_id,
                debug=debug,
            )

            settings = settings_from_options(ctx.params, resolve_placement(device, nproc, backend))
            run_and_report(settings, out, fmt, launch, plot=not no_plot)


def settings_from_options(options: dict[str, Any], place: Placement) -> CollectivesSettings:
    """The settings of a `collectives` command line (its options by parameter name) on
    nodes placed as `place`: the command builds its run with it, `slurm-script` checks the
    command it wraps with it on the submit host, so the two cannot disagree."""
    from commbench.collectives.settings import CollectivesSettings
    from commbench.collectives.specs import parse_ops
    from commbench.sizes import parse_sizes

    ops, strategies, sizes = options["ops"], options["strategies"], options["sizes"]
    min_time = options["min_time"]
    check_iteration_flags(options["iters"], min_time)
    if sizes is None:
        sizes = GPU_DEFAULT_SIZES if place.device == "cuda" else CPU_DEFAULT_SIZES
    return CollectivesSettings(
        ops=parse_ops("all" if ops is None else ops) if ops is not None or not strategies else [],
        sizes=parse_sizes(sizes),
        nproc=place.nproc,
        backend=place.backend,
        device=place.device,
        dtype=options["dtype"],
        reduce_op=options["reduce_op"],
        warmup=options["warmup"],
        iters=options["iters"],
        min_time=DEFAULT_MIN_TIME if min_time is None else min_time,
        in_place=options["in_place"],
        check=options["check"],
        async_op=options["async_op"],
        graph=options["graph"],
        ranks=parse_ranks(options["ranks"]),
        strategies=_parse_strategies(strategies),
        timeout=options["timeout"],
        profile=options["profile"],
    )


def _parse_strategies(text: str | None) -> list[str]:
    if text is None:
        return []
    from commbench.collectives.specs import parse_strategies

    return parse_strategies(text)


def run_and_report(
    settings: CollectivesSettings,
    out: Path,
    fmt: Format,
    launch: LaunchOptions | None = None,
    plot: bool = True,
) -> None:
    """Run the sweep with a progress bar, print the table, exit like the run went."""
    from commbench.launch.launcher import run_collectives
    from commbench.results.exporters import export
    from commbench.results.record import RunStatus
    from commbench.sizes import format_size

    progress = progress_bar()
    task = progress.add_task("starting workers", total=None)

    def on_progress(done: int, total: int, row: ResultRow | None) -> None:
        label = "measuring"
        if row is not None:
            label = f"{row.strategy or row.op} {format_size(row.size_bytes)}"
        progress.update(task, completed=done, total=total, description=label)

    with progress:
        outcome = run_collectives(settings, out, launch=launch, on_progress=on_progress)
    if outcome.rows:
        typer.echo(export(outcome.rows, fmt), nl=False)
        if fmt in (Format.table, Format.md) and any(r.strategy for r in outcome.rows):
            from commbench.strategies.report import render_comparison

            backend = getattr(settings, "backend", None)
            typer.echo("\n" + render_comparison(outcome.rows, fmt, backend), nl=False)
    from commbench.compare import noisy_warning

    warning = noisy_warning(outcome.rows)
    if warning:
        typer.echo(f"commbench: warning: {warning}", err=True)
    if outcome.record.note and not outcome.rows:
        # a node without global rank 0: its ranks measured, another node holds the rows
        typer.echo(f"commbench: {outcome.status}: {outcome.record.note}", err=True)
    else:
        typer.echo(
            f"commbench: {outcome.status}: {len(outcome.rows)}/{outcome.points_total} points "
            f"in {outcome.run_dir}",
            err=True,
        )
    if (
        plot
        and outcome.status == RunStatus.COMPLETE
        and outcome.rows
        and not outcome.stop_requested
    ):
        from commbench.report.plots import write_run_plots

        try:
            plots = write_run_plots(outcome.run_dir)
        except KeyboardInterrupt:  # the record is whole: say so, not just "interrupted"
            raise Interrupted(
                f"interrupted while plotting; every point was measured and is in {outcome.run_dir}"
            ) from None
        typer.echo(f"commbench: {plots}", err=True)
    if outcome.status == RunStatus.INTERRUPTED:
        raise Interrupted(
            f"interrupted; the {len(outcome.rows)} points measured are in {outcome.run_dir}"
        )
    if outcome.status != RunStatus.COMPLETE:
        raise RunFailed(outcome.failure or outcome.status)
    failed = outcome.checks_failed
    if failed:
        where = ", ".join(f"{r.strategy or r.op} {format_size(r.size_bytes)}" for r in failed[:5])
        raise RunFailed(f"wrong result at {len(failed)} point(s): {where}")
    if outcome.stop_requested:  # it came as the run was wound up: the record is whole
        raise Interrupted(f"interrupted; every point was measured and is in {outcome.run_dir}")
