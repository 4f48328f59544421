"""A reader that goes away (`commbench report RUN -f html | head -c 10`) ends the command as
SIGPIPE would: exit 141, nothing on stderr; never exit 0 with the output silently cut short
(one large write into a closed pipe comes back as a short write that CPython does not
raise on), never exit 1 with click's own handler, never a traceback. Real pipes, real
processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).parent / "fixtures" / "runs" / "h100x8-golden"
REPORT = [sys.executable, "-m", "commbench", "report", str(GOLDEN), "--format", "html"]


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root}


def test_a_reader_that_leaves_early_gets_exit_141_and_silence() -> None:
    proc = subprocess.Popen(REPORT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10) == b"<!DOCTYPE "  # the report really started on stdout
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def test_a_reader_gone_before_the_first_write_gets_exit_141() -> None:
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run(
        [sys.executable, "-m", "commbench", "--version"],
        stdout=write,
        stderr=subprocess.PIPE,
        env=_env(),
        timeout=120,
    )
    os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == b""


def test_a_reader_that_reads_everything_gets_all_of_it() -> None:
    """The guard writes in pieces; every piece arrives, in order, and the exit is 0."""
    proc = subprocess.run(REPORT, capture_output=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    assert len(text) > 4 * (1 << 15)  # more than several pieces
    assert text.startswith("<!DOCTYPE") and text.rstrip().endswith("</html>")
