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
    reported_errors,
)
from commbench.collectives.settings import (
    CPU_DEFAULT_SIZES,
    DEFAULT_MAX_ITERS,
    DEFAULT_MIN_ITERS,
    DEFAULT_MIN_TIME,
    DEFAULT_TIMEOUT,
    GPU_DEFAULT_SIZES,
)
from commbench.results.exporters import Format

if TYPE_CHECKING:  # heavy or launch-time modules, imported inside the command at run time
    from commbench.results.runs import Run

SETTINGS_OPTIONS = (
    "ops",
    "strategies",
    "sizes",
    "dtype",
    "reduce_op",
    "warmup",
    "iters",
    "min_time",
    "in_place",
    "check",
    "async_op",
    "graph",
    "ranks",
    "timeout",
    "profile",
)
"""The flags that make a run's settings (`CollectivesSettings.from_options` takes them by
these names); the others say where and how it is launched."""


STRAGGLER_LINES = 5
"""At most this many lines about the ranks the others waited for; the report lists them all."""


def settings_options(params: dict[str, Any]) -> dict[str, Any]:
    """The settings flags of a parsed `collectives` command line: `slurm-script` checks the
    command it wraps with them, on the submit host, as the command itself would."""
    return {name: params[name] for name in SETTINGS_OPTIONS}


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
            metavar="DTYPE[,DTYPE...]",
            help="float32, float16, bfloat16, float64, int32, int64, int8, uint8; a comma list "
            "measures each in one launch.",
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
            help=f"Seconds of timed iterations per point ({DEFAULT_MIN_ITERS}-{DEFAULT_MAX_ITERS} "
            f"iterations). Default {DEFAULT_MIN_TIME}.",
        ),
        in_place: str = typer.Option(
            "no",
            "--in-place",
            metavar="no|yes|both",
            help="all_gather / reduce_scatter out of place (no), in place (yes), or both side "
            "by side as nccl-tests prints them. The other ops have one form.",
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
            DEFAULT_TIMEOUT,
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
            import commbench.api
            from commbench.cli.live import LiveRows

            # every point on stderr as it is measured; stdout gets only what --format asks for
            with LiveRows() as on_progress:
                run = commbench.api.run_collectives(
                    **{name: ctx.params[name] for name in SETTINGS_OPTIONS},
                    nproc=nproc,
                    backend=backend,
                    device=device,
                    out=out,
                    nnodes=nnodes,
                    node_rank=node_rank,
                    rdzv_endpoint=rdzv_endpoint,
                    rdzv_id=rdzv_id,
                    debug=debug,
                    no_plot=no_plot,
                    on_progress=on_progress,
                )
            report(run, fmt)


def report(run: Run, fmt: Format) -> None:
    """Print a finished run: its table (and the strategy comparison), the devices used and
    the bandwidth summary on stdout (csv and json: the rows alone, so they stay parseable);
    the noise warning, the ranks the others waited for and the status line on stderr; then
    exit as the run's verdict says."""
    from commbench.compare import noisy_warning
    from commbench.health.findings import notes_block
    from commbench.results.exporters import export
    from commbench.results.stragglers import summary_lines
    from commbench.results.summary import render, summarise

    rows, record = run.rows, run.record
    if rows:
        typer.echo(export(rows, fmt), nl=False)
        human = fmt in (Format.table, Format.md)
        if human and any(r.strategy for r in rows):
            from commbench.strategies.report import render_comparison

            typer.echo(
                "\n" + render_comparison(rows, fmt, record.settings.get("backend")), nl=False
            )
        summary = render(summarise(rows, run.context.ranks), markdown=fmt is Format.md)
        if human and summary:
            typer.echo("\n" + summary, nl=False)
        if human:
            from commbench.results.network import network_lines

            network = network_lines(rows, run.context)
            if network:  # a titled block, like the link health notes below it
                md = fmt is Format.md
                title = "\n**Network efficiency**\n" if md else "\nNetwork efficiency:"
                typer.echo(title)
                for line in network:
                    typer.echo(f"- {line}" if md else f"  {line}")
    health = notes_block(run.context.health, markdown=fmt is Format.md)
    if health:  # after the table on stdout; on stderr where stdout is csv or json
        typer.echo(health, nl=False, err=fmt not in (Format.table, Format.md))
    warning = noisy_warning(rows)
    for said in [warning, *record.warnings]:  # the run's own (a degraded cross-node watch)
        if said:
            typer.echo(f"commbench: warning: {said}", err=True)
    for line in summary_lines(run.straggler_summary(), limit=STRAGGLER_LINES):
        typer.echo(f"commbench: {line}", err=True)
    if record.note and not rows:
        # a node without global rank 0: its ranks measured, another node holds the rows
        typer.echo(f"commbench: {record.status}: {record.note}", err=True)
    else:
        typer.echo(
            f"commbench: {record.status}: {len(rows)}/{record.points_total or 0} points "
            f"in {run.path}",
            err=True,
        )
    if run.plots:
        typer.echo(f"commbench: {run.plots}", err=True)
    error = run.verdict.error()
    if error is not None:
        raise error
