"""The wrapped command of a multi-node job (`slurm-script`, `k8s-manifest`), parsed and
checked on this machine as the nodes will parse it: a typo must fail here, not after the
job waited in the queue. It lives with the command line because it reads the command
line's own grammar."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import typer

from commbench.launch.job import LAUNCH_FLAGS, WRAPPABLE, MultiNodeJob, Scheduler


def multi_node_job(
    scheduler: Scheduler,
    *,
    nodes: int,
    gpus_per_node: int,
    name: str,
    command: Sequence[str],
) -> MultiNodeJob:
    """The job `scheduler` is asked for, every part checked (UserError for bad input); an
    empty `command` is `collectives`."""
    job = MultiNodeJob(
        scheduler=scheduler,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        name=name,
        args=tuple(command) or ("collectives",),
    )
    return dataclasses.replace(job, given=_check_wrapped(job))


def _check_wrapped(job: MultiNodeJob) -> dict[str, Any]:
    """Parse the command the job will run, as it will be parsed on the nodes; its options."""
    from commbench.cli import app
    from commbench.cli._common import ParseError, error_line
    from commbench.errors import UserError
    from commbench.escape import describe, unsafe_character

    name, rest = job.args[0], job.args[1:]
    nodes, gpus_per_node, scheduler = job.nodes, job.gpus_per_node, job.scheduler
    group: Any = typer.main.get_command(app)
    parent = typer.Context(group, info_name="commbench")
    if name.startswith("-"):  # not a command: an option the scheduler's command lacks
        from commbench.cli._suggest import unknown_option

        own = group.get_command(parent, scheduler.command)
        raise UserError(
            f"{unknown_option(name.split('=')[0], own, parent)} (see 'commbench "
            f"{scheduler.command} --help'; the command to run goes after --)"
        )
    if name not in WRAPPABLE:
        raise UserError(
            f"{scheduler.command} runs {', '.join(WRAPPABLE[:-1])} or {WRAPPABLE[-1]} on every "
            f"node, not {name!r}: e.g. `{scheduler.example}`"
        )
    for position, arg in enumerate(rest, 1):
        if arg in ("--help", "-h"):  # click would print the help and exit 0: no job at all
            raise UserError(
                f"the wrapped command asks for its help: `commbench {name} --help` prints it; "
                f"{scheduler.writes} needs a command to run"
            )
        char = unsafe_character(arg)
        if char is not None:
            raise UserError(
                f"the wrapped command's argument {position} holds {describe(char)}: no "
                f"commbench option takes one, and it would change what {scheduler.writes} says"
            )
    command = group.get_command(parent, name)
    try:
        wrapped = command.make_context(name, list(rest), parent=parent)
    except ParseError as exc:
        raise UserError(
            "the wrapped command: " + error_line(exc).removeprefix("commbench: error: ")
        ) from None
    params = wrapped.params
    given = [f"--{k.replace('_', '-')}" for k in LAUNCH_FLAGS if params.get(k) is not None]
    if given:
        raise UserError(
            f"{', '.join(given)}: {scheduler.writes} builds the rendezvous from "
            f"{scheduler.rendezvous}; leave these out"
        )
    if params.get("backend") == "nccl" and gpus_per_node == 0:
        raise UserError(
            f"--backend nccl needs GPUs, and {scheduler.writes} asks for --gpus-per-node 0"
        )
    # What the nodes will run, built by the functions the command itself builds it with,
    # placed on the nodes the job asks for (not on this submit host)
    from functools import partial

    from commbench.collectives.placement import placement_for
    from commbench.launch.launcher import LaunchOptions
    from commbench.options import from_params

    placer = partial(placement_for, gpus_per_node)
    # the nodes build the rendezvous from the job; any endpoint stands for it here
    launch = LaunchOptions(nnodes=nodes, rdzv_endpoint="head-node:29400" if nodes > 1 else None)
    if name == "collectives":
        from commbench.collectives.settings import CollectivesRequest
        from commbench.launch.preflight import validate_ranks

        settings = from_params(CollectivesRequest, params).settings(
            placer(params["device"], params["nproc"], params["backend"])
        )
        _check_gpus(job, settings.device, settings.nproc)
        validate_ranks(settings, nodes * settings.nproc)
    elif name == "diagnose":
        from commbench.diagnose.settings import DiagnoseRequest, diagnose_settings

        _, diagnosed = diagnose_settings(
            placer(params["device"], params["nproc"], params["backend"]),
            from_params(DiagnoseRequest, params),
        )
        _check_gpus(job, diagnosed.device, diagnosed.nproc)
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
        _check_gpus(job, machine.device, machine.nproc)
        if params.get("baseline") is not None:
            load_runs(params["baseline"])
    return dict(params)


def _check_gpus(job: MultiNodeJob, device: str, nproc: int) -> None:
    """GPU ranks need a GPU each on the node: the nodes would refuse it after the queue."""
    from commbench.errors import UserError

    if device == "cuda" and nproc > job.gpus_per_node:
        raise UserError(
            f"--device cuda runs {nproc} GPU rank(s) per node, and {job.scheduler.writes} "
            f"asks for --gpus-per-node {job.gpus_per_node}"
        )
