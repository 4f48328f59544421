"""Every command with its stdout or stderr closed by the shell (`>&-`, `2>&-`, both), or with a
reader that leaves before the first write: the command's own exit status and output on the
other stream, never "Exception ignored in ..." and exit 120 (issue 33, D2). A stream that
cannot be written is dropped; a reader that goes away ends the command with exit 141, as
SIGPIPE would (docs/conventions.md). Real processes, real shells, real pipes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
COMMBENCH = [sys.executable, "-m", "commbench"]
EXIT_BROKEN_PIPE = 141

# A recorded job that fails when it finds its stdout or stderr closed: commbench puts /dev/null
# in place of a closed stream, and the processes it starts inherit it.
JOB = "import os; os.fstat(1); os.fstat(2)"

COMMANDS = {
    "version": ["--version"],
    "help": ["--help"],
    "model": ["model", "--bw", "100", "--latency", "5", "--world", "8", "--sizes", "1M,1G"],
    "replay-dry-run": ["replay", str(FIXTURES / "traces" / "flight_recorder"), "--dry-run"],
    "export": ["export", str(FIXTURES / "runs" / "h100x8-golden")],
    "record": ["record", "-o", "trace", "--", sys.executable, "-c", JOB],
    "unknown-option": ["collectives", "--no-such-flag"],
    "bad-value": ["model", "--bw", "fast"],
    "missing-file": ["export", "no-such-run"],
}

SHELL_CLOSES = {
    "stdout": ">&-",
    "stderr": "2>&-",
    "both": ">&- 2>&-",
    # open, but for reading only: every write fails with EBADF, as on a closed descriptor
    # (a wrapper script can leave stderr so: pyenv's shim, started with stderr closed)
    "stdout-read-only": "1</dev/null",
    "stderr-read-only": "2</dev/null",
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _run(args: list[str], cwd: Path, **streams: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        args, cwd=cwd, env=_env(), timeout=120, stdin=subprocess.DEVNULL, **streams
    )  # type: ignore[call-overload]


def _closed_by_the_shell(
    args: list[str], closes: str, cwd: Path
) -> subprocess.CompletedProcess[bytes]:
    """`args` run by sh with the given streams closed (`exec "$@" >&-`); what is left open
    is captured."""
    script = f'exec "$@" {SHELL_CLOSES[closes]}'
    return _run(["/bin/sh", "-c", script, "sh", *args], cwd, capture_output=True)


def _reader_gone(args: list[str], stream: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """`stream` is a pipe whose reader has already gone; the other one is captured."""
    read, write = os.pipe()
    os.close(read)
    try:
        other = "stderr" if stream == "stdout" else "stdout"
        return _run(args, cwd, **{stream: write, other: subprocess.PIPE})
    finally:
        os.close(write)


def _clean(err: bytes) -> None:
    text = err.decode()
    assert "Traceback" not in text and "Exception ignored" not in text, text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_closed_or_abandoned_stream_keeps_the_commands_own_exit_status(
    name: str, tmp_path: Path
) -> None:
    args = [*COMMBENCH, *COMMANDS[name]]
    ref_dir = tmp_path / "reference"
    ref_dir.mkdir()
    reference = _run(args, ref_dir, capture_output=True)
    _clean(reference.stderr)
    assert reference.returncode in (0, 2)  # these commands succeed, or refuse bad input
    assert reference.stdout or reference.stderr  # each writes something to be lost

    for closes in SHELL_CLOSES:
        cwd = tmp_path / closes
        cwd.mkdir()
        proc = _closed_by_the_shell(args, closes, cwd)
        assert proc.returncode == reference.returncode, (closes, proc.stderr)
        if closes.startswith("stdout"):
            _clean(proc.stderr)
            if name != "record":  # record's line names its own trace directory
                assert proc.stderr == reference.stderr
        elif closes.startswith("stderr"):
            assert proc.stdout == reference.stdout

    for stream in ("stdout", "stderr"):
        cwd = tmp_path / f"{stream}-reader-gone"
        cwd.mkdir()
        proc = _reader_gone(args, stream, cwd)
        wrote = getattr(reference, stream)
        expected = EXIT_BROKEN_PIPE if wrote else reference.returncode
        left = proc.stderr if stream == "stdout" else proc.stdout
        assert proc.returncode == expected, (stream, left)
        if stream == "stdout":
            _clean(proc.stderr)
