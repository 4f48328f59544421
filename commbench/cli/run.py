"""`commbench run`: a suite from a YAML file, optionally gated against a baseline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commbench.cli._common import (
    DEBUG,
    NNODES,
    NODE_RANK,
    RDZV_ENDPOINT,
    RDZV_ID,
    reported_errors,
)
from commbench.results.exporters import Format

if TYPE_CHECKING:
    from commbench.results.record import Entry


def _tables(suite_dir: Path, entries: list[Entry], fmt: Format) -> str:
    """What the collectives and strategies runs measured, as `commbench collectives` prints
    it: a table per run, or one CSV/JSON document of every row (op, strategy and dtype tell
    the runs apart)."""
    from commbench.results.exporters import export
    from commbench.results.runs import load_run
    from commbench.results.summary import render, summarise

    runs = [
        (entry, load_run(suite_dir / entry.path).rows)
        for entry in entries
        if entry.path is not None and entry.section in ("collectives", "strategies")
    ]
    if fmt not in (Format.table, Format.md):
        every = [row for _, rows in runs for row in rows]
        return export(every, fmt) if every else ""
    markdown = fmt is Format.md
    return "\n".join(
        f"=== {entry.name} ({entry.status}) ===\n\n{export(rows, fmt)}"
        + (f"\n{summary}" if (summary := render(summarise(rows), markdown=markdown)) else "")
        for entry, rows in runs
        if rows
    )


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        config: Path = typer.Argument(
            ..., metavar="SUITE.yaml", help="Suite file, e.g. configs/ci.yaml."
        ),
        baseline: Path = typer.Option(
            None,
            "--baseline",
            "-b",
            help="Baseline suite (or run) directory: compare every run and exit like `compare`.",
        ),
        out: Path = typer.Option(
            Path("results/suites"), "--out", "-o", help="Parent directory of the suite directory."
        ),
        nproc: int = typer.Option(
            None,
            "--nproc",
            "-n",
            help="Workers per node (overrides the suite's world_size key, which is per node too).",
        ),
        device: str = typer.Option(
            None, "--device", metavar="cuda|cpu", help="cuda or cpu (overrides the suite)."
        ),
        backend: str = typer.Option(
            None, "--backend", metavar="nccl|gloo", help="nccl or gloo (overrides the suite)."
        ),
        tolerance: str = typer.Option(
            None, "--tolerance", "-t", help="Override the suite's compare.tolerance, e.g. 5%."
        ),
        allow_mismatch: bool = typer.Option(
            False, "--allow-mismatch", help="Compare with a baseline from a different machine."
        ),
        no_plot: bool = typer.Option(False, "--no-plot", help="Do not write plots after each run."),
        fmt: Format = typer.Option(
            Format.table, "--format", "-f", help="Format of the comparison on stdout."
        ),
        nnodes: int = NNODES,
        node_rank: int = NODE_RANK,
        rdzv_endpoint: str = RDZV_ENDPOINT,
        rdzv_id: str = RDZV_ID,
        debug: bool = DEBUG,
    ) -> None:
        """Run a suite (collectives, strategies, p2p, topo) into one suite directory."""
        with reported_errors():
            import commbench.api
            from commbench.cli.live import LiveRows

            def on_event(message: str) -> None:
                typer.echo(f"commbench: {message}", err=True)

            # `[i/n] entry: measuring`, then the entry's points as `collectives` shows them
            with LiveRows() as on_progress:
                outcome = commbench.api.run_suite(
                    config,
                    baseline=baseline,
                    out=out,
                    nproc=nproc,
                    device=device,
                    backend=backend,
                    tolerance=tolerance,
                    allow_mismatch=allow_mismatch,
                    no_plot=no_plot,
                    nnodes=nnodes,
                    node_rank=node_rank,
                    rdzv_endpoint=rdzv_endpoint,
                    rdzv_id=rdzv_id,
                    debug=debug,
                    on_event=on_event,
                    on_progress=on_progress,
                )
            if outcome.comparisons is not None:
                from commbench.report.comparison import render_many

                typer.echo(render_many(outcome.comparisons, fmt), nl=False)
            else:
                typer.echo(_tables(outcome.path, outcome.entries, fmt), nl=False)
            for entry in outcome.failed:
                on_event(f"{entry.name} {entry.status}: {entry.failure}")
            on_event(f"suite written to {outcome.path}")
            code = outcome.exit_code
        sys.stdout.flush()
        raise typer.Exit(code)
