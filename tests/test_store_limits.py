"""The limits a node holds the job's store under, checked at a multi-node run's start
(issue 45): one line each where they cannot hold, with the fix."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commbench.launch.limits import store_fds, store_limits


def test_the_limits_hold_on_one_node_and_where_they_are_high() -> None:
    assert store_limits(1, 8, open_files=16, backlog=1) == []  # no job's store to host
    assert store_limits(64, 512, open_files=1 << 20, backlog=4096) == []


def test_a_low_backlog_is_said_with_its_fix() -> None:
    (line,) = store_limits(64, 512, open_files=1 << 20, backlog=128)
    assert "net.core.somaxconn = 128" in line and line.endswith("sysctl -w net.core.somaxconn=576")


def _limits_under(soft: int, nnodes: int, ranks: int) -> list[str]:
    """`store_limits` in a process whose open-file limit was lowered to `soft`: what a
    launcher started under `ulimit -n soft` says."""
    code = (
        "import resource\n"
        "_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, hard))\n"
        "from commbench.launch.limits import store_limits\n"
        f"print('\\n'.join(store_limits({nnodes}, {ranks}, backlog=1 << 20)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [line for line in out.splitlines() if line]


@pytest.mark.integration  # a process of its own, whose limit is lowered
def test_a_low_open_file_limit_is_said_in_one_line_with_its_fix() -> None:
    need = store_fds(16, 128)
    (line,) = _limits_under(need - 1, 16, 128)
    assert f"open-file limit here ({need - 1})" in line and line.endswith(f"ulimit -n {need}")
    assert _limits_under(need, 16, 128) == []
