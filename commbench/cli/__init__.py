"""The command line: a thin Typer layer over the core.

Each command lives in its own module with a `register(app)` function and is listed in
`_COMMANDS`. Heavy modules (torch, pandas, matplotlib) are imported inside the commands,
never at import time, so that `commbench --help` answers at once.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from commbench.cli._common import ParseError, error_line, is_usage_error, reported_errors
from commbench.errors import EXIT_INTERRUPTED, CommbenchError
from commbench.version import VERSION


class _Commands(TyperGroup):
    """commbench's commands: a known error is one line and its exit code wherever it comes
    from, the command's request record included (it checks what was typed before the
    command's body runs, commbench.arguments), as `main` says it, under CliRunner too."""

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
    context_settings={"help_option_names": ["-h", "--help"]},
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
    "plot",
    "report",
    "export",
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
    from commbench.launch.procs import interrupt_on_termination

    interrupt_on_termination()  # SIGTERM/SIGHUP end any command like Ctrl-C, start to exit
    if not isinstance(sys.stdout, _PipeGuard):
        sys.stdout = _PipeGuard(sys.stdout)
    args = sys.argv[1:] if argv is None else argv
    try:
        code = app(args=args, prog_name="commbench", standalone_mode=False)
    except CommbenchError as exc:
        typer.echo(error_line(exc), err=True)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("commbench: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _quiet_on_broken_pipe()
    except ParseError as exc:
        if is_usage_error(exc) and not args:
            # `commbench` alone: the help text (no_args_is_help), not an error line
            typer.echo(exc.format_message(), err=True)
        else:
            typer.echo(error_line(exc), err=True)
        sys.exit(exc.exit_code)
    try:
        sys.stdout.flush()  # what is still buffered is part of the output: a closed pipe says so
    except BrokenPipeError:
        _quiet_on_broken_pipe()
    sys.exit(code if isinstance(code, int) else 0)


EXIT_BROKEN_PIPE = 128 + 13
"""The reader of stdout went away (`commbench model ... | head`): exit as a process killed by
SIGPIPE would, the shell's own convention, with nothing said."""


def _quiet_on_broken_pipe() -> None:
    """Stop at once, without a traceback: stdout is pointed at /dev/null so that the flush at
    interpreter exit does not raise again (Python's documented recipe, `signal` module)."""
    import os

    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_BROKEN_PIPE)


class _PipeGuard:
    """sys.stdout, written in pieces of at most `CHUNK` characters, each flushed.

    Why: one large write into a pipe whose reader has gone (`commbench report RUN -f html |
    head -c 10`) comes back from the kernel as a short write, and CPython's buffered writer
    takes it without raising, so the rest of the output was lost with exit 0. Written in
    pieces, the next piece raises BrokenPipeError, and the command ends here at once, as
    SIGPIPE would end it (exit 141, nothing said) before click could turn it into exit 1.
    Everything else is the stream's own (`encoding`, `isatty`, `buffer`, ...).
    """

    CHUNK = 1 << 15

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            if len(text) <= self.CHUNK:
                self._stream.write(text)
                if len(text) > 1024:
                    self._stream.flush()
            else:
                for start in range(0, len(text), self.CHUNK):
                    self._stream.write(text[start : start + self.CHUNK])
                    self._stream.flush()
        except BrokenPipeError:
            _quiet_on_broken_pipe()
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _quiet_on_broken_pipe()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
