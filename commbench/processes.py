"""Who a process is beyond its pid (Linux /proc): whether it runs, and whether it is still the
process that wrote a record.

Low in the house on purpose: the run record (`results`) stamps its writer with `ProcessId`
and its readers ask `ProcessId.running()`; the launcher (`launch.procs`) uses `state` and
`alive` to stop what a run started.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


def state(pid: int) -> str | None:
    """The process state letter (R, S, T = stopped, Z = zombie, ...) or None if gone.
    Read with plain system calls: the launcher asks for each of its workers on every 0.1 s
    poll, and a pathlib text read costs it five times as much."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)  # pid, (comm: at most 64 bytes), state, ...: the start
    except OSError:
        return None
    finally:
        os.close(fd)
    end = stat.rfind(b")")
    if end < 0 or len(stat) < end + 3:
        return None
    return chr(stat[end + 2])


def alive(pid: int) -> bool:
    s = state(pid)
    return s is not None and s != "Z"


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/<pid>/stat field 22), or None if
    it is gone: with the pid, it tells a process from a later one that reused its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rfind(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessId:
    """What names a process beyond its pid: host, boot and start time. Recorded by whoever
    writes a record saying "running", so a reader can tell whether that writer still is."""

    pid: int
    host: str | None = None
    boot_id: str | None = None
    start_ticks: int | None = None

    @classmethod
    def of(cls, pid: int | None = None) -> ProcessId:
        """This process (or `pid`) as it is now."""
        pid = os.getpid() if pid is None else pid
        return cls(
            pid=pid, host=socket.gethostname(), boot_id=boot_id(), start_ticks=start_ticks(pid)
        )

    def running(self) -> bool | None:
        """Whether this process still runs: None when this host cannot tell (another host, or
        a record without the fields)."""
        if self.host != socket.gethostname() or not self.boot_id:
            return None
        if self.boot_id != boot_id():
            return False  # the machine rebooted since
        started = start_ticks(self.pid)
        return started is not None and started == self.start_ticks and alive(self.pid)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # the fields, in their order: the record's keys


RUN_MARKER = "COMMBENCH_RUN_DIR"
"""The environment variable that marks every process of a run with its run directory: how a
process is known to be the run's, and not a later one that reused its pid."""


def environ(pid: int) -> dict[str, str] | None:
    """The environment `pid` was started with, or None if it is gone or not ours to read."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}
