"""Errors the CLI turns into one line and an exit code, instead of a traceback.

The core raises these; the CLI catches them (each command through
`commbench.cli._common.reported_errors`, `commbench.cli.main` as the last resort). Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the run completed but something measured failed (check, regression, worker)
EXIT_USAGE = 2  # bad input or incomparable inputs: nothing was measured
EXIT_INTERRUPTED = 130


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
    """Ctrl-C or SIGTERM: everything was stopped; what was measured is on disk."""

    exit_code = EXIT_INTERRUPTED
