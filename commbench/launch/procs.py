"""Finding and stopping the processes a run started (Linux /proc; no psutil needed).

torchrun starts each worker in a new session, so killing torchrun's process group does not
reach them: the launcher tracks every descendant it has seen and stops them by pid, and at
the end also every process that carries the run's marker in its environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from commbench.errors import note_stop_signal
from commbench.processes import alive as alive  # re-exported: the launcher's view
from commbench.processes import environ as environ
from commbench.processes import state as state


def _each_process(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, the bytes of /proc/<pid>/<name>) for every process that is still there."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / name).read_bytes()
            except OSError:
                continue  # gone since the listing, or not ours to read


def _ppid_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for pid, raw in _each_process("stat"):
        stat = raw.decode(errors="replace")
        # the command name may contain spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[pid] = int(fields[1])
    return parents


def descendants(pid: int) -> set[int]:
    """All live descendants of `pid`."""
    parents = _ppid_map()
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def marked(name: str, value: str) -> set[int]:
    """Live processes whose environment holds `name=value`.

    Workers carry their run directory in their environment: this finds those that outlived
    torchrun (re-parented to init, so no longer its descendants), e.g. when it was stopped
    while still spawning them.
    """
    needle = f"{name}={value}".encode()
    return {
        pid
        for pid, environ in _each_process("environ")
        if needle in environ.split(b"\0") and alive(pid)
    }


def signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# Seconds a SIGKILLed process may take to be gone (one in uninterruptible sleep, on a slow
# file system, can take a while; beyond this it is left as it is).
KILL_WAIT = 10.0


def stop_all(pids: set[int], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace`, and return once each is gone (or after KILL_WAIT
    more): a process that is still dying may still be writing, and whoever reads its files
    next must see everything it wrote. A stopped process (SIGSTOP, a debugger) is killed
    outright: resumed to act on SIGTERM, it would run on for a moment (finish a collective,
    publish a fresh heartbeat to the other nodes) and blur which rank stopped the run."""
    stopped = {p for p in pids if state(p) in ("T", "t")}
    signal_all(stopped, signal.SIGKILL)
    signal_all(pids - stopped, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    signal_all({p for p in pids if alive(p)}, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.01)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_handled(signals: tuple[signal.Signals, ...], handler: Any) -> Iterator[None]:
    """`handler` for `signals` inside the block, the previous handlers after it. Off the main
    thread (where Python cannot set handlers) the block runs with the handlers as they are."""
    previous = {}
    try:
        # inside the try: a pending signal runs its old handler as a new one is set, and a
        # KeyboardInterrupt then must still put back the ones already replaced
        for sig in signals:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue  # nohup's SIGHUP, a background job's SIGINT: ignored on purpose
            previous[sig] = signal.signal(sig, handler)
    except ValueError:
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class StopSignals:
    """Ctrl-C, SIGTERM and SIGHUP over a whole launch, through one handler that is never
    swapped, so no signal falls in a gap between two.

    The first raises KeyboardInterrupt (a CI job's timeout or a closed terminal is taken like
    Ctrl-C: the launcher stops every worker and keeps what was measured, and the command exits
    with that signal's code, `errors.interrupted_exit_code`); inside `deferred()`
    it is raised at the block's end instead (reading the journal must not consume a row and
    drop it). From then on, and after `hold()`, signals only land in `held`: the launcher is
    stopping the workers and writing down what happened, and a second Ctrl-C must not leave
    run.json saying "running". They are not dropped: a suite still stops after a run that was
    finishing when its job was cancelled.
    """

    def __init__(self) -> None:
        self.held: list[int] = []
        self._mode = "raise"  # or "defer", "hold"

    def installed(self) -> contextlib.AbstractContextManager[None]:
        return _signals_handled(STOP_SIGNALS, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        note_stop_signal(signum)  # the command's exit code: 143 for SIGTERM, 130 for Ctrl-C
        if self._mode == "raise":
            self._mode = "hold"
            raise KeyboardInterrupt(signal.Signals(signum).name)
        self.held.append(signum)

    def hold(self) -> None:
        self._mode = "hold"

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        if self._mode != "raise":
            yield
            return
        self._mode = "defer"
        try:
            yield
        finally:
            if self._mode == "defer":
                self._mode = "raise"
        if self.held:
            self._mode = "hold"
            raise KeyboardInterrupt(signal.Signals(self.held.pop(0)).name)


def _interrupt(signum: int, frame: object) -> None:
    note_stop_signal(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


_TERMINATION = (signal.SIGTERM, signal.SIGHUP)


def termination_as_interrupt() -> contextlib.AbstractContextManager[None]:
    """Treat SIGTERM and SIGHUP like Ctrl-C while workers run (a CI job's timeout, a closed
    terminal): the launcher then stops every worker and keeps what was measured, instead of
    dying and leaving them running."""
    return _signals_handled(_TERMINATION, _interrupt)


def interrupt_on_termination() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, like Ctrl-C, from now until the process
    ends. The command line calls this first, so a command is covered from its start to its
    exit, not only while workers run: a signal while the backend is probed or plots are drawn
    stops the probe's child and the command the way Ctrl-C does (one line; exit 143 for
    SIGTERM, 129 for SIGHUP, as `errors.interrupted_exit_code` says) instead
    of killing the launcher outright and leaving its child behind. `StopSignals` refines it
    while a launch runs and gives it back after. Ctrl-C too goes through here rather than
    Python's own handler, which raises the same KeyboardInterrupt but leaves no note of it."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(sig, _interrupt)


def wait_or_kill(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for `proc`; SIGKILL it if it does not exit in time."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
