"""The command line: a thin Typer layer over the core.

Each command lives in its own module with a `register(app)` function and is listed in
`_COMMANDS`. Heavy modules (torch, pandas, matplotlib) are imported inside the commands,
never at import time, so that `commbench --help` answers at once.
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from commbench.cli._common import ParseError, error_line, is_usage_error, reported_errors, say
from commbench.errors import CommbenchError, interrupted_exit_code, stop_signal
from commbench.version import VERSION


class _Commands(TyperGroup):
    """commbench's commands: a known error is one line and its exit code wherever it comes
    from, the command's request record included (it checks what was typed before the
    command's body runs, commbench.arguments), as `main` says it, under CliRunner too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from commbench.cli._values import install

        install(self)  # values converted without pydantic: a wrong one is said at once

    def invoke(self, ctx: Any) -> Any:
        with reported_errors():
            return super().invoke(ctx)


app = typer.Typer(
    cls=_Commands,
    name="commbench",
    help="How fast do my GPUs talk to each other, and did that just get worse?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={
        "help_option_names": ["-h", "--help"],
        # --help not given is None to Typer, which it coerces to a bool through pydantic: an
        # import that was a third of a usage error's time (`--world` for `--nproc`). A
        # default of False is a bool already, taken as it is.
        "default_map": {"help": False},
    },
)

# One module per command, in the order `--help` lists them.
_COMMANDS = (
    "topo",
    "p2p",
    "collectives",
    "diagnose",
    "record",
    "replay",
    "model",
    "slurm",
    "k8s",
    "run",
    "compare",
    "history",
    "plot",
    "report",
    "export",
    "settle",
    "import_nccl",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"commbench {VERSION}")
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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one line and an exit code for every known error.

    Only errors commbench knows are turned into a line; anything else is a bug and keeps
    its traceback (exit 1), never wrapped in a second one by this handler.
    """
    from commbench.cli._streams import flush_stdout, guard_std_streams
    from commbench.launch.procs import interrupt_on_termination

    interrupt_on_termination()  # SIGTERM/SIGHUP end any command like Ctrl-C, start to exit
    guard_std_streams()  # a closed stdout or stderr, a reader that goes away
    code = _run(sys.argv[1:] if argv is None else argv)
    flush_stdout()
    if stop_signal() is not None:
        # Asked to stop (a scheduler's SIGTERM): what it wrote is final, and the grace period
        # before SIGKILL counts every second of the exit. The interpreter's last collections
        # walk every object torch made (0.4 s of CPU: 2 to 5 s of a loaded node): out of
        # their sight, the command exits at once, with its own code, not SIGKILL's 137.
        gc.freeze()
    # CPython remembers a KeyboardInterrupt that left an exec() of a string (a dataclass or a
    # namedtuple made as a module is imported, when the stop signal lands in it) even once
    # it was caught, and `python -m commbench` then ends by killing itself with SIGINT
    # whatever the code: -2, not 143. An exec that ends well forgets it.
    exec("")
    sys.exit(code)


def _run(args: list[str]) -> int:
    """The command's exit status, every known error said in one line on stderr."""
    from commbench.cli._streams import end_on_broken_pipe

    try:
        code = app(args=args, prog_name="commbench", standalone_mode=False)
    except CommbenchError as exc:
        typer.echo(error_line(exc), err=True)
        return exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        say("interrupted")
        return interrupted_exit_code()  # 130 for Ctrl-C, 143 for a scheduler's SIGTERM
    except BrokenPipeError:  # a write that did not go through the guard (a library's own)
        end_on_broken_pipe(sys.stdout)
    except ParseError as exc:
        if is_usage_error(exc) and not args:
            # `commbench` alone: the help text (no_args_is_help), not an error line
            typer.echo(exc.format_message(), err=True)
        else:
            typer.echo(error_line(exc), err=True)
        return exc.exit_code
    return code if isinstance(code, int) else 0
