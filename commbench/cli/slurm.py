"""`commbench slurm-script`: print a ready sbatch script for a multi-node run."""

from __future__ import annotations

import typer

from commbench.cli._common import reported_errors


def register(app: typer.Typer) -> None:
    @app.command(
        "slurm-script",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def slurm_script(
        ctx: typer.Context,
        nodes: int = typer.Option(2, "--nodes", "-N", help="Nodes to allocate."),
        gpus_per_node: int = typer.Option(
            8, "--gpus-per-node", help="GPUs per node (0 for a CPU/gloo run)."
        ),
        partition: str = typer.Option(None, "--partition", "-p", help="SLURM partition."),
        time_limit: str = typer.Option("00:30:00", "--time", help="Time limit (HH:MM:SS)."),
        job_name: str = typer.Option("commbench", "--job-name", help="Job name."),
    ) -> None:
        """Print an sbatch script that runs commbench on every node of a SLURM job.

        Everything after the options is the commbench command to run, e.g.
        `commbench slurm-script -N 4 -- collectives --sizes 1K-1G`.
        """
        with reported_errors():
            from commbench.errors import UserError
            from commbench.launch.slurm import sbatch_script

            if nodes < 1:
                raise UserError("--nodes must be at least 1")
            if gpus_per_node < 0:
                raise UserError("--gpus-per-node must be >= 0")
            args = list(ctx.args) or ["collectives"]
            typer.echo(
                sbatch_script(
                    nodes=nodes,
                    gpus_per_node=gpus_per_node,
                    args=args,
                    job_name=job_name,
                    time_limit=time_limit,
                    partition=partition,
                ),
                nl=False,
            )
