"""Helpers shared by the command modules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from commbench.errors import CommbenchError


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn a known error into one line on stderr and its exit code.

    Commands wrap their core calls in this, so CliRunner tests see exactly what a user
    sees; `commbench.cli.main` catches the same errors as a last resort.
    """
    try:
        yield
    except CommbenchError as exc:
        typer.echo(f"commbench: error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
