"""What workers and the launcher exchange through the run directory (no torch here).

Workers never print results. Rank 0 appends one JSON line per event to `events.jsonl`
(the run's journal: context, one line per measured point with its samples, done); every
rank rewrites `ranks/rank<N>.json` about twice a second (its heartbeat: where it is in the
sweep). The launcher tails the journal to build the result files and watches heartbeats to
tell a hung rank from a slow one.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from commbench.files import dump_json
from commbench.launch import procs
from commbench.results.store import RESULTS_CSV, RESULTS_JSON, RUN_FILE, atomic_write, temp_name

EVENTS_FILE = "events.jsonl"
RANKS_DIR = "ranks"
LOGS_DIR = "logs"
HEARTBEAT_INTERVAL = 0.5
# Start-up (importing torch, creating the process group, the rendezvous of every node) is
# not progress a worker can report, and on a loaded machine it alone can take tens of
# seconds: a short --timeout meant for a stuck collective must not kill a run still starting.
STARTUP_TIMEOUT = 120.0
# A worker's exit status when it stopped because its launcher died.
LAUNCHER_GONE_EXIT = 3
# The launcher's pid, in each worker's environment.
LAUNCHER_PID_ENV = "COMMBENCH_LAUNCHER_PID"


def heartbeat_path(run_dir: Path, rank: int) -> Path:
    return run_dir / RANKS_DIR / f"rank{rank}.json"


class Journal:
    """Append-only JSON-lines writer. One write() per line, so lines never interleave."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: dict[str, Any]) -> None:
        os.write(self._fd, dump_json(event, indent=None).encode())  # strict: NaN is null

    def close(self) -> None:
        os.close(self._fd)


class JournalReader:
    """Reads complete lines appended since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]


class Heartbeat:
    """A daemon thread that rewrites this rank's heartbeat file.

    The main thread only assigns attributes (`point`, `phase`, `iteration`), which costs
    nanoseconds inside the timed loops. A rank that is stopped (SIGSTOP) or dead stops
    refreshing its file; a rank stuck in a collective keeps refreshing it with the same
    position. The launcher uses both facts to name the culprit.

    The thread also watches the launcher (`launcher_pid`): a launcher killed outright
    (SIGKILL, OOM) cannot stop its workers, so they stop themselves rather than hold the
    GPUs and measure for nobody.
    """

    def __init__(
        self,
        path: Path,
        rank: int,
        host: str,
        local_rank: int = 0,
        launcher_pid: int | None = None,
    ) -> None:
        self.path = path
        self.launcher_pid = launcher_pid
        self.rank = rank
        self.host = host
        self.local_rank = local_rank
        self.point = -1
        self.phase = "init"
        self.iteration = 0
        self.ticks = 0
        """Work done outside iterations (the check's chunks): progress the watchdog can see."""
        self.error = ""
        self.share: Any = None
        """A `StoreShare` once the process group is up: heartbeats then also cross nodes."""
        self._mirrored: dict[int, bytes] = {}
        self._stop = threading.Event()
        # the thread and stop() write through one temporary file: interleaved, a write that
        # lands after the one recording the cause would erase it
        self._writing = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="commbench-heartbeat", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        with self._writing:  # the file only: a store that stalls must not stall the others
            state: dict[str, Any] = {
                "rank": self.rank,
                "local_rank": self.local_rank,
                "host": self.host,
                "pid": os.getpid(),
                "point": self.point,
                "phase": self.phase,
                "iteration": self.iteration,
                "ticks": self.ticks,
                "error": self.error,
                "time": time.time(),
            }
            data = json.dumps(state).encode()
            _replace(self.path, data)
        if self.share is not None:
            self.share.publish(self.rank, data)

    def _mirror(self) -> None:
        """Copy the other nodes' heartbeats into this node's ranks/ directory, rewriting a
        file only when its content changed: its mtime is then when that rank last showed life,
        by this node's clock (remote clocks may be skewed)."""
        fetched = self.share.fetch_remote()
        for rank, value in fetched.items():
            if self._mirrored.get(rank) == value:
                continue
            self._mirrored[rank] = value
            data = json.loads(value)
            data["remote"] = True
            _replace(self.path.parent / f"rank{rank}.json", json.dumps(data).encode())
        for rank in self.share.remote_ranks():
            if rank in fetched or rank in self._mirrored:
                continue
            # never published: a rank stopped or wedged before its first heartbeat reached the
            # store. A placeholder, written once, ages like a silent heartbeat, so a hang can
            # still name it (and its host) instead of "all ranks are waiting".
            self._mirrored[rank] = b""
            placeholder = {
                "rank": rank,
                "host": self.share.hosts.get(rank),
                "pid": None,
                "point": -1,
                "phase": "start-up (never reported through the job's store)",
                "iteration": 0,
                "remote": True,
            }
            _replace(self.path.parent / f"rank{rank}.json", json.dumps(placeholder).encode())

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a heartbeat must never kill the worker
                self._write()
                if self.share is not None and self.share.mirror:
                    self._mirror()
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
        with contextlib.suppress(Exception):  # a store gone with its host must not mask the cause
            self._write()


def _replace(path: Path, data: bytes) -> None:
    atomic_write(path, data, durable=False)  # twice a second: no fsync


class StoreShare:
    """Heartbeats through the job's c10d store (the rendezvous store torchrun runs), so the
    launcher on every node sees every rank, and a stuck rank on another node is named with
    its host, not just as "all my ranks are waiting". Uses its own store client, only ever
    from the heartbeat thread."""

    PREFIX = "commbench/heartbeat/"

    def __init__(
        self,
        store: Any,
        world: int,
        local_ranks: set[int],
        mirror: bool,
        hosts: dict[int, str] | None = None,
    ) -> None:
        self.store = store
        self.world = world
        self.local_ranks = local_ranks
        self.mirror = mirror
        self.hosts = hosts or {}
        """Each rank's host, from the ranks' roll at start-up: names a rank never heard from."""

    def publish(self, rank: int, value: bytes) -> None:
        self.store.set(f"{self.PREFIX}{rank}", value)

    def remote_ranks(self) -> list[int]:
        return [r for r in range(self.world) if r not in self.local_ranks]

    def fetch_remote(self) -> dict[int, bytes]:
        """The heartbeats the other nodes' ranks have published so far. Each key is checked
        on its own (get would block on a missing one): one rank that never published must
        not hide all the others."""
        remote = [r for r in self.remote_ranks() if self.store.check([f"{self.PREFIX}{r}"])]
        if not remote:
            return {}
        keys = [f"{self.PREFIX}{r}" for r in remote]
        return dict(zip(remote, self.store.multi_get(keys), strict=True))


def read_heartbeats(run_dir: Path) -> dict[int, dict[str, Any]]:
    beats: dict[int, dict[str, Any]] = {}
    for path in (run_dir / RANKS_DIR).glob("rank*.json"):
        try:
            data = json.loads(path.read_text())
            data["mtime"] = path.stat().st_mtime
        except (OSError, ValueError):
            continue
        beats[int(data["rank"])] = data
    return beats
