"""A rank's heartbeat thread: where it is in the sweep, in its node's run directory.

The main thread only assigns attributes (`point`, `phase`, `iteration`), which costs
nanoseconds inside the timed loops; a daemon thread rewrites `ranks/rank<N>.json` (a
`RankBeat`) twice a second. A rank that is stopped (SIGSTOP) or dead stops refreshing its
file; a rank stuck in a collective keeps refreshing it with the same position. The launcher
uses both facts to name the culprit, and its control plane (`control`) carries them to the
other nodes: a worker never talks to the store for this, so no timed loop can wait on it.

The thread also watches the launcher (`launcher_pid`): a launcher killed outright (SIGKILL,
OOM) cannot stop its workers, so they stop themselves rather than hold the GPUs and measure
for nobody.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from commbench.launch import procs
from commbench.launch.protocol import HEARTBEAT_INTERVAL, LAUNCHER_GONE_EXIT, RankBeat
from commbench.results.store import RESULTS_CSV, RESULTS_JSON, RUN_FILE, atomic_write, temp_name


@dataclass(eq=False)
class Heartbeat:
    """A rank's position, which the main thread sets and the thread started here writes."""

    path: Path
    rank: int
    host: str
    local_rank: int = 0
    launcher_pid: int | None = None
    node: int = 0
    point: int = field(default=-1, init=False)
    phase: str = field(default="init", init=False)
    iteration: int = field(default=0, init=False)
    ticks: int = field(default=0, init=False)
    """Work done outside iterations (the check's chunks): progress the watchdog can see."""
    error: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        # the thread and stop() write through one temporary file: interleaved, a write that
        # lands after the one recording the cause would erase it
        self._writing = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="commbench-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> RankBeat:
        return RankBeat(
            rank=self.rank,
            local_rank=self.local_rank,
            node=self.node,
            host=self.host,
            pid=os.getpid(),
            point=self.point,
            phase=self.phase[:200],
            iteration=self.iteration,
            ticks=self.ticks,
            error=self.error[:500],
            time=time.time(),
        )

    def _write(self) -> None:
        with self._writing:
            atomic_write(self.path, self.beat().to_json(), durable=False)  # twice a second

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a heartbeat must never kill the worker
                self._write()
            if self.launcher_gone():
                self.error = self._gone_message()
                with contextlib.suppress(Exception):
                    self._write()
                    self._remove_launcher_temps()
                os._exit(LAUNCHER_GONE_EXIT)
            self._stop.wait(HEARTBEAT_INTERVAL)

    def _remove_launcher_temps(self) -> None:
        """A launcher killed in the middle of rewriting the results leaves its temporary
        file in the run directory, and cannot remove it: its workers, the last processes of
        the run, do."""
        if self.launcher_pid is None:
            return
        run_dir = self.path.parent.parent
        for name in (RUN_FILE, RESULTS_JSON, RESULTS_CSV):
            temp_name(run_dir / name, self.launcher_pid).unlink(missing_ok=True)

    def launcher_gone(self) -> bool:
        return self.launcher_pid is not None and not procs.alive(self.launcher_pid)

    def _gone_message(self) -> str:
        return f"its launcher (pid {self.launcher_pid}) is gone"

    def tick(self) -> None:
        self.ticks += 1

    def write_now(self) -> None:
        """Write the beat now, not at the thread's next turn: for a phase a rank may die in
        at once (killed by its backend, no Python left to say where), so that its last beat
        names that phase and not the one before."""
        with contextlib.suppress(Exception):  # a heartbeat must never kill the worker
            self._write()

    def stop(self, error: str = "") -> None:
        """Record the end. A rank whose peer noticed the vanished launcher first dies of a
        reset connection before its own thread looks: the launcher is then still the cause,
        and the one to name, with the error it saw kept behind it."""
        if error and self.launcher_gone():
            error = f"{self._gone_message()} (then: {error})"
        if error:
            self.error = error
        else:
            self.phase = "done"
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(Exception):
            self._write()
