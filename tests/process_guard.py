"""The fast lane's guard (tests/conftest.py): while it holds, starting a process raises.

A module of its own, imported once per interpreter, so that a pytest session run inside
another (tests/test_fast_lane.py's `pytester`) shares the one audit hook and the one stack of
guards: the innermost guard names what started the process."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest


class StartedAProcess(AssertionError):
    pass


PROCESS_EVENTS = frozenset(
    {"os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"}
    | {"pty.spawn", "subprocess.Popen"}
)
"""The audit events (PEP 578) of the os module's ways to start or become a process."""

_guarded: list[str] = []
"""The message of each guard in force, innermost last."""


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _guarded and event in PROCESS_EVENTS:
        raise StartedAProcess(_guarded[-1])


sys.addaudithook(_audit)  # for good (a hook cannot be removed): it acts only while guarded


@contextlib.contextmanager
def refusing_processes(who: str, advice: str) -> Iterator[None]:
    """Make every way of starting a process fail, naming `who` and what to do.

    The os module's own (fork, forkpty, posix_spawn, spawn*, system, exec*) raise audit
    events inside the functions themselves, so the hook refuses them however they were
    reached, through a name bound before the guard (`from os import fork`) too. What starts a
    process without such an event is patched on its class, where every caller looks it up:
    subprocess.Popen, and multiprocessing's Process.start (its spawn and forkserver start
    methods, torch.multiprocessing's included, go straight to `_posixsubprocess`)."""
    message = f"{who} starts a process: {advice}"

    def refuse(*args: object, **kwargs: object) -> None:
        raise StartedAProcess(message)

    import multiprocessing.process
    import subprocess

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
        monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
        _guarded.append(message)
        try:
            yield
        finally:
            _guarded.pop()
