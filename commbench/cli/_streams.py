"""The process's stdout and stderr as every command uses them (docs/conventions.md):

- a stream the shell closed (`commbench ... >&-`, `2>&-`) is /dev/null: what would go there is
  dropped, and the exit status is the command's own. Python leaves such a stream None (or,
  for stderr, on a descriptor that is no longer open), which every print, echo and flush then
  failed on (exit 120, "Exception ignored in ...");
- a reader that goes away (`commbench model ... | head -1`) ends the command at its next write,
  quietly, with exit 141, as SIGPIPE would end it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Any, NoReturn

EXIT_BROKEN_PIPE = 128 + 13
"""The reader of stdout or stderr went away: exit as a process killed by SIGPIPE would, the
shell's own convention, with nothing said."""


def guard_std_streams() -> None:
    """Put /dev/null in place of a closed stdout or stderr, and guard both against a reader
    that goes away. `commbench.cli.main` calls it first, before anything is written."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stand_in = _closed(fd)
        if stand_in:
            _null_at(fd)
        stream = getattr(sys, name)
        if stream is None:  # closed when Python started
            stream = open(  # noqa: SIM115  (the process's own stream, open until it exits)
                fd if stand_in else os.devnull,
                "w",
                encoding="utf-8",
                errors="backslashreplace",
                buffering=1,
                closefd=not stand_in,
            )
        if not isinstance(stream, PipeGuard):
            setattr(sys, name, PipeGuard(stream))


def flush_stdout() -> None:
    """What stdout still buffers is part of the output: flushed before the exit, so that a
    reader gone by then is told apart (exit 141) from a command that wrote everything."""
    sys.stdout.flush()


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _null_at(fd: int) -> None:
    """/dev/null at the descriptor the shell closed. Python may still hold a stream on it
    (it checks stderr's descriptor before its own start-up has let go of it), and no file
    commbench opens later may take the number: a stray write would land in a results file.
    The processes commbench starts (torchrun, a recorded job) then find it open too."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null == fd:
        os.set_inheritable(fd, True)
    else:
        os.dup2(null, fd)
        os.close(null)


def end_on_broken_pipe(stream: Any) -> NoReturn:
    """Stop at once, without a traceback: `stream` is pointed at /dev/null so that the flush
    at interpreter exit does not raise again (Python's documented recipe, `signal` module)."""
    with contextlib.suppress(OSError, ValueError):  # a stream with no descriptor (a test's)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    sys.exit(EXIT_BROKEN_PIPE)


class PipeGuard:
    """A standard stream, written in pieces of at most `CHUNK` characters, each flushed.

    Why: one large write into a pipe whose reader has gone (`commbench report RUN -f html |
    head -c 10`) comes back from the kernel as a short write, and CPython's buffered writer
    takes it without raising, so the rest of the output was lost with exit 0. Written in
    pieces, the next piece raises BrokenPipeError, and the command ends here at once, as
    SIGPIPE would end it (exit 141, nothing said) before Typer could turn it into exit 1.
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
            end_on_broken_pipe(self._stream)
        except OSError as exc:
            self._unwritable(exc)
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            end_on_broken_pipe(self._stream)
        except OSError as exc:
            self._unwritable(exc)

    def _unwritable(self, exc: OSError) -> None:
        """A descriptor that takes no writes (EBADF: closed after Python started, or open for
        reading only, as a shell wrapper's script can leave it) is dropped like a closed one."""
        if exc.errno != errno.EBADF:
            raise exc
        with contextlib.suppress(OSError, ValueError):
            _null_at(self._stream.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
