"""Errors the CLI turns into one line and an exit code, instead of a traceback.

The core raises these; the CLI catches them (each command through
`commbench.cli._common.reported_errors`, `commbench.cli.main` as the last resort). Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_FAILED = 1  # the run completed but something measured failed (check, regression, worker)
EXIT_USAGE = 2  # bad input or incomparable inputs: nothing was measured
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130: Ctrl-C

_stop_signals: list[int] = []
"""The first signal that asked this command to stop, once one did."""


def note_stop_signal(signum: int) -> None:
    """Remember the signal that asked the command to stop, the first one only: a second
    Ctrl-C after a scheduler's SIGTERM does not change why the command stopped."""
    if not _stop_signals:
        _stop_signals.append(signum)


def forget_stop_signal() -> None:
    """A command starts with no stop asked (a process that runs several, the tests' or an
    API user's, must not exit the next one with the last one's signal)."""
    _stop_signals.clear()


def stop_signal() -> int | None:
    """The signal that asked this command to stop; None when none did."""
    return _stop_signals[0] if _stop_signals else None


def interrupted_exit_code() -> int:
    """How a command that was asked to stop exits: 128 + the signal's number, as a shell
    reports a process that signal ended, so a job script or a scheduler's log tells Ctrl-C
    (130) from the scheduler's own SIGTERM at a time limit or a preemption (143). Without a
    signal noted (Python's own Ctrl-C handler, a KeyboardInterrupt raised in code), 130."""
    return 128 + (stop_signal() or signal.SIGINT)


def quoted(text: str, limit: int = 60) -> str:
    """User text for a one-line message: repr'd (control characters escaped) and cut short,
    so a 400-digit size or a pasted file does not become the message."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[: limit - 5]}...{shown[-1]}"


class CommbenchError(Exception):
    """Base of the errors commbench reports as one line."""

    exit_code = EXIT_FAILED


class UserError(CommbenchError):
    """Bad input: a flag, a file, a combination the backend cannot run."""

    exit_code = EXIT_USAGE


class RunFailed(CommbenchError):
    """A launched run failed (a worker died or hung); what it measured is on disk."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, stop_requested: bool = False) -> None:
        super().__init__(message)
        self.stop_requested = stop_requested
        """Ctrl-C or SIGTERM came as it failed: whoever would run more after it should not."""


class Interrupted(CommbenchError):
    """Ctrl-C or SIGTERM: everything was stopped; what was measured is on disk. Exits with
    the code of the signal that asked it (`interrupted_exit_code`), read as it is raised."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.exit_code = interrupted_exit_code()
