"""A CPU quota on the processes a test starts, and on nothing else: a slow machine, for real.

Busy loops beside a run barely slow it (the scheduler favours a woken rank), and they slow
everything else the machine runs too. A cgroup's CFS quota throttles only its members:

    with CpuQuota() as group:
        proc = subprocess.Popen(group.argv(cmd))   # joins the group before it execs cmd
        ...                                        # unthrottled until
        group.limit(0.1)                           # a tenth of one CPU, in 10 ms periods

cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us`), as root: `unavailable()` says why not, for
`pytest.mark.skipif`. The group's name is unique to the test run; `__exit__` kills what is
still in it (only what `argv` started can be) and removes it, whatever happened before.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
import uuid
from pathlib import Path
from types import TracebackType

ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu"))
"""Where a CPU controller is mounted: cgroup v2's unified tree, or v1's cpu hierarchy."""
PERIOD_US = 10_000
"""Short periods spread the throttling over every iteration instead of one long stall a
100 ms period, a few of them lucky."""


def _root() -> Path | None:
    v2 = ROOTS[0] / "cgroup.subtree_control"
    if v2.exists() and "cpu" in v2.read_text().split():
        return ROOTS[0]
    if (ROOTS[1] / "cpu.cfs_quota_us").exists():
        return ROOTS[1]
    return None


def unavailable() -> str | None:
    """Why a CPU quota cannot be set here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (a cgroup of its own)"
    if _root() is None:
        return "needs a cgroup CPU controller (cgroup v2 with cpu enabled, or v1's cpu)"
    return None


class CpuQuota:
    """A cgroup of its own, unthrottled until `limit`."""

    def __init__(self) -> None:
        root = _root()
        if root is None:
            raise RuntimeError(unavailable() or "no cgroup CPU controller")
        self.v2 = root == ROOTS[0]
        self.path = root / f"commbench-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> CpuQuota:
        self.path.mkdir()
        return self

    def argv(self, cmd: list[str]) -> list[str]:
        """`cmd` joining this group first: every process it starts is a member too."""
        procs = shlex.quote(str(self.path / "cgroup.procs"))
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *cmd]

    def limit(self, fraction: float) -> None:
        """Give the members `fraction` of one CPU, together, from now on."""
        quota = max(1000, int(fraction * PERIOD_US))  # the kernel's floor: 1 ms
        if self.v2:
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def members(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        return []

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for _ in range(100):  # 10 s at most; every member is one of ours
            members = self.members()
            if not members:
                break
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        with contextlib.suppress(FileNotFoundError):
            self.path.rmdir()
