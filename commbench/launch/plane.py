"""The cross-node watch of a multi-node run, through the job's c10d store, in O(nodes).

The store is the job's own: torchrun's agents and the process groups are set up through it,
so commbench's traffic there must stay a small share of what it serves however large the
cluster. The shape (docs/scale.md has the formulas and the measurements):

This module is the node's side (`ControlPlane`, a thread of the launcher); its parts are
`store_link` (every request, timed), `digest` (the node's own), `aggregation` (the
aggregators and the cost model) and `roll_call`.

- each node's **launcher** (never a worker: no timed loop ever waits on the store) reads its
  own ranks' heartbeat files and /proc, and publishes its `NodeDigest` when a rank changed
  state, else every `keepalive_intervals` intervals: one request per node;
- one **aggregator**, the launcher of the node that runs global rank 0 (the run's writer),
  reads every digest (`multi_get`, DIGESTS_PER_READ at a time) once per interval and
  publishes one small `FleetSummary`: who is stopped, silent, gone or behind, where, since
  when. Past ONE_TIER_NODES the launcher of the first node of each GROUP_NODES reads its
  group's digests and publishes a `GroupSummary`, and the writer's merges those;
- every other launcher reads that summary only when it needs it: when its own ranks stopped
  making progress, or to explain a crash;
- the interval grows with the cluster (`plan_interval`) so that the steady load stays within
  STEADY_BUDGET requests per second.

Every store call is timed. One that fails or takes over SLOW_CALL seconds puts the watch in a
degraded mode: the run goes on, the local heartbeats and watchdog keep working, run.json
records since when the cross-node watch was degraded (and until when, if it recovered).

The roll call after a failed diagnosis round (`roll_call.RollCall`) and diagnose's muster use the same
ideas: one answer per node, an atomic counter instead of polling every key, one reader that
counts and publishes the result.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.launch import procs
from commbench.launch.aggregation import (
    GROUP_NODES,
    KEEPALIVE_INTERVALS,
    MIN_INTERVAL,
    Aggregator,
    FleetAggregator,
    Follower,
    GroupAggregator,
    keepalive_intervals,
    plan_interval,
    silence_after,
    tiered,
)
from commbench.launch.digest import NodeAgent, rank_states
from commbench.launch.protocol import (
    FleetSummary,
    HeartbeatReader,
    Sighting,
    Skips,
)
from commbench.launch.store_link import (
    SLOW_CALL,
    Keys,
    StoreDown,
    StoreLink,
    store_class,
    tcp_store_factory,
)


@dataclass(slots=True)
class JobView:
    """What a launcher learns of the job from its own workers' environment."""

    host: str
    port: int
    node: int
    nnodes: int
    writer: bool
    """This node runs global rank 0: it aggregates."""


def job_view(pids: Iterable[int]) -> JobView | None:
    """The job's store and this node's place in it, from its workers' environment (what
    torchrun gave them); None until every local worker is up (the writer is known only
    then), and on one node."""
    envs = []
    for pid in pids:
        env = procs.environ(pid) or {}
        if "MASTER_ADDR" in env and "GROUP_RANK" in env:
            envs.append(env)
    if not envs:
        return None
    env = envs[0]
    try:
        if len(envs) < int(env.get("LOCAL_WORLD_SIZE", "1")):
            return None
        return JobView(
            host=env["MASTER_ADDR"],
            port=int(env["MASTER_PORT"]),
            node=int(env["GROUP_RANK"]),
            nnodes=int(env["GROUP_WORLD_SIZE"]),
            writer=any(environ.get("RANK") == "0" for environ in envs),
        )
    except (KeyError, ValueError):
        return None


class ControlPlane:
    """The node's side of the cross-node watch, on its own thread in the launcher.

    The launcher's poll loop hands it its workers' pids (`offer`) and, when its ranks stall,
    asks for the summary (`want_summary`); it reads `fleet` and never waits. The thread does
    every store request, each with its own timeout.

    When the thread steps is one decision, `next_step`, and a step is `turn`: the thread
    follows them on the real clock, and benchmarks/control_plane.py follows the same two on
    a simulated one (`clock`, `wall`), with each node's view of the job given (`find_view`)
    and its heartbeats in memory (`beats`)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        factory: Callable[[str, int], Callable[[], Any]] = tcp_store_factory,
        hostname: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        find_view: Callable[[Iterable[int]], JobView | None] = job_view,
        beats: Callable[[], dict[int, Sighting]] | None = None,
        skips: Skips | None = None,
    ) -> None:
        self.run_dir = run_dir
        self._factory = factory
        self.hostname = hostname or socket.gethostname()
        self.clock = clock
        """Seconds for the pace (monotonic)."""
        self.wall = wall
        """The time of day the heartbeats' mtimes are on."""
        self._find_view = find_view
        self.skips = skips or Skips()
        """Values refused on read: the launcher's watch's own, so a kind is said once."""
        self._beats = beats or HeartbeatReader(run_dir, self.skips).read
        self.fleet: FleetSummary | None = None
        self.fleet_at: float | None = None
        """When `fleet` was read or made (`clock`)."""
        self.view: JobView | None = None
        self.link: StoreLink | None = None
        self.interval = MIN_INTERVAL
        self._pids: frozenset[int] = frozenset()
        self._want = threading.Event()
        self._due = -float("inf")
        """When the next regular step is due: one interval after the last one began."""
        self._woken_at = -float("inf")
        """When a want last woke the thread (`clock`): at most once per interval."""
        self._woken = False
        """Whether the step now running was brought forward by a want."""
        self.steps = 0
        """Steps since this node's view of the job was found (its workers up)."""
        self._began = 0.0
        """When the step now running began (`clock`): its aggregators' time (`_Publisher._now`)."""
        self.watched: tuple[float, float] | None = None
        """The first and the last step's time (`clock`), from the view on: the span the
        requests and the reads were for."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.agent: NodeAgent | None = None
        self.group: GroupAggregator | None = None
        """Past ONE_TIER_NODES, on the first node of each group: its group's aggregator."""
        self.aggregator: Aggregator | FleetAggregator | None = None
        self.follower: Follower | None = None
        self.hosts: dict[int, str] = {}
        self.ended_at: float | None = None
        """When every local rank had finished: the job is ending, and a store that goes away
        from then on (its host's torchrun exits first) is no degraded watch."""

    # -- the launcher's side (never blocks)
    def offer(self, pids: Iterable[int], hosts: dict[int, str] | None = None) -> None:
        self._pids = frozenset(pids)
        if hosts:
            self.hosts = hosts

    def want_summary(self) -> None:
        """The launcher's ranks stalled: a summary, soon. Wakes the thread at most once per
        interval (`next_step`); otherwise the next regular step serves it."""
        self._want.set()

    @property
    def wanted(self) -> bool:
        """Whether a want is pending (the next step reads the summary)."""
        return self._want.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        # not a daemon: the interpreter must never exit under a thread inside torch's C++
        # (an import, a connect), which aborts the process; every request it makes is bounded
        self._thread = threading.Thread(target=self._run, name="commbench-control")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._want.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * SLOW_CALL + 1)
        if self._thread is None or not self._thread.is_alive():
            self.close()

    def close(self) -> None:
        """Let go of the store (its connection and the link's courier thread)."""
        if self.link is not None:
            self.link.close()

    def refresh(self, wait: float) -> FleetSummary | None:
        """A summary newer than now, waiting at most `wait` seconds (to explain a crash)."""
        asked = self.clock()
        self._want.set()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not self._stop.is_set():
            if self.fleet_at is not None and self.fleet_at >= asked:
                break
            if self.link is not None and self.link.degraded is not None:
                break
            time.sleep(0.05)
        return self.fleet

    @property
    def degraded(self) -> list[dict[str, Any]]:
        """The degraded episodes, for run.json (a request hanging now included)."""
        link = self.link
        if link is None:
            return []
        ended = self.ended_at if self.ended_at is not None else float("inf")
        episodes = [e.to_dict() for e in link.episodes if e.since < ended]
        busy = link.busy_since
        if busy is not None and self.wall() - busy > SLOW_CALL and link.degraded is None:
            episodes.append({"since": busy, "until": None, "reason": "a request is hanging"})
        return episodes

    def record(self) -> dict[str, Any] | None:
        """What run.json keeps of the watch (None on one node)."""
        if self.view is None or self.link is None:
            return None
        return {
            "node": self.view.node,
            "nnodes": self.view.nnodes,
            "aggregator": self.view.writer,
            "group": None if self.group is None else self.group.group,
            "interval_s": self.interval,
            "steps": self.steps,
            "reads": None if self.aggregator is None else self.aggregator.reads,
            "group_reads": None if self.group is None else self.group.reads,
            "watched_s": round(self.watched[1] - self.watched[0], 3) if self.watched else 0.0,
            "requests": self.link.total_requests,
            "requests_by_op": dict(self.link.requests),
            "bytes": self.link.bytes,
            "store_s": round(self.link.seconds, 3),
            "degraded": self.degraded,
            "skipped": list(self.skips.warnings),
        }

    # -- the pace: one step per interval, and at most one wake-up
    def next_step(self, now: float) -> float:
        """When the next step is, as of `now` (on `clock`): one interval after the last one
        began, or sooner where the launcher asked for the summary and no want woke a step in
        the last interval. One step per interval is the model (docs/scale.md): a stalled
        launcher that asks on every 0.1 s poll must not turn that into ten. The writer's
        launcher is never woken: its summary is its own aggregator's, made at every step."""
        if not self._want.is_set() or self.follower is None:
            return self._due
        return min(self._due, max(now, self._woken_at + self.interval))

    def turn(self) -> None:
        """One step, at the time `next_step` said, and what the pace keeps of it."""
        began = self._began = self.clock()
        self._woken = began < self._due
        if self._woken:  # a want brought it forward
            self._woken_at = began
        with contextlib.suppress(StoreDown):
            self.step()
        if self.view is not None:  # the watch's steps: not those that looked for the workers
            self.steps += 1
            self.watched = ((self.watched or (began, 0.0))[0], began)
        if not self._woken or self.group is None:
            # a wake-up stands for the next step, except on a node that aggregates a group:
            # its reads keep to the interval, which a wake-up (too soon to read) would delay
            # (issue 45: an aggregator read in 10 of 15 intervals)
            self._due = began + self.interval

    def _run(self) -> None:
        if self._factory is tcp_store_factory:  # torch's import, done while workers start
            with contextlib.suppress(Exception):
                store_class()
        while not self._stop.is_set():
            self.turn()
            self._wait_next()

    def _wait_next(self) -> None:
        """Sleep until `next_step`; a want can bring it forward only while none is pending."""
        while not self._stop.is_set():
            now = self.clock()
            at = self.next_step(now)
            if at <= now:
                return
            if self._want.is_set():
                self._stop.wait(at - now)
            else:
                self._want.wait(at - now)

    def step(self) -> None:
        """One interval's work; raises StoreDown when the store failed (already recorded)."""
        wanted = self._want.is_set()
        self._want.clear()
        if self.view is None:
            self.view = self._find_view(self._pids)
            if self.view is None or self.view.nnodes < 2:
                self.view = None
                return
            self.interval = plan_interval(self.view.nnodes)
            self.link = StoreLink(self._factory(self.view.host, self.view.port), self.wall)
            keys = Keys()
            nnodes = self.view.nnodes
            phase = random.random() if keepalive_intervals(nnodes) > KEEPALIVE_INTERVALS else 0.0
            self.agent = NodeAgent(self.link, keys, self.view.node, self.hostname, phase)
            if tiered(nnodes) and self.view.node % GROUP_NODES == 0:
                self.group = GroupAggregator(
                    self.link,
                    keys,
                    nnodes,
                    self.interval,
                    self.view.node // GROUP_NODES,
                    self.skips,
                    clock=self.clock,
                )
            if self.view.writer:
                top = FleetAggregator if tiered(nnodes) else Aggregator
                self.aggregator = top(
                    self.link, keys, nnodes, self.interval, self.skips, clock=self.clock
                )
            else:
                self.follower = Follower(self.link, keys, self.skips)
        assert self.agent is not None
        now = self.wall()
        beats = self._beats()
        if beats and all(seen.beat.phase == "done" for seen in beats.values()):
            self.ended_at = now  # the measurement is over: nothing left to watch
            self._stop.set()
            return
        # the digest when a rank's state changed; else every `keepalive_intervals` regular steps
        # (half an interval's slack for a late step), never on a wake-up, which is for the
        # summary
        keepalive = (keepalive_intervals(self.view.nnodes) - 0.5) * self.interval
        states = rank_states(beats, now, silence_after(self.interval))
        self.agent.publish(states, now, unless=float("inf") if self._woken else keepalive)
        if self.group is not None:
            self.group.step(self._began)
        if self.aggregator is not None:
            self.aggregator.hosts = self.hosts
            self.fleet = self.aggregator.step(self._began)
            self.fleet_at = self.clock()
        elif self.follower is not None and wanted:
            fleet = self.follower.read()
            self.fleet_at = self.clock()
            if fleet is not None:
                self.fleet = fleet
