"""Helpers shared by the command modules."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from commbench.errors import EXIT_INTERRUPTED, CommbenchError

if TYPE_CHECKING:  # rich is imported when a bar is made, not when the CLI starts
    from rich.progress import Progress


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn a known error into one line on stderr and its exit code.

    Commands wrap their core calls in this, so CliRunner tests see exactly what a user
    sees; `commbench.cli.main` catches the same errors as a last resort. Ctrl-C (and SIGTERM,
    SIGHUP: `main` makes them KeyboardInterrupt) that no core code turned into `Interrupted`
    ends here too, with the one line `main` prints for it (Typer would exit 130 silently).
    """
    try:
        yield
    except CommbenchError as exc:
        typer.echo(f"commbench: error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        typer.echo("commbench: interrupted", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def progress_bar() -> Progress:
    """The bar a long command shows on stderr while it measures: transient (the table it
    prints after replaces it), and off when stderr is not a terminal (CI logs, pipes)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


# The multi-node options `collectives` and `run` share (torchrun's c10d rendezvous). Inside a
# SLURM job step none is needed: `commbench.launch.launcher.resolve_launch` reads the job.
NNODES = typer.Option(
    None, "--nnodes", help="Nodes in a multi-node run (run the same command on each)."
)
NODE_RANK = typer.Option(None, "--node-rank", help="This node's index, 0..nnodes-1.")
RDZV_ENDPOINT = typer.Option(
    None, "--rdzv-endpoint", help="HOST:PORT of the torchrun c10d rendezvous."
)
RDZV_ID = typer.Option(None, "--rdzv-id", help="Rendezvous id (the same on every node).")
DEBUG = typer.Option(
    False,
    "--debug",
    help="TORCH_DISTRIBUTED_DEBUG=DETAIL and NCCL INFO logs into the run directory.",
)
