"""`commbench slurm-script`: print a ready sbatch script for a multi-node run."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import typer

from commbench.cli._common import reported_errors
from commbench.options import cli, command, values, verb

# ASCII digits (`\d` takes any Unicode digit, which sbatch refuses once the job is submitted)
_PLAIN = re.compile(r"[A-Za-z0-9_.,-]+")
# The commands that run across the nodes of a job (the others run on one machine).
_WRAPPABLE = ("collectives", "run", "diagnose")


_SLURM_OWNS = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id")


@dataclass(kw_only=True)
class SlurmScriptRequest:
    """Every option of `commbench slurm-script` and `slurm_script`, declared once."""

    command: Sequence[str] = field(default=("collectives",), kw_only=False)
    """The commbench command to run on every node, as a list (`["collectives", "--sizes",
    "1K-1G"]`): on the command line, everything after the options."""
    nodes: int = field(default=2, metadata=cli("--nodes", "-N", help="Nodes to allocate."))
    gpus_per_node: int = field(
        default=8, metadata=cli(help="GPUs per node (0 for a CPU/gloo run).")
    )
    partition: str | None = field(
        default=None, metadata=cli("--partition", "-p", type=str, help="SLURM partition.")
    )
    time_limit: str = field(
        default="00:30:00",
        metadata=cli(
            "--time",
            help="Time limit in any SLURM form: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.",
        ),
    )
    job_name: str = field(default="commbench", metadata=cli(help="Job name."))


@verb(SlurmScriptRequest)
def slurm_script(request: SlurmScriptRequest) -> str:
    """An sbatch script that runs the commbench `command` (its arguments as a list, e.g.
    `["collectives", "--sizes", "1K-1G"]`) on every node of a SLURM job (`commbench
    slurm-script`). The command is parsed here as the nodes will parse it, by the command
    line's own grammar (which is why this verb lives with the command line): a typo fails
    now, not after the job waited in the queue. UserError for bad input."""
    command, nodes, gpus_per_node = request.command, request.nodes, request.gpus_per_node
    partition, time_limit, job_name = request.partition, request.time_limit, request.job_name
    from commbench.collectives.settings import MAX_NODES
    from commbench.errors import UserError
    from commbench.launch.slurm import MAX_GPUS_PER_NODE, parse_time, sbatch_script
    from commbench.numbers import check_range

    if nodes < 1:
        raise UserError("--nodes must be at least 1")
    check_range(nodes, "--nodes", 1, MAX_NODES)
    if gpus_per_node < 0:
        raise UserError("--gpus-per-node must be >= 0")
    check_range(gpus_per_node, "--gpus-per-node", 0, MAX_GPUS_PER_NODE)
    parse_time(time_limit)
    for flag, value in (("--job-name", job_name), ("--partition", partition)):
        if value is not None and not _PLAIN.fullmatch(value):
            raise UserError(
                f"{flag} {value!r}: use letters, digits, '_', '-', '.' (and ',' for partitions)"
            )
    args = list(command) or ["collectives"]
    _check_wrapped(args, nodes, gpus_per_node)
    return sbatch_script(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        args=args,
        job_name=job_name,
        time_limit=time_limit,
        partition=partition,
    )


def _check_wrapped(args: list[str], nodes: int, gpus_per_node: int) -> None:
    """Parse the command the script will run, as it will be parsed on the nodes: a typo must
    fail here, not after the job waited in the queue."""
    import click

    from commbench.cli import app
    from commbench.cli._common import ParseError, error_line
    from commbench.errors import UserError

    name, rest = args[0], args[1:]
    if name not in _WRAPPABLE:
        raise UserError(
            f"slurm-script runs {', '.join(_WRAPPABLE[:-1])} or {_WRAPPABLE[-1]} on every node, "
            f"not {name!r}: "
            "e.g. `commbench slurm-script -N 2 -- collectives --sizes 1K-1G`"
        )
    group: Any = typer.main.get_command(app)
    parent = click.Context(group, info_name="commbench")
    command = group.get_command(parent, name)
    try:
        wrapped = command.make_context(name, list(rest), parent=parent)
    except ParseError as exc:
        raise UserError(
            "the wrapped command: " + error_line(exc).removeprefix("commbench: error: ")
        ) from None
    params = wrapped.params
    given = [f"--{k.replace('_', '-')}" for k in _SLURM_OWNS if params.get(k) is not None]
    if given:
        raise UserError(
            f"{', '.join(given)}: the script builds the rendezvous from the SLURM job; "
            "leave these out"
        )
    if params.get("backend") == "nccl" and gpus_per_node == 0:
        raise UserError("--backend nccl needs GPUs, and the script asks for --gpus-per-node 0")
    # What the nodes will run, built by the functions the command itself builds it with,
    # placed on the nodes the script asks for (not on this submit host)
    from functools import partial

    from commbench.collectives.placement import placement_for
    from commbench.launch.launcher import LaunchOptions

    placer = partial(placement_for, gpus_per_node)
    # the nodes build the rendezvous from the job; any endpoint stands for it here
    launch = LaunchOptions(nnodes=nodes, rdzv_endpoint="head-node:29400" if nodes > 1 else None)
    if name == "collectives":
        from commbench.cli.collectives import settings_options
        from commbench.collectives.settings import CollectivesSettings
        from commbench.launch.preflight import validate_ranks

        settings = CollectivesSettings.from_options(
            placer(params["device"], params["nproc"], params["backend"]),
            **settings_options(params),
        )
        _check_gpus(settings.device, settings.nproc, gpus_per_node)
        validate_ranks(settings, nodes * settings.nproc)
    elif name == "diagnose":
        from commbench.diagnose.settings import DiagnoseRequest, diagnose_settings
        from commbench.options import declared

        wanted = {o.name: params[o.name] for o in declared(DiagnoseRequest)}
        _, settings = diagnose_settings(
            placer(params["device"], params["nproc"], params["backend"]),
            DiagnoseRequest(**wanted),
        )
        _check_gpus(settings.device, settings.nproc, gpus_per_node)
    elif name == "run":
        from commbench.suites.gate import load_runs
        from commbench.suites.runner import prepare_suite

        _, machine, _ = prepare_suite(
            params["config"],
            launch,
            placer,
            nproc=params["nproc"],
            device=params["device"],
            backend=params["backend"],
            tolerance=params["tolerance"],
            allow_mismatch=params["allow_mismatch"],
        )
        _check_gpus(machine.device, machine.nproc, gpus_per_node)
        if params.get("baseline") is not None:
            load_runs(params["baseline"])


def _check_gpus(device: str, nproc: int, gpus_per_node: int) -> None:
    """GPU ranks need a GPU each on the node: the nodes would refuse it after the queue."""
    from commbench.errors import UserError

    if device == "cuda" and nproc > gpus_per_node:
        raise UserError(
            f"--device cuda runs {nproc} GPU rank(s) per node, and the script asks for "
            f"--gpus-per-node {gpus_per_node}"
        )


def register(app: typer.Typer) -> None:
    @app.command(
        "slurm-script",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    @command(SlurmScriptRequest)
    def slurm_script_command(request: SlurmScriptRequest, ctx: typer.Context) -> None:
        """Print an sbatch script that runs commbench on every node of a SLURM job.

        Everything after the options is the commbench command to run, e.g.
        `commbench slurm-script -N 4 -- collectives --sizes 1K-1G`.
        """
        with reported_errors():
            request.command = ctx.args
            script = slurm_script(**values(request))
        typer.echo(script, nl=False)
