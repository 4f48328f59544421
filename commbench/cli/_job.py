"""The wrapped command of a multi-node job (`slurm-script`, `k8s-manifest`), parsed and
checked on this machine as the nodes will parse it: a typo must fail here, not after the
job waited in the queue. It lives with the command line because it reads the command
line's own grammar."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import typer

from commbench.arguments import Request
from commbench.launch.job import (
    GPUS_PER_NODE,
    LAUNCH_FLAGS,
    NODES,
    WRAPPABLE,
    MultiNodeJob,
    Scheduler,
)
from commbench.options import field_of, from_params, values


@dataclass(kw_only=True)
class JobRequest(Request):
    """What `slurm-script` and `k8s-manifest` both take first: the command every node runs
    and the job's nodes, declared once for both (their own options are their records')."""

    command: Sequence[str] = field(default=("collectives",), kw_only=False)
    """The commbench command to run on every node, as a list (`["collectives", "--sizes",
    "1K-1G"]`): on the command line, everything after the options."""
    nodes: int = field_of(NODES, default=2, help="Nodes to run on (on Kubernetes, a pod each).")
    gpus_per_node: int = field_of(
        GPUS_PER_NODE,
        default=8,
        help="GPUs per node (on Kubernetes, the pod's nvidia.com/gpu); 0 for a CPU/gloo run.",
    )


def register_job_command(
    app: typer.Typer, name: str, record: type, write: Callable[..., str], doc: str
) -> None:
    """Register `slurm-script` or `k8s-manifest`: the options are `record`'s, everything
    after them is the wrapped command, and what `write` (the verb) returns is printed."""
    from commbench.cli._common import reported_errors, verb_command

    def job_command(request: Any, ctx: typer.Context) -> None:
        with reported_errors():
            request.command = ctx.args
            text = write(**values(request))
        typer.echo(text, nl=False)

    job_command.__doc__ = doc
    job_command.__name__ = job_command.__qualname__ = f"{name.replace('-', '_')}_command"
    settings = {"allow_extra_args": True, "ignore_unknown_options": True}
    verb_command(app, name, record, context_settings=settings)(job_command)


def multi_node_job(scheduler: Scheduler, request: JobRequest, *, name: str) -> MultiNodeJob:
    """The job `scheduler` is asked for by `request` (named `name`), every part checked
    (UserError for bad input); an empty command is `collectives`."""
    job = MultiNodeJob(
        scheduler=scheduler,
        nodes=request.nodes,
        gpus_per_node=request.gpus_per_node,
        name=name,
        args=tuple(request.command) or ("collectives",),
    )
    return dataclasses.replace(job, given=_check_wrapped(job))


def _check_wrapped(job: MultiNodeJob) -> dict[str, Any]:
    """Parse the command the job will run, as it will be parsed on the nodes; its options."""
    from commbench.cli import app
    from commbench.cli._common import ParseError, error_line
    from commbench.errors import UserError
    from commbench.escape import describe, unsafe_character

    name, rest = job.args[0], job.args[1:]
    gpus_per_node, scheduler = job.gpus_per_node, job.scheduler
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
    # What the nodes will run, built by the functions the command itself builds it with, on
    # the nodes the job asks for: the wrapped command's request checks itself
    record = getattr(command.callback, "options", None)
    check = _wrapped_check(name)
    if check is not None and record is not None:
        check(from_params(record, params), job)  # the record the nodes will build
    return dict(params)


def _wrapped_check(name: str) -> Callable[[Any, MultiNodeJob], None] | None:
    """The check a wrapped command's work makes of its record on the job's nodes, where it
    lives beside that work (imported only when a job wraps that command)."""
    if name == "collectives":
        from commbench.launch.launcher import check_wrapped as check_collectives

        return check_collectives
    if name == "run":
        from commbench.suites.runner import check_wrapped

        return check_wrapped
    if name == "diagnose":
        from commbench.diagnose.settings import check_wrapped as check_diagnose

        return check_diagnose
    return None
