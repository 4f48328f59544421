"""`commbench p2p`: copy bandwidth from one GPU to the others, explained by the topology."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commbench.cli._common import progress_bar, reported_errors
from commbench.results.exporters import Format

if TYPE_CHECKING:  # imported inside the command at run time (torch and NVML behind them)
    from commbench.p2p.plan import Step
    from commbench.p2p.run import DryRun
    from commbench.results.runs import Run
    from commbench.topology import TopologySnapshot


def _topology_words(snapshot: TopologySnapshot, path: Path | None) -> str:
    gpus = snapshot.gpus
    names = sorted({g.name for g in gpus})
    what = f"{len(gpus)}x {names[0]}" if len(names) == 1 else f"{len(gpus)} GPUs"
    return f"{what} ({path.name if path else 'this machine'})"


def register(app: typer.Typer) -> None:
    @app.command("p2p")
    def p2p(
        src: str = typer.Option(
            None, "--src", metavar="GPU", help="Source GPU (CUDA ordinal). Default 0."
        ),
        dst: str = typer.Option(
            None, "--dst", help="Destination GPUs, e.g. 1,2,4. Default: every other GPU."
        ),
        size: str = typer.Option(
            None,
            "--size",
            help="Bytes per copy: 64M, 1G, 1M,64M, ... (binary units: 400M is 400 MiB). "
            "Default 400000000 B: 10**8 float32.",
        ),
        mode: str = typer.Option(
            "both",
            "--mode",
            metavar="concurrent|sequential|both",
            help="concurrent (all copies at once), sequential (one at a time) or both.",
        ),
        bidirectional: bool = typer.Option(
            False, "--bidirectional", help="Copy both ways at once; report each way and the sum."
        ),
        matrix: bool = typer.Option(
            False, "--matrix", help="Every GPU to every other; also writes a heatmap PNG."
        ),
        host: bool = typer.Option(
            False, "--host", help="Also pinned host->device and device->host copies."
        ),
        latency: bool = typer.Option(
            False, "--latency", help="Also small-copy latency (4 B - 64 KiB, in us)."
        ),
        warmup: int = typer.Option(5, "--warmup", help="Untimed rounds before each measurement."),
        iters: int = typer.Option(
            None, "--iters", help="Timed rounds per measurement. Default 20 (latency: 200)."
        ),
        topology: Path = typer.Option(
            None,
            "--topology",
            metavar="SNAPSHOT.json",
            help="Explain with this snapshot (`commbench topo --format json`), not NVML's.",
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Print what each copy should reach; touch no GPU."
        ),
        out: Path = typer.Option(
            Path("results"), "--out", "-o", help="Parent directory of the run directory."
        ),
        fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format on stdout."),
    ) -> None:
        """Peer-to-peer copy bandwidth from one GPU to the others, explained by the topology."""
        with reported_errors():
            import commbench.api
            from commbench.p2p.run import DryRun

            progress = progress_bar()
            task = progress.add_task("p2p", total=None)

            def on_step(done: int, total: int, step: Step) -> None:
                label = f"{step.mode} {step.label}"
                progress.update(task, completed=done, total=total, description=label)

            with progress:
                result = commbench.api.run_p2p(
                    src=src,
                    dst=dst,
                    size=size,
                    mode=mode,
                    bidirectional=bidirectional,
                    matrix=matrix,
                    host=host,
                    latency=latency,
                    warmup=warmup,
                    iters=iters,
                    topology=topology,
                    dry_run=dry_run,
                    out=out,
                    on_step=on_step,
                )
            if isinstance(result, DryRun):
                _show_dry_run(result, topology, fmt)
            else:
                _report(result, fmt)


def _show_dry_run(dry: DryRun, topology: Path | None, fmt: Format) -> None:
    from commbench.p2p.render import render_expectations

    for note in dry.plan.notes:
        typer.echo(f"commbench: {note}", err=True)
    if fmt in (Format.table, Format.md):
        typer.echo(
            f"Dry run on {_topology_words(dry.snapshot, topology)}: what each copy "
            "should reach; nothing was measured.\n"
        )
    typer.echo(render_expectations(dry.expectations, fmt), nl=False)


def _report(run: Run, fmt: Format) -> None:
    """The copies on stdout; the notes, a warning for numbers above the peak and the status
    line on stderr; exit as the run's verdict says."""
    from commbench.p2p.render import render_rows

    typer.echo(render_rows(run.rows, fmt), nl=False)
    for note in run.record.notes:
        typer.echo(f"commbench: {note}", err=True)
    odd = [r for r in run.rows if r.p2p and r.p2p.suspicious]
    if odd:
        pairs = ", ".join(r.p2p.label for r in odd[:5] if r.p2p)
        typer.echo(
            f"commbench: warning: {len(odd)} measurement(s) above the theoretical peak: {pairs}; "
            "such numbers are not to be trusted as they stand (see the diagnosis)",
            err=True,
        )
    for line in run.health_findings():
        typer.echo(f"commbench: link health: {line.message}", err=True)
    typer.echo(f"commbench: {run.record.status}: {len(run.rows)} rows in {run.path}", err=True)
    error = run.verdict.error()
    if error is not None:
        raise error
