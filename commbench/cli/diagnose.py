"""`commbench diagnose`: find the slow node, GPU or link; run it on every node."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from commbench.cli._common import (
    DEBUG,
    NNODES,
    NODE_RANK,
    RDZV_ENDPOINT,
    RDZV_ID,
    progress_bar,
    reported_errors,
)

if TYPE_CHECKING:
    from commbench.diagnose.run import Diagnosis


class Format(str, Enum):
    table = "table"
    json = "json"
    md = "md"
    junit = "junit"


def register(app: typer.Typer) -> None:
    @app.command("diagnose")
    def diagnose(
        nproc: int = typer.Option(
            None, "--nproc", "-n", help="Workers per node. Default: every visible GPU, else 2."
        ),
        device: str = typer.Option(None, "--device", metavar="cuda|cpu", help="cuda or cpu."),
        backend: str = typer.Option(None, "--backend", metavar="nccl|gloo", help="nccl or gloo."),
        sizes: str = typer.Option(
            None,
            "--sizes",
            "-s",
            metavar="SIZE",
            help="Bytes per rank of each test (bandwidth-bound). Default 64M on GPUs, 1M on CPU.",
        ),
        tolerance: str = typer.Option(
            None,
            "--tolerance",
            "-t",
            help="How far below its expectation a test may fall. Default 25%.",
        ),
        stages: str = typer.Option(
            None, "--stages", metavar="intra,inter", help="Stages to run. Default both."
        ),
        baseline: Path = typer.Option(
            None,
            "--baseline",
            metavar="EXPECTATIONS",
            help="Expected GB/s per stage (JSON) or a diagnose run of a good cluster; "
            "default: the median of the peers.",
        ),
        iters: int = typer.Option(None, "--iters", help="Timed iterations per test. Default 10."),
        warmup: int = typer.Option(
            None, "--warmup", help="Warm-up iterations per test. Default 3."
        ),
        timeout: float = typer.Option(
            None, "--timeout", help="Seconds without progress before a node is declared hung."
        ),
        out: Path = typer.Option(
            Path("results"), "--out", "-o", help="Parent directory of the run directory."
        ),
        fmt: Format = typer.Option(
            Format.table, "--format", "-f", help="table, json, md or junit."
        ),
        nnodes: int = NNODES,
        node_rank: int = NODE_RANK,
        rdzv_endpoint: str = RDZV_ENDPOINT,
        rdzv_id: str = RDZV_ID,
        debug: bool = DEBUG,
    ) -> None:
        """Find the one slow node, GPU or link: tests inside every node, then across nodes."""
        with reported_errors():
            import commbench.api

            progress = progress_bar()
            task = progress.add_task("starting workers", total=None)

            def on_test(event: dict[str, Any]) -> None:
                label = f"{event.get('stage')} round {int(event.get('round', 0)) + 1}"
                progress.update(task, advance=1, description=label)

            with progress:
                diagnosis = commbench.api.run_diagnose(
                    nproc=nproc,
                    device=device,
                    backend=backend,
                    sizes=sizes,
                    tolerance=tolerance,
                    stages=stages,
                    baseline=baseline,
                    iters=iters,
                    warmup=warmup,
                    timeout=timeout,
                    out=out,
                    nnodes=nnodes,
                    node_rank=node_rank,
                    rdzv_endpoint=rdzv_endpoint,
                    rdzv_id=rdzv_id,
                    debug=debug,
                    on_test=on_test,
                )
            typer.echo(render(diagnosis, fmt), nl=False)
            for note in diagnosis.notes:
                typer.echo(f"commbench: warning: {note}", err=True)
            typer.echo(
                f"commbench: {diagnosis.verdict}: {len(diagnosis.nodes)} node(s); "
                f"diagnosis in {diagnosis.path}",
                err=True,
            )
            if diagnosis.failure:
                typer.echo(f"commbench: {diagnosis.failure}", err=True)
        raise typer.Exit(diagnosis.exit_code)


def render(diagnosis: Diagnosis, fmt: Format) -> str:
    from commbench.diagnose.render import render_diagnosis

    return render_diagnosis(diagnosis, fmt.value)
