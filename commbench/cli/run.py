"""`commbench run`: a suite from a YAML file, optionally gated against a baseline."""

from __future__ import annotations

import sys
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
    reported_errors,
)
from commbench.results.exporters import Format

if TYPE_CHECKING:
    from collections.abc import Callable

    from commbench.collectives.placement import Placement
    from commbench.compare import GateSettings
    from commbench.launch.launcher import LaunchOptions
    from commbench.results.record import Entry
    from commbench.suites.config import SuiteConfig
    from commbench.suites.runner import Machine


def _tables(suite_dir: Path, entries: list[Entry], fmt: Format) -> str:
    """What the collectives and strategies runs measured, as `commbench collectives` prints
    it: a table per run, or one CSV/JSON document of every row (op, strategy and dtype tell
    the runs apart)."""
    from commbench.results.exporters import export
    from commbench.results.runs import load_run

    runs = [
        (entry, load_run(suite_dir / entry.path).rows)
        for entry in entries
        if entry.path is not None and entry.section in ("collectives", "strategies")
    ]
    if fmt not in (Format.table, Format.md):
        every = [row for _, rows in runs for row in rows]
        return export(every, fmt) if every else ""
    return "\n".join(
        f"=== {entry.name} ({entry.status}) ===\n\n{export(rows, fmt)}"
        for entry, rows in runs
        if rows
    )


def prepare(
    options: dict[str, Any], launch: LaunchOptions, placer: Callable[..., Placement]
) -> tuple[SuiteConfig, Machine, GateSettings]:
    """The suite, the machine and the gate of a `run` command line (its options by parameter
    name), every run's settings validated; `placer(device, nproc, backend)` fills in what
    neither the flags nor the suite say. The command runs what this returns; `slurm-script`
    checks the `run` it wraps with it on the submit host, with the job's nodes as placer."""
    from dataclasses import replace

    from commbench.compare import parse_fraction
    from commbench.suites.config import load_suite
    from commbench.suites.runner import Machine, plan_runs

    suite = load_suite(options["config"])
    nproc = options["nproc"]
    place = placer(
        options["device"] or suite.device,
        nproc if nproc is not None else suite.nproc,
        options["backend"] or suite.backend,
    )
    machine = Machine(
        device=place.device,
        nproc=place.nproc,
        backend=place.backend,
        nnodes=launch.nnodes,
        node_rank=launch.node_rank,
        rdzv_endpoint=launch.rdzv_endpoint,
        rdzv_id=launch.rdzv_id,
        debug=launch.debug,
    )
    gate = suite.gate
    if options["tolerance"] is not None:
        gate = replace(gate, tolerance=parse_fraction(options["tolerance"], "--tolerance"))
    if options["allow_mismatch"]:
        gate = replace(gate, allow_mismatch=True)
    plan_runs(suite, machine)
    return suite, machine, gate


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        ctx: typer.Context,
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
            from commbench.collectives.placement import resolve_placement
            from commbench.launch.launcher import resolve_launch
            from commbench.suites.runner import run_suite

            check_out(out)
            launch = resolve_launch(
                nnodes=nnodes,
                node_rank=node_rank,
                rdzv_endpoint=rdzv_endpoint,
                rdzv_id=rdzv_id,
                debug=debug,
            )
            suite, machine, gate = prepare(ctx.params, launch, resolve_placement)

            def on_event(message: str) -> None:
                typer.echo(f"commbench: {message}", err=True)

            outcome = run_suite(
                suite,
                out,
                machine,
                baseline=baseline,
                gate=gate,
                plot=not no_plot,
                on_event=on_event,
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
