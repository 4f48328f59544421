"""`commbench slurm-script`: print a ready sbatch script for a multi-node run."""

from __future__ import annotations

import re

import typer

from commbench.cli._common import reported_errors

# ASCII digits (`\d` takes any Unicode digit, which sbatch refuses once the job is submitted)
_SLURM_TIME = re.compile(r"[0-9]{1,9}(:[0-9]{1,2}){0,2}|[0-9]{1,9}-[0-9]{1,2}(:[0-9]{1,2}){0,2}")
_PLAIN = re.compile(r"[A-Za-z0-9_.,-]+")
# The commands that run across the nodes of a job (the others run on one machine).
_WRAPPABLE = ("collectives", "run")


_SLURM_OWNS = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id")


def _check_wrapped(ctx: typer.Context, args: list[str], nodes: int, gpus_per_node: int) -> None:
    """Parse the command the script will run, as it will be parsed on the nodes: a typo must
    fail here, not after the job waited in the queue."""
    from commbench.cli._common import ParseError, error_line
    from commbench.errors import UserError

    name, rest = args[0], args[1:]
    if name not in _WRAPPABLE:
        raise UserError(
            f"slurm-script runs {' or '.join(_WRAPPABLE)} on every node, not {name!r}: "
            "e.g. `commbench slurm-script -N 2 -- collectives --sizes 1K-1G`"
        )
    parent = ctx.parent
    get_command = getattr(parent.command, "get_command", None) if parent is not None else None
    command = get_command(parent, name) if get_command is not None else None
    if command is None:  # not under the commbench group (called directly): nothing to parse
        return
    try:
        wrapped = command.make_context(name, list(rest), parent=ctx.parent)
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
    if name == "collectives":
        from commbench.cli.collectives import check_iteration_flags, parse_ranks
        from commbench.collectives.placement import placement_for
        from commbench.collectives.specs import parse_ops
        from commbench.sizes import parse_sizes

        if params.get("sizes") is not None:
            parse_sizes(params["sizes"])
        if params.get("ops") is not None:
            parse_ops(params["ops"])
        check_iteration_flags(params.get("iters"), params.get("min_time"))
        place = placement_for(gpus_per_node, params.get("device"), params.get("nproc"))
        world = nodes * place.nproc
        bad = [r for r in parse_ranks(params.get("ranks")) or [] if not 0 <= r < world]
        if bad:
            raise UserError(f"--ranks: rank {bad[0]} is outside the job's world (0..{world - 1})")
    elif name == "run":
        from commbench.suites.config import load_suite
        from commbench.suites.store import load_runs

        if params.get("config") is not None:
            load_suite(params["config"])
        if params.get("baseline") is not None:
            load_runs(params["baseline"])


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
        time_limit: str = typer.Option(
            "00:30:00",
            "--time",
            help="Time limit in any SLURM form: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.",
        ),
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
            if not _SLURM_TIME.fullmatch(time_limit):
                raise UserError(
                    f"--time {time_limit!r} is not a SLURM time (MM, MM:SS, HH:MM:SS, D-HH, "
                    "D-HH:MM or D-HH:MM:SS)"
                )
            for flag, value in (("--job-name", job_name), ("--partition", partition)):
                if value is not None and not _PLAIN.fullmatch(value):
                    raise UserError(
                        f"{flag} {value!r}: use letters, digits, '_', '-', '.' (and ',' for "
                        "partitions)"
                    )
            args = list(ctx.args) or ["collectives"]
            _check_wrapped(ctx, args, nodes, gpus_per_node)
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
