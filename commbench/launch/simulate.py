"""Simulated nodes running the launcher's real watch loop, on a simulated clock.

A cluster of thousands of nodes is not at hand, and thousands of launchers cannot run in real
time on one small machine. So each simulated node has what a launcher has, and runs it at the
times the launcher would: a `Watch` polled every POLL (0.1 s), a `ControlPlane` stepped when
its own `next_step` says (the one decision its thread follows too), and its own connection
to the job's store (a real `TCPStore`; every request is a real one). What is simulated:

- the clock (`Cluster.now`): the nodes' events run in time order, as fast as they go;
- the ranks: each node's heartbeats, rewritten every HEARTBEAT_INTERVAL (a node's ranks at
  one phase of their own), are kept in memory rather than in files (as a `HeartbeatReader`
  gives them: a new dict when one changed);
- the node's view of the job (`JobView`), given rather than read from its workers' environment.

A cluster may be simulated in parts (`nodes`: the ones this process runs), each in its own
process, advanced together (benchmarks/control_plane.py). The pids the heartbeats carry are
real processes the caller started (`pid`, and `pids` for one it stops with SIGSTOP), so the
watch reads their state from /proc as it does in a run; not this process, whose /proc stat
sums its thousands of threads (70 us a read).
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.launch.aggregation import plan_interval
from commbench.launch.plane import ControlPlane, JobView
from commbench.launch.protocol import HEARTBEAT_INTERVAL, RankBeat, Sighting
from commbench.launch.store_link import StoreLink
from commbench.launch.watchdog import Watch, describe_hang

POLL = 0.1
"""The launcher's poll period (launch.launcher.POLL, not imported: the launcher pulls in the
whole run machinery)."""
SLOTS = 100
"""The phases a launcher's polls may take within POLL (each node's at random): the nodes of
one phase are polled by one event."""
EPOCH = 1.8e9
"""The simulated time of day at `now` = 0."""
QUICK_DNS = {"RES_OPTIONS": "timeout:1 attempts:1"}
"""The environment for a process that opens thousands of c10d connections: c10d names each
peer by a reverse DNS lookup (getnameinfo; ::ffff:127.0.0.1 is in no hosts file), and where
the resolver drops a query (one in ~25 here) each costs its 5 s timeout; failed once within
1 s, c10d stops looking up names for the rest of the process."""


def host_of(node: int) -> str:
    return f"node{node:05d}.cluster.example"


@dataclass(slots=True)
class Node:
    """One simulated node: its launcher's watch and control plane, its ranks' heartbeats."""

    node: int
    host: str
    watch: Watch
    plane: ControlPlane
    client: Any
    """Its connection to the store."""
    beats: dict[int, Sighting] = field(default_factory=dict)
    ranks: tuple[RankBeat, ...] = ()
    """Its ranks' last heartbeats (rewritten unchanged while they make no progress)."""
    iteration: int = 0
    started: float = 0.0
    """When its launcher started."""
    step_at: float = float("inf")
    """When its control plane's next step is scheduled."""
    polled: tuple[Any, Any] = (None, None)
    """The heartbeats and the fleet summary its watch's last poll saw."""
    dirty: bool = True
    """Something its watch reads changed otherwise (a process's state in /proc)."""


class Cluster:
    """`nnodes` simulated nodes of `ranks` ranks each (or those of them in `nodes`), watching
    themselves through the store `connect` opens a connection to (one per node, opened here,
    before the clock starts). Node 0 runs global rank 0: the writer, which aggregates. Each
    node's launcher starts at a random time within the first interval (the same for a node
    whichever part of the cluster runs it)."""

    def __init__(
        self,
        nnodes: int,
        connect: Callable[[], Any],
        run_dir: Path,
        *,
        pid: int,
        nodes: range | None = None,
        ranks: int = 8,
        pids: Mapping[int, int] | None = None,
        seed: int = 0,
        every_poll: bool = False,
    ) -> None:
        self.now = 0.0
        self.nnodes = nnodes
        self.ranks = ranks
        self.pid = pid
        """The process every rank's heartbeat names (a live one)."""
        self.pids = dict(pids or {})
        """The pid of a rank whose process is another (one the caller stops)."""
        self._connect = connect
        self.every_poll = every_poll
        """Poll every watch every POLL; otherwise a poll that would find nothing new and ask
        for nothing is left out (`_news`): the same events, for a fifth of the polls."""
        self.polls = 0
        self._events: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = 0
        self._progressing = True
        self._stopped: set[int] = set()
        self._named_for: int | None = None
        self.named: dict[int, float] = {}
        """Node -> when its watch first named the rank `watch_for` was given."""
        self.step_cpu: dict[int, list[float]] = {}
        """CPU seconds of each step of the nodes `time_steps` names, outside its requests."""
        self.interval = plan_interval(nnodes)
        rng = random.Random(seed)
        phases = [(rng.random(), rng.random(), rng.random()) for _ in range(nnodes)]
        run_dir.mkdir(parents=True, exist_ok=True)
        self.nodes = [self._node(n, run_dir) for n in nodes or range(nnodes)]
        slots: list[list[Node]] = [[] for _ in range(SLOTS)]
        for node in self.nodes:  # its launcher starts: a first step, then polls
            start, beat, poll = phases[node.node]
            node.started = start * self.interval
            self._beat_now(node)
            self.at(node.started + beat * HEARTBEAT_INTERVAL, self._beat, node)
            node.step_at = node.started
            self.at(node.started, self._step, node)
            slots[int(poll * SLOTS)].append(node)
        for slot, polled in enumerate(slots):
            if polled:
                self.at(slot * POLL / SLOTS, self._poll, polled)

    def _node(self, n: int, run_dir: Path) -> Node:
        view = JobView(host="sim", port=0, node=n, nnodes=self.nnodes, writer=n == 0)
        client = self._connect()
        holder: list[Node] = []
        plane = ControlPlane(
            run_dir,
            factory=lambda host, port: lambda: client,
            hostname=host_of(n),
            clock=self.clock,
            wall=self.wall,
            find_view=lambda pids: view,
            beats=lambda: holder[0].beats,
        )
        watch = Watch(run_dir, [], clock=self.clock, wall=self.wall, beats=lambda: holder[0].beats)
        watch.control = plane
        holder.append(Node(node=n, host=host_of(n), watch=watch, plane=plane, client=client))
        return holder[0]

    # -- the clock
    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        return EPOCH + self.now

    def at(self, when: float, action: Callable[[Any], None], arg: Any = None) -> None:
        """Run `action(arg)` at `when` (simulated seconds)."""
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, action, arg))

    def run_until(self, until: float) -> None:
        """Run every event before `until`, in time order; then the clock reads `until`."""
        events = self._events
        while events and events[0][0] < until:
            when, _, action, arg = heapq.heappop(events)
            self.now = max(self.now, when)
            action(arg)
        self.now = max(self.now, until)

    # -- the ranks
    def stall(self) -> None:
        """Every rank stops making progress (a collective waits on a peer, or a failed
        round's roll call): their heartbeats go on, at the same place."""
        self._progressing = False

    def stop_rank(self, rank: int) -> None:
        """`rank`'s process is stopped (the caller sent SIGSTOP to its pid, `pids`): its
        heartbeat is no longer rewritten, and every other rank waits for it."""
        self._stopped.add(rank)
        for node in self.nodes:
            if node.node == rank // self.ranks:
                node.dirty = True  # its launcher reads the state in /proc
        self.stall()

    def _beat_now(self, node: Node) -> None:
        mtime = self.wall()
        if self._progressing or not node.ranks:
            node.iteration += 1
            node.ranks = tuple(
                RankBeat(
                    rank=node.node * self.ranks + local,
                    local_rank=local,
                    node=node.node,
                    host=node.host,
                    pid=self.pids.get(node.node * self.ranks + local, self.pid),
                    point=0,
                    phase="timed",
                    iteration=node.iteration,
                    time=mtime,  # kept while they stall: only their files' mtimes move on
                )
                for local in range(self.ranks)
            )
        beats = dict(node.beats)  # a new dict: what a HeartbeatReader gives when a file changed
        for beat in node.ranks:
            if beat.rank not in self._stopped or beat.rank not in beats:
                beats[beat.rank] = Sighting(beat, mtime)
        node.beats = beats

    def _beat(self, node: Node) -> None:
        self._beat_now(node)
        self.at(self.now + HEARTBEAT_INTERVAL, self._beat, node)

    # -- the launcher
    def _poll(self, nodes: list[Node]) -> None:
        """The polls of the nodes whose launchers poll at this phase."""
        now = self.now
        for node in nodes:
            if node.started <= now and (self.every_poll or self._news(node)):
                self._poll_now(node)
        self.at(now + POLL, self._poll, nodes)

    def _news(self, node: Node) -> bool:
        """Whether this poll can change anything: the watch reads new heartbeats, a new
        fleet summary or a process's new state, or (its own `stalled`) it asks for the
        summary where no want is pending. Otherwise the launcher's poll would only find
        what the last one found (the simulated nodes journal nothing)."""
        seen_beats, seen_fleet = node.polled
        if node.dirty or seen_beats is not node.beats or seen_fleet is not node.plane.fleet:
            return True
        return node.watch.stalled and not node.plane.wanted

    def _poll_now(self, node: Node) -> None:
        self.polls += 1
        node.dirty = False
        node.polled = (node.beats, node.plane.fleet)
        node.watch.poll(_no_row)
        at = max(self.now, node.plane.next_step(self.now))
        if at < node.step_at and not node.plane.stopped:  # a want brought the step forward
            node.step_at = at
            self.at(at, self._step, node)
        if self._named_for is not None and node.node not in self.named:
            self._check_named(node)

    def _step(self, node: Node) -> None:
        if self.now != node.step_at or node.plane.stopped:
            return  # moved forward by a want since
        timed = self.step_cpu.get(node.node)
        began = time.thread_time()  # this thread's: the requests run on the link's courier
        node.plane.turn()
        if timed is not None:
            timed.append(time.thread_time() - began)
        node.step_at = node.plane.next_step(self.now)
        self.at(node.step_at, self._step, node)

    def time_steps(self, node: int) -> None:
        """Keep the CPU time of `node`'s steps in this process (its aggregation, its
        decoding: what its launcher spends beside the store's time)."""
        self.step_cpu[node] = []

    # -- what the nodes know
    def watch_for(self, rank: int) -> None:
        """From now on, note when each node's watch names `rank` as the cause of the stall
        (`describe_hang`, the launcher's own account)."""
        self._named_for = rank
        self.named = {}

    def _check_named(self, node: Node) -> None:
        rank = self._named_for
        assert rank is not None
        if rank not in node.watch.heartbeats:
            return
        _, culprits = describe_hang(node.watch, 60.0)
        if rank in culprits:
            self.named[node.node] = self.now

    def account(self, node: int) -> str:
        """How `node`'s launcher now accounts for the stall, in its own words."""
        (found,) = (n for n in self.nodes if n.node == node)
        return describe_hang(found.watch, 60.0)[0]

    # -- what it cost
    def links(self) -> list[StoreLink]:
        return [n.plane.link for n in self.nodes if n.plane.link is not None]

    def close(self) -> None:
        """Every node's connection and courier thread let go."""
        for node in self.nodes:
            node.plane.close()
            node.client = None
        self._events.clear()


def _no_row(row: Any) -> None:
    raise AssertionError("a simulated node journals no rows")
