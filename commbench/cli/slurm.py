"""`commbench slurm-script`: print a ready sbatch script for a multi-node run."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from commbench.cli._job import JobRequest, register_job_command
from commbench.options import option, verb


@dataclass(kw_only=True)
class SlurmScriptRequest(JobRequest):
    """Every option of `commbench slurm-script` and `slurm_script`, declared once."""

    partition: str | None = option("--partition", "-p", help="SLURM partition.")
    account: str | None = option("--account", "-A", help="SLURM account the job is charged to.")
    qos: str | None = option(help="SLURM quality of service.")
    constraint: str | None = option(
        metavar="FEATURES", help="Node features the nodes must have: a100, a100&ib, rack1|rack2."
    )
    venv: str | None = option(
        metavar="DIR",
        help="A virtual environment with commbench, on a filesystem the nodes share: the "
        "script activates it. Default: commbench on the PATH sbatch passes on.",
    )
    time_limit: str = option(
        "--time",
        default="00:30:00",
        help="Time limit in any SLURM form: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.",
    )
    job_name: str = option(default="commbench", help="Job name.")


@verb(SlurmScriptRequest)
def slurm_script(request: SlurmScriptRequest) -> str:
    """An sbatch script that runs the commbench `command` (its arguments as a list, e.g.
    `["collectives", "--sizes", "1K-1G"]`) on every node of a SLURM job (`commbench
    slurm-script`). The command is parsed here as the nodes will parse it, by the command
    line's own grammar (which is why this verb lives with the command line): a typo fails
    now, not after the job waited in the queue. UserError for bad input."""
    from commbench.cli._job import multi_node_job
    from commbench.fields import pick
    from commbench.launch.job import SLURM, check_plain_name
    from commbench.launch.slurm import check_constraint, check_venv, parse_time, sbatch_script

    parse_time(request.time_limit)
    check_plain_name("--partition", request.partition)
    check_plain_name("--account", request.account)
    check_plain_name("--qos", request.qos)
    check_constraint(request.constraint)
    venv = check_venv(request.venv)
    job = multi_node_job(SLURM, request, name=request.job_name)
    return sbatch_script(
        nodes=job.nodes,
        gpus_per_node=job.gpus_per_node,
        args=list(job.args),
        job_name=job.name,
        venv=venv,
        **pick(request, "time_limit", "partition", "account", "qos", "constraint"),
    )


HELP = """Print an sbatch script that runs commbench on every node of a SLURM job.

Everything after the options is the commbench command to run, e.g.
`commbench slurm-script -N 4 -- collectives --sizes 1K-1G`.
"""
"""The command's help (`--help`, docs/cli.md)."""


def register(app: typer.Typer) -> None:
    register_job_command(app, "slurm-script", SlurmScriptRequest, slurm_script, HELP)
