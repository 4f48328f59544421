"""Watching a running sweep: the launcher's poll state, and the diagnosis of a hang or a
crash from the heartbeats, /proc and torchrun's failure summary.

The root cause comes first in every message: a stopped, dead or silent rank before the
ranks that only lost their peers.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from commbench.collectives.settings import Point
from commbench.errors import CommbenchError, UserError
from commbench.launch import procs
from commbench.launch.plane import ControlPlane
from commbench.launch.protocol import (
    EVENTS_FILE,
    HEARTBEAT_INTERVAL,
    STARTUP_TIMEOUT,
    FleetSummary,
    HealthGathered,
    HeartbeatReader,
    JournalReader,
    ProtocolError,
    RankBeat,
    RankState,
    Sighting,
    Skips,
)
from commbench.launch.ranks import COMPACT_KEY, context_ranks
from commbench.results.journal import RowEvent, event_type
from commbench.results.ranks import RankEntry
from commbench.results.schema import ResultRow
from commbench.results.store import write_results
from commbench.sizes import format_size

# A heartbeat older than this means the process is not running (stopped or gone); the
# heartbeat thread writes every HEARTBEAT_INTERVAL, so this leaves room for a loaded machine.
STALE_AFTER = max(5.0, 10 * HEARTBEAT_INTERVAL)
STALL_AFTER = 2 * HEARTBEAT_INTERVAL
"""Seconds without progress of this node's ranks after which the launcher asks the cross-node
watch who stalled: two heartbeats, so an unchanged file between two of them is no stall."""


def _silent_after(timeout: float) -> float:
    """Seconds without a heartbeat that make a rank silent: the hang and the crash
    diagnosis must agree on it."""
    return min(STALE_AFTER, timeout / 2)


def _killed_by(signum: int) -> str:
    try:
        return f"killed by {signal.Signals(signum).name}"
    except ValueError:
        return f"killed by signal {signum}"


class RunDirGone(CommbenchError):
    """The run directory was deleted, moved or replaced under a running launch: nothing the
    run measures from now on can be kept, and nothing must be written into a stranger's
    directory of the same name."""


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


@dataclass(frozen=True, slots=True, kw_only=True)
class Seen(RankBeat):
    """One rank as this node's watchdog knows it: its heartbeat (the record's fields, derived
    rather than restated) from its file (this node's ranks), or from the fleet summary
    (`remote`: another node's, with its `state` as that node's launcher saw it). The hang and
    crash diagnoses read both the same way."""

    mtime: float
    """When the rank last showed life, by this node's clock."""
    state: str | None = None
    """Another node's rank: its state as its own node's launcher saw it (`RANK_STATES`, or
    `behind`, `node-silent`); None for this node's. (`time`, when it last beat by its own
    clock, is known for this node's ranks only: 0 for another node's.)"""

    @property
    def remote(self) -> bool:
        return self.state is not None

    @property
    def position(self) -> tuple[int, int]:
        return (self.point, self.iteration)

    @classmethod
    def local(cls, seen: Sighting) -> Seen:
        """This node's rank, from its heartbeat file."""
        return cls(**_beat_fields(seen.beat), mtime=seen.mtime)


def _roll_of(context: Mapping[str, Any]) -> tuple[RankEntry, ...]:
    """The ranks of the writer's roll (the journaled context's `ranks`), typed."""
    match context:
        case {"ranks": list(ranks)}:
            return tuple(RankEntry.read(r) for r in ranks if isinstance(r, Mapping))
    return ()


class Watch:
    """The state the poll loop keeps between iterations."""

    def __init__(
        self,
        run_dir: Path,
        points: list[Point],
        on_event: Callable[[dict[str, Any]], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        beats: Callable[[], dict[int, Sighting]] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.on_event = on_event
        """Gets the journal's events of other types than the sweep's own (a run kind's)."""
        self.clock = clock
        """Seconds for stalls and progress (monotonic; benchmarks/control_plane.py gives a
        simulated one, and this node's heartbeats in memory: `beats`)."""
        self.wall = wall
        """The time of day the heartbeats' mtimes are on."""
        self.skips = Skips()
        self._beats = beats or HeartbeatReader(run_dir, self.skips).read
        self._dir_identity = _identity(run_dir)
        self.agent_pid: int | None = None
        """torchrun's own pid: a stopped agent is not a stopped rank (its workers go on)."""
        self.stopped_since: dict[int, float] = {}
        """Local processes of the run seen stopped (SIGSTOP, a debugger), and since when."""
        self._ranks_by_pid: dict[int, int] = {}
        self.points = points
        self.reader = JournalReader(run_dir / EVENTS_FILE)
        self.rows: list[ResultRow] = []
        self.worker_context: dict[str, Any] = {}
        """What rank 0 journaled of the workers (versions, world, every rank), as written:
        the launcher reads it into the run's context; empty on a node that does not run
        rank 0."""
        self._roll: tuple[dict[str, Any], tuple[RankEntry, ...]] = (self.worker_context, ())
        self.node_health: dict[str, Any] = {"node": None, "nodes": {}}
        """The other nodes' link health of a multi-node run, as the workers journal it:
        this node's own `node` and, per other node, its host and `before`/`after` snapshot."""
        self.done = False
        self.failed_checks: list[int] = []
        self.pids: set[int] = set()
        self.last_signature: Any = None
        self.last_progress = clock()
        self.heartbeats: dict[int, Seen] = {}
        """This node's ranks by their heartbeat files, and (`remote`) the other nodes' ranks
        the fleet summary names: stopped, silent, gone or behind."""
        self._sightings: dict[int, Sighting] | None = None
        self._local: dict[int, Seen] = {}
        self._local_pids: frozenset[int] = frozenset()
        self._local_now: tuple[Any, ...] = ()
        self._shown: tuple[Any, ...] = (None, None, None)
        """What `heartbeats` was last made of: this node's, the fleet summary, the roll."""
        self._hosts: tuple[tuple[RankEntry, ...], dict[int, str]] = ((), {})
        self._local_signature: Any = None
        self._local_changed = clock()
        self.control: ControlPlane | None = None
        """The cross-node watch of a multi-node run (its own thread; read, never waited on)."""

    def run_dir_problem(self) -> str | None:
        """Why the run directory is no longer the one this launch created, if it is not.
        Checked every poll: deleted with its parent or alone, it must stop the run at once
        and the same way (the workers' files vanish with it, so it shows neither as a write
        error nor as progress, only later as a "hang")."""
        try:
            same = _identity(self.run_dir) == self._dir_identity
        except FileNotFoundError:
            same = False
        except OSError as exc:
            return f"the run directory {self.run_dir} cannot be reached: {exc.strerror or exc}"
        return None if same else f"the run directory {self.run_dir} was deleted or replaced"

    def poll(self, on_row: Callable[[ResultRow], None]) -> None:
        """One look at the run: the journal, this node's heartbeats, the fleet summary. What
        did not change since the last poll is not taken apart again (the heartbeats come back
        as the same dict when no file changed): most polls fall between two heartbeats."""
        self.read_journal(on_row)
        sightings = self._beats()
        if sightings is not self._sightings:
            self._sightings = sightings
            self._local = {r: Seen.local(b) for r, b in sightings.items()}
            self._local_pids = frozenset(b.pid for b in self._local.values() if b.pid)
            self.pids |= self._local_pids
            self._local_now = tuple(
                sorted((r, b.point, b.phase, b.iteration, b.ticks) for r, b in self._local.items())
            )
        local, local_signature = self._local, self._local_now
        fleet = None
        if self.control is not None:
            self.control.offer(self._local_pids, self._hosts_by_node())
            if self._stalled(local_signature):
                self.control.want_summary()  # our ranks wait: who on the other nodes stalled?
            fleet = self.control.fleet
        shown = (local, fleet, self.roll)
        if any(a is not b for a, b in zip(shown, self._shown)):
            self.heartbeats = {**remote_beats(fleet, shown[2], self.wall()), **local}
            self._shown = shown
        signature = (len(self.rows), local_signature, fleet.progress if fleet else None)
        if signature != self.last_signature:
            self.last_signature = signature
            self.last_progress = self.clock()
        self._note_stopped()

    def _stalled(self, local_signature: Any) -> bool:
        if local_signature != self._local_signature:
            self._local_signature, self._local_changed = local_signature, self.clock()
            return False
        return self.stalled

    @property
    def stalled(self) -> bool:
        """Whether this node's ranks made no progress for STALL_AFTER (as the last poll saw
        them): a real stall, not the unchanged file that most 0.1 s polls see between two
        heartbeats. A poll that finds them so asks the cross-node watch who stalled."""
        return self.clock() - self._local_changed > STALL_AFTER

    def read_journal(self, on_row: Callable[[ResultRow], None], *, final: bool = False) -> None:
        """Take in what rank 0 journaled since the last read, rewriting the result files
        after each row. `final`: every process that could write is gone, so the journal is
        whole; an unterminated last line that is a whole event counts (`JournalReader`)."""
        problem = self.run_dir_problem()
        if problem:
            raise RunDirGone(problem)
        for event in self.reader.read(final=final):
            kind = event_type(event)
            if kind == "context":
                self.worker_context = self._context(event)
            elif (journaled := RowEvent.read(event)) is not None:
                row = ResultRow.from_dict(journaled.row)
                self.rows.append(row)
                self.failed_checks.extend(journaled.failed_ranks)
                write_results(self.run_dir, self.rows)
                on_row(row)
            elif kind == "done":
                self.done = True
            elif kind == HealthGathered.KIND:
                self._add_health(event)
            elif self.on_event is not None:
                self.on_event(event)

    def _context(self, event: dict[str, Any]) -> dict[str, Any]:
        """Rank 0's context line, its compact rank table read back into the list of ranks
        run.json keeps; a table that does not read is skipped, with a warning."""
        context = {k: v for k, v in event.items() if k != "type"}
        try:
            return context_ranks(context)
        except UserError as exc:
            self.skips.note(ProtocolError("context", "malformed", str(exc)))
            context.pop(COMPACT_KEY, None)
            return context

    def _add_health(self, event: dict[str, Any]) -> None:
        try:
            gathered = HealthGathered.from_doc(event)
        except ProtocolError as exc:
            self.skips.note(exc)
            return
        self.node_health["node"] = gathered.node
        for entry in gathered.nodes:
            node = self.node_health["nodes"].setdefault(
                entry.node, {"node": entry.node, "host": entry.host}
            )
            node[gathered.phase] = entry.snapshot
            if entry.nics is not None:
                node["nics"] = entry.nics

    def refresh_remote(self, wait: float) -> None:
        """Bring the other nodes' view up to date, waiting at most `wait` seconds for a new
        fleet summary: a crash is explained once what the other nodes saw is in."""
        if self.control is None:
            return
        fleet = self.control.refresh(wait)
        local = {r: b for r, b in self.heartbeats.items() if not b.remote}
        self.heartbeats = {**remote_beats(fleet, self.roll, self.wall()), **local}

    @property
    def roll(self) -> tuple[RankEntry, ...]:
        """The ranks of rank 0's roll, typed; read again only when the context changes."""
        if self._roll[0] is not self.worker_context:
            self._roll = (self.worker_context, _roll_of(self.worker_context))
        return self._roll[1]

    def _hosts_by_node(self) -> dict[int, str]:
        """Each node's host from rank 0's roll (the writer's launcher only)."""
        roll = self.roll
        if roll is not self._hosts[0]:
            hosts: dict[int, str] = {}
            for r in roll:
                if r.node is not None:
                    hosts.setdefault(r.node, str(r.host))
            self._hosts = (roll, hosts)
        return self._hosts[1]

    def _note_stopped(self) -> None:
        now = self.clock()
        for pid in self.pids - {self.agent_pid}:
            if procs.state(pid) in ("T", "t"):
                self.stopped_since.setdefault(pid, now)
            else:
                self.stopped_since.pop(pid, None)

    def rank_of(self, pid: int) -> int | None:
        """The global rank a local process runs (its heartbeat, else the RANK torchrun put in
        its environment: a worker stopped while importing torch has no heartbeat yet)."""
        for rank, beat in self.heartbeats.items():
            if not beat.remote and beat.pid == pid:
                return rank
        if pid not in self._ranks_by_pid and pid != self.agent_pid:
            environ = procs.environ(pid) or {}
            value = environ.get("RANK", "")
            if value.isascii() and value.isdigit():
                self._ranks_by_pid[pid] = int(value)
        return self._ranks_by_pid.get(pid)

    def stopped_ranks(self, longer_than: float = 0.0) -> dict[int, int]:
        """rank -> pid of this node's workers stopped for more than `longer_than` seconds."""
        now = self.clock()
        out: dict[int, int] = {}
        for pid, since in sorted(self.stopped_since.items(), key=lambda kv: kv[1]):
            rank = self.rank_of(pid)
            if rank is not None and now - since > longer_than and procs.state(pid) in ("T", "t"):
                out.setdefault(rank, pid)
        return out

    def local_ranks_done(self) -> bool:
        """Whether every one of this node's ranks said it finished cleanly (its heartbeat's
        last phase is "done", written only by a rank that ended without an error)."""
        local = [b for b in self.heartbeats.values() if not b.remote]
        return bool(local) and all(b.phase == "done" for b in local)

    def local_workers_alive(self) -> bool:
        """Whether any of this node's workers is still running (not a zombie)."""
        return any(procs.alive(b.pid or -1) for b in self.heartbeats.values() if not b.remote)

    @property
    def started(self) -> bool:
        """Whether any rank has begun measuring (reached its first point)."""
        return bool(self.rows) or any(b.point >= 0 for b in self.heartbeats.values())

    def allowance(self, timeout: float) -> float:
        """Seconds without progress that mean a hang, now: at least STARTUP_TIMEOUT until
        the first point starts, `timeout` after."""
        return timeout if self.started else max(timeout, STARTUP_TIMEOUT)

    def where(self, beat: Seen) -> str:
        if not 0 <= beat.point < len(self.points):
            return f"phase {beat.phase}"
        p = self.points[beat.point]
        what = p.strategy or p.op
        # no size for what moves no data: a barrier, a phase of its own (a replay's sequence)
        size = (
            ""
            if p.op == "barrier" or not p.requested_bytes
            else f" {format_size(p.requested_bytes)}"
        )
        return f"{what}{size} ({beat.phase}, iteration {beat.iteration})"


REMOTE_SILENT = "stopped responding (no heartbeat through the job's store)"
NODE_SILENT = "stopped responding: its node's launcher stopped reporting through the job's store"
NEVER_REPORTED = "start-up (never reported through the job's store)"


def _remote(r: RankState, mtime: float, state: str | None = None) -> Seen:
    return Seen(**_beat_fields(r), state=state or r.state, mtime=mtime)


_BEAT_NAMES = tuple(f.name for f in fields(RankBeat))
_STATE_NAMES = tuple(name for name in _BEAT_NAMES if name in {f.name for f in fields(RankState)})


def _beat_fields(beat: RankBeat | RankState) -> dict[str, Any]:
    """A heartbeat's fields, from this node's file or another node's summary (which has no
    `time`), for a `Seen`. The names are listed once: a launcher takes apart 8 heartbeats
    each poll, and `dataclasses.fields` on each cost a simulated 16,384-node cluster a
    seventh of its time."""
    names = _BEAT_NAMES if isinstance(beat, RankBeat) else _STATE_NAMES
    return {name: getattr(beat, name) for name in names}


def remote_beats(
    fleet: FleetSummary | None, roll: tuple[RankEntry, ...], now: float
) -> dict[int, Seen]:
    """The other nodes' ranks the fleet summary names, as heartbeat entries (`remote`, with
    their `state` as their own node's launcher saw it and an mtime by this node's clock). A
    node silent as a whole lends its state to every rank it last reported, and one never
    heard from is named by the ranks the writer's roll gives it, where this is the writer."""
    if fleet is None:
        return {}
    out: dict[int, Seen] = {}
    for r in fleet.behind:
        out[r.rank] = _remote(r, now - r.quiet_s, "behind")
    for r in fleet.problems:
        out[r.rank] = _remote(r, now - r.quiet_s)
    for node in fleet.silent_nodes:
        known = list(node.ranks)
        if not known:
            known = [
                RankState(
                    rank=r.rank,
                    node=node.node,
                    host=node.host or r.host,
                    phase=NEVER_REPORTED,
                    state="unknown",
                )
                for r in roll
                if r.node == node.node and r.rank is not None
            ]
        for r in known:
            out[r.rank] = _remote(r, now - node.quiet_s, "node-silent")
            if node.never:
                out[r.rank] = replace(out[r.rank], phase=NEVER_REPORTED)
    return out


_REMOTE_HOW = {
    "stopped": (0, "is stopped (SIGSTOP or a debugger), as its node's launcher sees it"),
    "silent": (1, REMOTE_SILENT),
    "node-silent": (1, NODE_SILENT),
    "error": (2, "failed"),
    "gone": (2, "is gone"),
}


def _silent_remotes(watch: Watch, silent_after: float) -> list[int]:
    """Other nodes' ranks the fleet summary names stopped or silent."""
    return sorted(
        r
        for r, b in watch.heartbeats.items()
        if b.remote and b.state in ("stopped", "silent", "node-silent")
    )


def describe_hang(watch: Watch, timeout: float) -> tuple[str, list[int]]:
    """Name the rank(s) that stopped the run: stopped processes first, then silent ones, then
    ranks that are gone, then ranks behind the others; if every rank waits at the same
    place, say so."""
    now = watch.wall()
    beats = watch.heartbeats
    silent_after = _silent_after(timeout)
    dead: dict[int, tuple[int, str]] = {}
    for r, b in beats.items():
        if b.state is not None:
            if b.state in _REMOTE_HOW:
                level, how = _REMOTE_HOW[b.state]
                if level == 2 and b.error:
                    how += f" ({b.error})"
                dead[r] = (level, how)
            continue
        state = procs.state(b.pid or -1)
        if state in ("T", "t"):
            dead[r] = (0, "is stopped (SIGSTOP or a debugger)")
        elif state in (None, "Z", "X"):
            dead[r] = (2, "is gone" + (f" ({b.error})" if b.error else ""))
        elif now - b.mtime > silent_after:
            dead[r] = (1, "stopped responding")
    # stopped before its first heartbeat (while importing torch, say): known from /proc only
    unbeaten = {r: pid for r, pid in watch.stopped_ranks().items() if r not in beats}
    live = {r: b for r, b in beats.items() if r not in dead}
    behind: dict[int, Seen] = {}
    # a rank behind the others is the suspect only when none stopped, went silent or died:
    # else it is just waiting on that one (its peers reached one more iteration first)
    if live and not dead and not unbeaten:
        furthest = max(b.position for b in beats.values())
        fleet = watch.control.fleet if watch.control is not None else None
        if fleet is not None:  # the other nodes' ranks are counted there, not listed here
            furthest = max(furthest, fleet.furthest)
        behind = {r: b for r, b in live.items() if b.position < furthest}
    parts = []
    culprits = []
    for r, pid in sorted(unbeaten.items()):
        culprits.append(r)
        parts.append(
            f"rank {r} (host {socket.gethostname()}, pid {pid}) is stopped (SIGSTOP or a "
            "debugger) during start-up, "
            "before its first heartbeat"
        )

    # A rank that is gone but beat after another went stopped or silent was alive when the
    # run stalled: its torchrun lost the job's store (hosted by the stalled node) or its
    # peers and stopped it. A consequence, named as one, never a culprit: else a survivor
    # whose launcher noticed the stall a moment after the store's host gave up would blame
    # its own node.
    def last_beat(b: Seen) -> float:  # the rank's own clock where it wrote one
        return float(b.time or b.mtime or now)

    quiet = [last_beat(beats[r]) for r, (level, _) in dead.items() if level < 2]
    first_quiet = min(quiet, default=None)
    for r, (level, how) in sorted(dead.items(), key=lambda kv: (kv[1][0], kv[0])):
        b = beats[r]
        after = first_quiet is not None and level == 2 and last_beat(b) > first_quiet
        if after:
            how += " (a consequence: it beat after the run stalled, then lost its peers or store)"
        else:
            culprits.append(r)
        parts.append(
            f"rank {r} (host {b.host}, pid {b.pid}) {how}: last heartbeat "
            f"{now - b.mtime:.0f} s ago, at {watch.where(b)}"
        )
    for r, b in sorted(behind.items()):
        culprits.append(r)
        parts.append(
            f"rank {r} (host {b.host}, pid {b.pid}) is behind the others at {watch.where(b)}"
        )
    if not parts:
        where = (
            watch.where(next(iter(beats.values()))) if beats else "start-up (no worker reported in)"
        )
        parts.append(f"all ranks are waiting at {where}: a backend or network hang")
    return f"no progress for {timeout:.0f} s; " + "; ".join(parts), culprits


_PEER_LOST = re.compile(r"Connection (reset|closed)|peer|Broken pipe|Timed out waiting", re.I)
_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")
# torchrun's agent logs every worker it terminates itself as it winds the others down
_CLOSING_RE = re.compile(r"Sending process (\d+) closing signal (\w+)")
_TRACE_RE = re.compile(r"^\s*traceback\s*:\s*(.*)$")


@dataclass(slots=True)
class _Failure:
    """What torchrun's failure summary and the rank's heartbeat say of one failed rank."""

    exitcode: int = 1
    """As torchrun's summary gives it (negative: killed by that signal); 1 where it does not."""
    pid: int | None = None
    traceback: str = ""
    error: str = ""
    """The rank's own words, from its heartbeat."""


_CPP_STACK = re.compile(
    r"^\s*(frame #\d+:|Exception raised from |<omitting python frames>|\[[WEIF]\d{4} )"
)
"""A line of libtorch's C++ log or of the stack it prints with an error: never a reason."""


def _last_said(log: str) -> str | None:
    """The last line of torchrun's log that says something, libtorch's C++ stacks and its
    log's own lines left out (a store lost at exit ends the log in `frame #27: _start`)."""
    for line in reversed(log.splitlines()):
        if line.strip() and not _CPP_STACK.match(line):
            return line.strip()[:300]
    return None


def describe_crash(watch: Watch, returncode: int, timeout: float) -> tuple[str, list[int]]:
    """Name the failed ranks from the heartbeats and torchrun's failure summary, the root
    cause first: a rank killed by a signal, else one that raised an error of its own; ranks
    that only lost their peer or got torchrun's SIGTERM come last, marked as consequences.
    When this node's ranks only lost their peers, a rank on another node that had gone
    silent is named first: the other node's watchdog may have stopped it before this one's
    fired."""
    failures: dict[int, _Failure] = {}
    log = watch.run_dir / "launcher.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    closed_by_torchrun = {int(m.group(1)) for m in _CLOSING_RE.finditer(text)}
    current: int | None = None
    for line in text.splitlines():
        if m := _RANK_RE.match(line):
            current = int(m.group(1))
            failures.setdefault(current, _Failure())
        elif current is not None and (m := _EXIT_RE.match(line)):
            failures[current].exitcode = int(m.group(1))
            if m.group(2):
                failures[current].pid = int(m.group(2))
        elif current is not None and (m := _TRACE_RE.match(line)):
            failures[current].traceback = m.group(1).strip()
    for r, seen in watch.heartbeats.items():
        if seen.error:
            failures.setdefault(r, _Failure()).error = seen.error
    if not failures:
        if returncode < 0:
            return f"torchrun (the agent, not a worker) was {_killed_by(-returncode)}", []
        said = _last_said(text) or f"torchrun exited with {returncode}"
        return f"the launcher failed: {said}", []

    def signalled(info: _Failure) -> bool:
        """Killed by a signal torchrun did not send: SIGKILL, or a SIGTERM to a worker whose
        pid torchrun's log does not show it closing (someone else's kill, an OOM killer).
        The agent's SIGTERMs to the survivors are the consequence of that, never a cause."""
        code = info.exitcode
        if code >= 0:
            return False
        if code != -signal.SIGTERM:
            return True
        return info.pid is not None and info.pid not in closed_by_torchrun

    def is_consequence(info: _Failure) -> bool:
        if signalled(info):
            return False
        message = info.error + " " + info.traceback
        return (
            info.exitcode == -signal.SIGTERM or bool(_PEER_LOST.search(message)) or not info.error
        )

    def cause_first(item: tuple[int, _Failure]) -> tuple[int, int]:
        r, info = item
        return (0 if signalled(info) else 2 if is_consequence(info) else 1, r)

    ordered = sorted(failures.items(), key=cause_first)
    parts = []
    culprits = []
    if all(is_consequence(info) for info in failures.values()):
        now = watch.wall()
        for r in _silent_remotes(watch, _silent_after(timeout)):
            b = watch.heartbeats[r]
            culprits.append(r)
            how = _REMOTE_HOW[b.state or ""][1]
            parts.append(
                f"rank {r} (host {b.host}) {how}: last heartbeat "
                f"{now - b.mtime:.0f} s ago, at {watch.where(b)}"
            )
    for r, info in ordered:
        beat = watch.heartbeats.get(r)
        code = info.exitcode
        if code < 0:
            how = _killed_by(-code)
            if code == -signal.SIGTERM and signalled(info):
                how += " (not sent by torchrun)"
        else:
            how = (info.error or info.traceback or f"exited with {code}")[:300]
        if is_consequence(info) and len(ordered) > 1:
            how += " (a consequence: it lost its peer or was stopped by torchrun)"
        host = f"host {beat.host}, " if beat else ""
        at = f" at {watch.where(beat)}" if beat else ""
        parts.append(f"rank {r} ({host}exit {code}) {how}{at}")
    return "worker failure: " + "; ".join(parts), culprits + [r for r, _ in ordered]
