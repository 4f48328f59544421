"""Helpers shared by the command modules."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from commbench.errors import (
    EXIT_USAGE,
    CommbenchError,
    forget_stop_signal,
    interrupted_exit_code,
)

if TYPE_CHECKING:  # rich is imported when a bar is made, not when the CLI starts
    from rich.progress import Progress

    from commbench.collectives.placement import PlacementRequest
    from commbench.flags import Output


def verb_command(
    app: typer.Typer, name: str, record: type, *, output: Output | None = None, **settings: Any
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register `body(request, ...)` as the command `name`: its options are `record`'s
    fields, then the shared output option (`output`: `--format` with the command's formats,
    given to the body as `fmt`), then the body's own parameters."""
    from commbench.options import command

    def wrap(body: Callable[..., None]) -> Callable[..., None]:
        given = () if output is None else (output.parameter(),)
        return app.command(name, **settings)(command(record, *given)(body))

    return wrap


# Typer words some parse errors for programmers; a user reads these instead.
_REWORDED = (
    (re.compile(r"Value error, "), ""),
    (re.compile(r"Input should be a valid integer[^.]*"), "expected a whole number"),
    (re.compile(r"Input should be a valid number[^.]*"), "expected a number"),
)


# The errors Typer raises for what it parses, through its public API only (`typer.Abort`,
# `typer.Exit`, `typer.TyperException`, the base of click's errors since Typer 0.28 vendors
# click): a private module moves between releases, and the last-resort handler must not
# itself fail. Typer is pinned in pyproject.toml to the releases these names were tested on.
ParseError = typer.TyperException


def is_usage_error(exc: BaseException) -> bool:
    """A parse error of the command line (click's UsageError family, exit code 2)."""
    return isinstance(exc, ParseError) and exc.exit_code == EXIT_USAGE


def usage_line(exc: Any) -> str:
    """A parse error as one line: what is wrong and where the help is."""
    message = _unknown_option(exc) or exc.format_message()
    for pattern, replacement in _REWORDED:
        message = pattern.sub(replacement, message)
    message = " ".join(message.rstrip(".").split())  # one line, whatever the message held
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "commbench"
    return f"commbench: error: {message} (see '{command} --help')"


def _unknown_option(exc: Any) -> str | None:
    """An option the command does not have, with the one it most likely meant, if any (in
    place of Typer's list of spellings alike: `--bogus` got `--ops, --out`). Typer's class for
    it is not public: its error is the one that carries `possibilities`."""
    typed, ctx = getattr(exc, "option_name", None), getattr(exc, "ctx", None)
    if not isinstance(typed, str) or not hasattr(exc, "possibilities") or ctx is None:
        return None
    from commbench.cli._suggest import unknown_option

    return unknown_option(typed, ctx.command, ctx)


def error_line(exc: BaseException) -> str:
    """Any known error as the one line a user reads."""
    if is_usage_error(exc):
        return usage_line(exc)
    text = exc.format_message() if isinstance(exc, ParseError) else str(exc)
    return f"commbench: error: {' '.join(text.split())}"


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn a known error into one line on stderr and its exit code.

    Commands wrap their core calls in this, so CliRunner tests see exactly what a user
    sees; `commbench.cli.main` catches the same errors as a last resort. Ctrl-C (and SIGTERM,
    SIGHUP: `main` makes them KeyboardInterrupt) that no core code turned into `Interrupted`
    ends here too, with the one line `main` prints for it (Typer would exit 130 silently),
    and the exit code of the signal that came (143 for SIGTERM). The block is the command's
    start: no stop signal is noted before it (`forget_stop_signal`).
    """
    forget_stop_signal()
    try:
        yield
    except CommbenchError as exc:
        typer.echo(error_line(exc), err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:  # Typer would exit 130 without a word
        say("interrupted")
        raise typer.Exit(interrupted_exit_code()) from None


def progress_bar() -> Progress:
    """The bar a long command shows on stderr while it measures: transient (the table it
    prints after replaces it), and off when stderr is not a terminal (CI logs, pipes)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


def place_ranks(request: PlacementRequest) -> list[str]:
    """Decide where the request's ranks go (the machine fills in what was not given), pinned
    on the request so the verb does not ask the machine again; the notes to say first
    (`said_first`): CPU ranks for want of a GPU, more CPU ranks than cores. A `--nproc`
    this node cannot run at all is a UserError (`check_nproc`)."""
    asked = request.nproc
    place = request.placement()
    request.device, request.nproc, request.backend = place.device, place.nproc, place.backend
    notes = [place.note] if place.note else []
    if asked is not None:
        notes += check_nproc(asked, place.device, place.gpus)
    return notes


def check_nproc(nproc: int, device: str, gpus: int | None) -> list[str]:
    """`-n`/`--nproc` against this node: more GPU ranks than GPUs, or more CPU ranks than
    the preflight's ceiling per core, is a UserError; more CPU ranks than cores a warning.
    Both say `NPROC_HINT`, since such a count is most often nccl-tests' `-n` (iterations).
    `gpus`: what NVML counted; None or 0 (not asked, no NVML) leaves it to the probe."""
    import os

    from commbench.errors import UserError
    from commbench.flags import NPROC_HINT
    from commbench.launch.preflight import MAX_CPU_RANKS_PER_CORE

    if device == "cuda":
        if gpus and nproc > gpus:
            raise UserError(
                f"--nproc {nproc} asks for {nproc} GPU ranks on a node with {gpus} GPU(s); "
                f"{NPROC_HINT}"
            )
        return []
    cores = os.cpu_count() or 1
    if nproc > MAX_CPU_RANKS_PER_CORE * cores:
        raise UserError(
            f"--nproc {nproc} is more than {MAX_CPU_RANKS_PER_CORE} CPU ranks per core "
            f"({cores} cores here); {NPROC_HINT}"
        )
    if nproc > cores:
        return [
            f"warning: --nproc {nproc} starts {nproc} CPU ranks on {cores} cores: they share "
            f"the cores, and the times include the sharing ({NPROC_HINT})"
        ]
    return []


def say(line: object) -> None:
    """One line for the user on stderr, prefixed `commbench: ` as every line the command
    line says there is (stdout holds the results, which a pipe takes)."""
    typer.echo(f"commbench: {line}", err=True)


class SaidAtOnce:
    """A run's `on_warning`: each warning said on stderr when the run takes it (before its
    workers start), and remembered, so that the run's end does not say it again."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def __call__(self, line: str) -> None:
        self.said.append(line)
        say(f"warning: {line}")

    def unsaid(self, lines: list[str]) -> list[str]:
        """`lines` less those already said."""
        return [line for line in lines if line not in self.said]


def said_first(notes: list[str] | str | None, then: Callable[..., None]) -> Callable[..., None]:
    """`then`, with `notes` said on stderr, in order, before its first call: once the run is
    under way, so bad input is still refused in a line of its own."""
    pending = [notes] if isinstance(notes, str) else list(notes or [])

    def call(*args: Any) -> None:
        while pending:
            say(pending.pop(0))
        then(*args)

    return call
