"""The command line: a thin Typer layer over the core.

Each command lives in its own module with a `register(app)` function and is listed in
`_COMMANDS`. Heavy modules (torch, pandas, matplotlib) are imported inside the commands,
never at import time, so that `commbench --help` answers at once.
"""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType
from typing import Any

import typer

from commbench import __version__
from commbench.errors import EXIT_INTERRUPTED, EXIT_USAGE, CommbenchError

app = typer.Typer(
    name="commbench",
    help="How fast do my GPUs talk to each other, and did that just get worse?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# One module per command, in the order `--help` lists them.
_COMMANDS = (
    "topo",
    "p2p",
    "collectives",
    "model",
    "slurm",
    "run",
    "compare",
    "plot",
    "report",
    "import_nccl",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"commbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """How fast do my GPUs talk to each other, and did that just get worse?"""


for _name in _COMMANDS:
    importlib.import_module(f"commbench.cli.{_name}").register(app)


# Typer words some parse errors for programmers; a user reads these instead.
_REWORDED = (
    (re.compile(r"Value error, "), ""),
    (re.compile(r"Input should be a valid integer[^.]*"), "expected a whole number"),
    (re.compile(r"Input should be a valid number[^.]*"), "expected a number"),
)


def _click_exceptions() -> ModuleType:
    """The click exceptions Typer raises: recent Typer vendors its own copy of click."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:  # Typer before it vendored click
        return importlib.import_module("click.exceptions")


def usage_line(exc: Any) -> str:
    """A parse error as one line: what is wrong and where the help is."""
    message = exc.format_message()
    for pattern, replacement in _REWORDED:
        message = pattern.sub(replacement, message)
    message = message.rstrip(".")
    command = exc.ctx.command_path if exc.ctx is not None else "commbench"
    return f"commbench: error: {message} (see '{command} --help')"


def main() -> None:
    """Console-script entry point: one line and an exit code for every known error."""
    from commbench.launch.procs import interrupt_on_termination

    interrupt_on_termination()  # SIGTERM/SIGHUP end any command like Ctrl-C, start to exit
    errors = _click_exceptions()
    try:
        code = app(standalone_mode=False)
    except getattr(errors, "NoArgsIsHelpError", ()) as exc:
        exc.show()  # the help text, as `commbench` alone should print
        sys.exit(exc.exit_code)
    except errors.UsageError as exc:
        typer.echo(usage_line(exc), err=True)
        sys.exit(EXIT_USAGE)
    except errors.ClickException as exc:
        typer.echo(f"commbench: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except CommbenchError as exc:
        typer.echo(f"commbench: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, errors.Abort):
        typer.echo("commbench: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
