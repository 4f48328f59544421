"""The cross-node watch of a multi-node run, through the job's c10d store, in O(nodes).

The store is the job's own: torchrun's agents and the process groups are set up through it,
so commbench's traffic there must stay a small share of what it serves however large the
cluster. The shape (docs/scale.md has the formulas and the measurements):

- each node's **launcher** (never a worker: no timed loop ever waits on the store) reads its
  own ranks' heartbeat files and /proc, and publishes its `NodeDigest` when a rank changed
  state, else every KEEPALIVE_INTERVALS intervals: one request per node;
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

The roll call after a failed diagnosis round (`RollCall`) and diagnose's muster use the same
ideas: one answer per node, an atomic counter instead of polling every key, one reader that
counts and publishes the result.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

from commbench.fields import pick
from commbench.launch import procs
from commbench.launch.protocol import (
    MAX_LISTED,
    PREFIX,
    FleetSummary,
    GroupSummary,
    HeartbeatReader,
    NodeDigest,
    NodeSilence,
    ProtocolError,
    RankState,
    RollCallAnswer,
    RollCallResult,
    Sighting,
    Skips,
)

STEADY_BUDGET = 500.0
"""Store requests per second the steady watch may cost in all: at the ~13 us of the store's
CPU a digest's `set` costs it (benchmarks/control_plane.py), under 1% of its core."""
MIN_INTERVAL = 0.5
MAX_INTERVAL = 5.0
KEEPALIVE_INTERVALS = 2
"""A node whose ranks' states did not change publishes its digest (their positions, and that
its launcher lives) every this many intervals: the digests are the steady watch's cost, one
request per node, and 16,384 nodes' every 5 s took 4.5% of the store's core."""
SLOW_CALL = 1.0
"""Seconds after which a store request counts as failed: the watch degrades, the run goes on."""
RECONNECT_AFTER = 5.0
PLACEHOLDER = b"-"
"""What a key holds before its writer's first value (created by `peek`, never decoded)."""
MAX_BEHIND = 8
DIGESTS_PER_READ = 128
"""Digests the aggregator reads per request (~2 KB each for 8 ranks): one request for all of
8,192 nodes' (14 MB) took 1.7 s, holding the store from everyone else and past SLOW_CALL."""


ONE_TIER_NODES = 2048
"""Nodes whose digests one aggregator reads itself: decoding them costs its launcher ~0.2 ms
each, 0.4 s of a core per 4.1 s interval at 2,048 nodes (3.3 s per 5 s at 16,384). Past it,
the first node of each GROUP_NODES reads its group's and the writer merges their summaries."""
GROUP_NODES = DIGESTS_PER_READ
"""Nodes per group past ONE_TIER_NODES: one request reads a group's digests."""


def tiered(nnodes: int) -> bool:
    return nnodes > ONE_TIER_NODES


def group_count(nnodes: int) -> int:
    return -(-nnodes // GROUP_NODES)


def group_nodes(group: int, nnodes: int) -> range:
    return range(group * GROUP_NODES, min(nnodes, (group + 1) * GROUP_NODES))


def aggregation_requests(nnodes: int) -> int:
    """Store requests per interval of the aggregators: the aggregator's reads of the digests
    (DIGESTS_PER_READ per request) and its summary; past ONE_TIER_NODES, each group
    aggregator's read and summary, and the writer's read of those and its summary."""
    if not tiered(nnodes):
        return -(-nnodes // DIGESTS_PER_READ) + 1
    groups = group_count(nnodes)
    return 2 * groups + -(-groups // DIGESTS_PER_READ) + 1


def steady_requests(nnodes: int) -> float:
    """Store requests per interval of the steady watch: a digest from each node every
    KEEPALIVE_INTERVALS, and the aggregators' (`aggregation_requests`)."""
    return nnodes / KEEPALIVE_INTERVALS + aggregation_requests(nnodes)


def plan_interval(nnodes: int) -> float:
    """Seconds between digests: `steady_requests` per interval held to STEADY_BUDGET per
    second; never below MIN_INTERVAL (local watchdogs poll faster anyway) nor above
    MAX_INTERVAL (a stuck rank is named within three intervals, four past ONE_TIER_NODES)."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, steady_requests(nnodes) / STEADY_BUDGET))


def silence_after(interval: float) -> float:
    """Seconds without a sign of life that make a rank (its heartbeat) or a group's
    aggregator (its summary) silent: a few intervals, at least 5 s."""
    return max(5.0, 3 * interval)


def node_silence_after(interval: float) -> float:
    """Seconds without a new digest that make a node silent: its keep-alive's period and
    two intervals more (the aggregator reads once per interval, and a step may come late)."""
    return max(5.0, (KEEPALIVE_INTERVALS + 2) * interval)


class Keys:
    """The store keys of one job (the store is the job's: torchrun's own keys live beside)."""

    def __init__(self, job: str = "job") -> None:
        self.base = f"{PREFIX}{job}/"

    def digest(self, node: int) -> str:
        return f"{self.base}digest/{node}"

    @property
    def fleet(self) -> str:
        return f"{self.base}fleet"

    def group(self, group: int) -> str:
        return f"{self.base}group/{group}"

    def rollcall(self, what: str) -> str:
        return f"{self.base}rollcall/{what}"


# -- the store, timed ---------------------------------------------------------------------------


@dataclass(slots=True)
class Episode:
    since: float
    reason: str
    until: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "until": self.until, "reason": self.reason}


class StoreDown(Exception):
    """A store request failed or was too slow; the caller degrades, never the run."""


class _Overdue(Exception):
    """A request got no answer by its deadline (`_Courier.run`)."""


class _Courier:
    """Makes one link's store requests on a daemon thread of its own, so that its caller
    waits at most a deadline. c10d's TCPStore client honours its timeout only where it waits
    for a key: against a stopped store (SIGSTOP, a frozen host) a `compare_set` or a fresh
    connect blocked for as long as the store was stopped (50 s and 25 s measured, and over
    290 s here), with the caller's thread inside it. Overdue, the courier is abandoned with
    its connection, and its thread ends whenever the store answers or the process exits."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="commbench-store", daemon=True).start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def run(self, fn: Callable[[], Any], deadline: float) -> Any:
        done = threading.Event()
        box: list[tuple[bool, Any]] = []

        def job() -> None:
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed to the caller
                box.append((False, exc))
            finally:
                done.set()

        self._jobs.put(job)
        if not done.wait(deadline):
            raise _Overdue
        ok, value = box[0]
        if ok:
            return value
        raise value

    def close(self) -> None:
        self._jobs.put(None)


class StoreLink:
    """Timed store requests, counted. Connects lazily (`factory`) and after a failure waits
    RECONNECT_AFTER seconds before the next try, so a store that is gone costs nothing.
    Counts requests and bytes per operation: the benchmark's and the tests' measure, and the
    run's own record of what the watch cost.

    With `slow_after` set, no request (the connect included) holds its caller longer than
    that: it runs on the link's courier thread, and one that is overdue fails the link
    (`StoreDown`) and is abandoned with its connection."""

    def __init__(
        self,
        factory: Callable[[], Any],
        clock: Callable[[], float] = time.time,
        slow_after: float | None = SLOW_CALL,
    ) -> None:
        self._factory = factory
        self.slow_after = slow_after
        """None where a request may block by design (a `wait`)."""
        self._store: Any = None
        self._courier: _Courier | None = None
        self._clock = clock
        self._retry_at = 0.0
        self.requests: dict[str, int] = {}
        self.bytes = 0
        self.seconds = 0.0
        """Time spent in requests that returned: the store's time this link cost, as its
        client saw it (round trips included)."""
        self.busy_since: float | None = None
        """When the request in flight began (the owner's thread reads it: a request that hangs
        past SLOW_CALL degrades the watch even before it returns)."""
        self.episodes: list[Episode] = []

    @property
    def degraded(self) -> Episode | None:
        return self.episodes[-1] if self.episodes and self.episodes[-1].until is None else None

    def _down(self, reason: str) -> None:
        if self.degraded is None:
            self.episodes.append(Episode(since=self._clock(), reason=reason[:200]))
            del self.episodes[:-20]
        self._store = None
        if self._courier is not None:  # its thread may be inside the failed request
            self._courier.close()
            self._courier = None
        self._retry_at = time.monotonic() + RECONNECT_AFTER

    def _bounded(self, fn: Callable[[], Any]) -> Any:
        """`fn()`, on the courier within `slow_after`, or here where no deadline is set."""
        if self.slow_after is None:
            return fn()
        if self._courier is None:
            self._courier = _Courier()
        return self._courier.run(fn, self.slow_after)

    def _up(self) -> None:
        if (episode := self.degraded) is not None:
            episode.until = self._clock()

    def call(self, op: str, *args: Any) -> Any:
        if self._store is None:
            if time.monotonic() < self._retry_at:
                raise StoreDown("waiting to reconnect")
            try:
                self._store = self._bounded(self._factory)
            except _Overdue:
                self._down(f"cannot connect: no answer in {self.slow_after:g} s")
                raise StoreDown("connect: no answer") from None
            except Exception as exc:
                self._down(f"cannot connect: {_one_line(exc)}")
                raise StoreDown(str(exc)) from None
        started = time.monotonic()
        self.busy_since = self._clock()
        store = self._store
        try:
            result = self._bounded(lambda: getattr(store, op)(*args))
        except _Overdue:
            self._down(f"{op} got no answer in {self.slow_after:g} s")
            raise StoreDown(f"{op}: no answer in {self.slow_after:g} s") from None
        except Exception as exc:
            self._down(f"{op} failed: {_one_line(exc)}")
            raise StoreDown(str(exc)) from None
        finally:
            self.busy_since = None
        took = time.monotonic() - started
        self.seconds += took
        self.requests[op] = self.requests.get(op, 0) + 1
        self.bytes += _size(args) + _size([result])
        if self.slow_after is not None and took > self.slow_after:
            self._down(f"{op} took {took:.1f} s")
            raise StoreDown(f"{op} took {took:.1f} s")
        self._up()
        return result

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def close(self) -> None:
        """Drop the connection and end the courier thread (a request in flight ends it when
        it returns)."""
        self._store = None
        if self._courier is not None:
            self._courier.close()
            self._courier = None


def _size(values: Iterable[Any]) -> int:
    n = 0
    for v in values:
        if isinstance(v, bytes | str):
            n += len(v)
        elif isinstance(v, list | tuple):
            n += _size(v)
    return n


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]


CPP_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL"


def store_class() -> Any:
    """torch's TCPStore: the one import of it in a launcher (the cross-node watch, diagnose's
    muster). c10d logs every failed request with a C++ stack on the launcher's stderr (a
    client that cannot connect, a store gone with the node that held it, which ended first),
    where commbench says a degraded watch once, in run.json and a warning; so torch's first
    import here holds its C++ log to FATAL, whatever TORCH_CPP_LOG_LEVEL says (the level is
    read then), and puts the user's own back at once for the workers it is meant for. A
    process that imported torch before (a Python program using the API) keeps its level."""
    if "torch" not in sys.modules:
        users = os.environ.get(CPP_LOG_LEVEL)
        os.environ[CPP_LOG_LEVEL] = "FATAL"
        try:
            import torch.distributed  # noqa: F401 (the import that reads the level)
        finally:
            if users is None:
                os.environ.pop(CPP_LOG_LEVEL, None)
            else:
                os.environ[CPP_LOG_LEVEL] = users
    from torch.distributed import TCPStore

    return TCPStore


def tcp_store_factory(host: str, port: int) -> Callable[[], Any]:
    """A client of the job's store with SLOW_CALL as its timeout (torch imported here, in the
    caller's thread, never on a courier's, and only on multi-node runs)."""
    tcp_store = store_class()

    def connect() -> Any:
        return tcp_store(
            host,
            port,
            is_master=False,
            timeout=timedelta(seconds=SLOW_CALL),
            wait_for_workers=False,
        )

    return connect


def peek(link: StoreLink, key: str) -> bytes | None:
    """A key's value without blocking on a missing one, in one request: compare_set with an
    empty expected value creates PLACEHOLDER where nothing is, and returns what is there."""
    value = bytes(link.call("compare_set", key, "", PLACEHOLDER))
    return None if value == PLACEHOLDER else value


# -- one node: the digest ---------------------------------------------------------------------


def rank_states(
    beats: dict[int, Sighting],
    now: float,
    silent_after: float,
    state_of: Callable[[int], str | None] = procs.state,
) -> tuple[RankState, ...]:
    """This node's ranks as its launcher sees them, from their heartbeats and /proc."""
    out = []
    for rank, seen in sorted(beats.items()):
        b = seen.beat
        quiet = max(0.0, now - seen.mtime)
        proc = state_of(b.pid) if b.pid else None
        if b.error:
            state = "error"
        elif b.phase == "done":
            state = "done"
        elif proc in ("T", "t"):
            state = "stopped"
        elif proc in (None, "Z", "X"):
            state = "gone"
        elif quiet > silent_after:
            state = "silent"
        else:
            state = "running"
        out.append(
            RankState(
                rank=rank,
                **pick(b, "local_rank", "node", "host", "pid", "point"),
                phase=b.phase[:100],
                iteration=b.iteration,
                ticks=b.ticks,
                state=state,
                quiet_s=round(quiet, 1),
                error=b.error[:200],
            )
        )
    return tuple(out)


class NodeAgent:
    """Publishes this node's digest: one `set` per interval."""

    def __init__(self, link: StoreLink, keys: Keys, node: int, host: str) -> None:
        self.link = link
        self.keys = keys
        self.node = node
        self.host = host
        self.seq = 0
        self._states: tuple[tuple[int, str], ...] | None = None
        self._published_at = -float("inf")

    def publish(
        self, ranks: tuple[RankState, ...], now: float | None = None, *, unless: float = 0.0
    ) -> bool:
        """One `set`, unless no rank's state changed since the last one and that was less
        than `unless` seconds ago. Whether it published."""
        now = time.time() if now is None else now
        states = tuple((r.rank, r.state) for r in ranks)
        if states == self._states and now - self._published_at < unless:
            return False
        self._states, self._published_at = states, now
        self.seq += 1
        digest = NodeDigest(
            node=self.node,
            host=self.host,
            seq=self.seq,
            time=now,
            ranks=ranks,
        )
        self.link.call("set", self.keys.digest(self.node), digest.to_json())
        return True


# -- the aggregators ----------------------------------------------------------------------------

_SEVERITY = {"stopped": 0, "silent": 1, "error": 2, "gone": 3, "unknown": 4}


def _by_severity(r: RankState) -> tuple[int, float, int]:
    return (_SEVERITY[r.state], -r.quiet_s, r.rank)


S = TypeVar("S", FleetSummary, GroupSummary)
"""What an aggregator publishes."""


def read_many(link: StoreLink, keys: list[str], placed: bool) -> list[bytes]:
    """The values of many keys, DIGESTS_PER_READ a request. Until the keys are `placed`, each
    is peeked first, once: multi_get must not block on a key not yet published."""
    if not placed:
        for key in keys:
            peek(link, key)
    values = []
    for at in range(0, len(keys), DIGESTS_PER_READ):
        values += link.call("multi_get", keys[at : at + DIGESTS_PER_READ])
    return values


@dataclass(slots=True)
class _Seen:
    digest: NodeDigest | None = None
    changed_at: float = 0.0
    positions: int = 0
    raw: bytes = b""
    """The digest as last read: the same bytes again are decoded no more (a node publishes
    every KEEPALIVE_INTERVALS while its ranks' states hold)."""


@dataclass(slots=True)
class _Nodes:
    """What a range of nodes last said (their digests, read DIGESTS_PER_READ a request) and
    since when each said something new: the part every aggregator shares."""

    link: StoreLink
    keys: Keys
    nodes: range
    interval: float
    skips: Skips
    group: int = 0
    _seen: dict[int, _Seen] = field(default_factory=dict)
    _placed: bool = False
    _started: float | None = None
    _progress: int = 0
    _seq: int = 0

    def read(self, now: float) -> None:
        if self._started is None:
            self._started = now
        values = read_many(self.link, [self.keys.digest(n) for n in self.nodes], self._placed)
        self._placed = True
        changed = False
        for node, value in zip(self.nodes, values):
            raw = bytes(value)
            if raw == PLACEHOLDER or (node in self._seen and self._seen[node].raw == raw):
                continue
            digest = self.skips.decode(NodeDigest, raw)
            if digest is None or digest.node != node:
                if digest is not None:
                    self.skips.note(
                        ProtocolError("digest", "misplaced", f"node {digest.node} under {node}")
                    )
                continue
            seen = self._seen.setdefault(node, _Seen(changed_at=now))
            seen.raw = raw
            if seen.digest is None or digest.seq != seen.digest.seq:
                seen.changed_at = now
            positions = hash(tuple((r.rank, r.point, r.iteration, r.ticks) for r in digest.ranks))
            if positions != seen.positions:
                seen.positions = positions
                changed = True
            seen.digest = digest
        if changed:
            self._progress += 1

    def summary(self, now: float) -> GroupSummary:
        """These nodes as the fleet summary needs them (`merge`)."""
        quiet_limit = node_silence_after(self.interval)
        problems: list[RankState] = []
        running: list[RankState] = []
        silent: list[NodeSilence] = []
        for node in self.nodes:
            seen = self._seen.get(node)
            if seen is None or seen.digest is None:
                waited = now - (self._started or now)
                if waited > 2 * quiet_limit:
                    silent.append(NodeSilence(node=node, quiet_s=round(waited, 1), never=True))
                continue
            quiet = now - seen.changed_at
            if quiet > quiet_limit:
                silent.append(
                    NodeSilence(
                        node=node,
                        host=seen.digest.host,
                        quiet_s=round(quiet, 1),
                        ranks=seen.digest.ranks[:16],
                    )
                )
                continue
            for r in seen.digest.ranks:
                if r.state in _SEVERITY:
                    problems.append(r)
                elif r.state == "running":
                    running.append(r)
        problems.sort(key=_by_severity)
        furthest = max((r.position for r in running), default=(-1, 0))
        self._seq += 1
        return GroupSummary(
            group=self.group,
            first=self.nodes.start,
            nnodes=len(self.nodes),
            seq=self._seq,
            time=time.time(),
            reporting=sum(1 for s in self._seen.values() if s.digest is not None),
            progress=self._progress,
            furthest=furthest,
            running=len(running),
            behind_count=sum(1 for r in running if r.position < furthest),
            problems=tuple(problems[:MAX_LISTED]),
            silent_nodes=tuple(silent[:MAX_LISTED]),
            slowest=tuple(sorted(running, key=lambda r: (r.position, r.rank))[:MAX_BEHIND]),
            truncated=max(0, len(problems) - MAX_LISTED) + max(0, len(silent) - MAX_LISTED),
        )


def merge(
    parts: Iterable[GroupSummary], *, seq: int, interval: float, nnodes: int, hosts: dict[int, str]
) -> FleetSummary:
    """The fleet summary of the groups' summaries: their lists merged and cut as one list of
    the whole fleet would be (each group's is the head of its part of it), the fleet's
    furthest position and who is behind it from each group's furthest and slowest. A node
    never heard from is named by its host where the writer's roll gives one (`hosts`)."""
    parts = list(parts)
    active = [p for p in parts if p.running]
    furthest = max((p.furthest for p in active), default=(-1, 0))
    problems = sorted((r for p in parts for r in p.problems), key=_by_severity)
    silent = sorted((s for p in parts for s in p.silent_nodes), key=lambda s: s.node)
    behind = sorted(
        (r for p in active for r in p.slowest if r.position < furthest),
        key=lambda r: (r.position, r.rank),
    )
    return FleetSummary(
        seq=seq,
        time=time.time(),
        interval=interval,
        nnodes=nnodes,
        reporting=sum(p.reporting for p in parts),
        progress=sum(p.progress for p in parts),
        furthest=furthest,
        problems=tuple(problems[:MAX_LISTED]),
        silent_nodes=tuple(
            replace(s, host=hosts.get(s.node)) if s.host is None else s for s in silent[:MAX_LISTED]
        ),
        behind=tuple(behind[:MAX_BEHIND]),
        behind_count=sum(p.running if p.furthest < furthest else p.behind_count for p in active),
        truncated=sum(p.truncated for p in parts)
        + max(0, len(problems) - MAX_LISTED)
        + max(0, len(silent) - MAX_LISTED),
    )


@dataclass(slots=True)
class _Publisher(Generic[S]):
    """What every aggregator shares: where it publishes, for how many nodes, how often, and
    the last summary it published, which a step within one interval of it returns again (a
    stalled node's wake-up between two steps costs no request)."""

    link: StoreLink
    keys: Keys
    nnodes: int
    interval: float
    clock: Callable[[], float] = field(default=time.monotonic, kw_only=True)
    _last: tuple[float, S] | None = field(default=None, kw_only=True)
    """When the digests were last read, and the summary made of them."""

    def _recent(self, now: float) -> S | None:
        if self._last is not None and now - self._last[0] < self.interval:
            return self._last[1]
        return None

    def _publish(self, key: str, summary: S, now: float) -> S:
        self.link.call("set", key, summary.to_json())
        self._last = (now, summary)
        return summary


@dataclass(slots=True)
class Aggregator(_Publisher[FleetSummary]):
    """Up to ONE_TIER_NODES nodes: reads every node's digest (DIGESTS_PER_READ a request)
    and publishes the fleet summary, at most once per interval."""

    skips: Skips = field(default_factory=Skips)
    hosts: dict[int, str] = field(default_factory=dict)
    """Host by node, where known (the writer's roll): names a node never heard from."""
    _nodes: _Nodes | None = None
    _seq: int = 0

    def step(self) -> FleetSummary:
        """Read every digest and publish the summary; at most once per interval (a stalled
        node's wake-up between two steps gets the summary of the last one, for no request)."""
        now = self.clock()
        if (recent := self._recent(now)) is not None:
            return recent
        if self._nodes is None:
            self._nodes = _Nodes(
                self.link, self.keys, range(self.nnodes), self.interval, self.skips
            )
        self._nodes.read(now)
        self._seq += 1
        summary = merge(
            [self._nodes.summary(now)],
            seq=self._seq,
            interval=self.interval,
            nnodes=self.nnodes,
            hosts=self.hosts,
        )
        return self._publish(self.keys.fleet, summary, now)


@dataclass(slots=True)
class GroupAggregator(_Publisher[GroupSummary]):
    """Past ONE_TIER_NODES, the launcher of each group's first node: reads its group's
    digests (one request) and publishes the group's summary, at most once per interval."""

    group: int
    skips: Skips = field(default_factory=Skips)
    _nodes: _Nodes | None = None

    def step(self) -> GroupSummary:
        now = self.clock()
        if (recent := self._recent(now)) is not None:
            return recent
        if self._nodes is None:
            nodes = group_nodes(self.group, self.nnodes)
            self._nodes = _Nodes(self.link, self.keys, nodes, self.interval, self.skips, self.group)
        self._nodes.read(now)
        summary = self._nodes.summary(now)
        return self._publish(self.keys.group(self.group), summary, now)


@dataclass(slots=True)
class _GroupSeen:
    summary: GroupSummary | None = None
    changed_at: float = 0.0


@dataclass(slots=True)
class FleetAggregator(_Publisher[FleetSummary]):
    """Past ONE_TIER_NODES, the writer's launcher: reads every group's summary
    (DIGESTS_PER_READ a request) and publishes their merge as the fleet summary, at most
    once per interval. A group whose aggregator stopped publishing (its launcher is gone or
    frozen) is read here from its digests, until it publishes again."""

    skips: Skips = field(default_factory=Skips)
    hosts: dict[int, str] = field(default_factory=dict)
    _groups: dict[int, _GroupSeen] = field(default_factory=dict)
    _orphans: dict[int, _Nodes] = field(default_factory=dict)
    """Groups read here, from their digests."""
    _placed: bool = False
    _started: float | None = None
    _seq: int = 0

    def step(self) -> FleetSummary:
        now = self.clock()
        if (recent := self._recent(now)) is not None:
            return recent
        if self._started is None:
            self._started = now
        keys = [self.keys.group(g) for g in range(group_count(self.nnodes))]
        values = read_many(self.link, keys, self._placed)
        self._placed = True
        quiet_limit = silence_after(self.interval)
        parts = []
        for group, raw in enumerate(values):
            seen = self._groups.setdefault(group, _GroupSeen(changed_at=now))
            summary = self._decode(group, bytes(raw))
            if summary is not None and (seen.summary is None or summary.seq != seen.summary.seq):
                seen.summary, seen.changed_at = summary, now
            if seen.summary is not None and now - seen.changed_at <= quiet_limit:
                self._orphans.pop(group, None)
                parts.append(seen.summary)
            elif seen.summary is not None or now - self._started > 2 * quiet_limit:
                orphan = self._orphans.get(group)
                if orphan is None:
                    nodes = group_nodes(group, self.nnodes)
                    orphan = _Nodes(self.link, self.keys, nodes, self.interval, self.skips, group)
                    self._orphans[group] = orphan
                orphan.read(now)
                parts.append(orphan.summary(now))
        self._seq += 1
        fleet = merge(
            parts, seq=self._seq, interval=self.interval, nnodes=self.nnodes, hosts=self.hosts
        )
        return self._publish(self.keys.fleet, fleet, now)

    def _decode(self, group: int, raw: bytes) -> GroupSummary | None:
        if raw == PLACEHOLDER:
            return None
        summary = self.skips.decode(GroupSummary, raw)
        if summary is None:
            return None
        nodes = group_nodes(group, self.nnodes)
        if (summary.group, summary.first, summary.nnodes) != (group, nodes.start, len(nodes)):
            self.skips.note(
                ProtocolError("group", "misplaced", f"group {summary.group} under {group}")
            )
            return None
        return summary


class Follower:
    """Reads the fleet summary: one request, only when asked."""

    def __init__(self, link: StoreLink, keys: Keys, skips: Skips | None = None) -> None:
        self.link = link
        self.keys = keys
        self.skips = skips or Skips()

    def read(self) -> FleetSummary | None:
        return self.skips.decode(FleetSummary, peek(self.link, self.keys.fleet))


# -- the launcher's thread ----------------------------------------------------------------------


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
        self.watched: tuple[float, float] | None = None
        """The first and the last step's time (`clock`): the span the requests were for."""
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
        launcher that asks on every 0.1 s poll must not turn that into ten."""
        if not self._want.is_set():
            return self._due
        return min(self._due, max(now, self._woken_at + self.interval))

    def turn(self) -> None:
        """One step, at the time `next_step` said, and what the pace keeps of it."""
        began = self.clock()
        self._woken = began < self._due
        if self._woken:  # a want brought it forward
            self._woken_at = began
        with contextlib.suppress(StoreDown):
            self.step()
        self.steps += 1
        self.watched = ((self.watched or (began, 0.0))[0], began)
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
            self.agent = NodeAgent(self.link, keys, self.view.node, self.hostname)
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
        # the digest when a rank's state changed; else every KEEPALIVE_INTERVALS regular steps
        # (half an interval's slack for a late step), never on a wake-up, which is for the
        # summary
        keepalive = (KEEPALIVE_INTERVALS - 0.5) * self.interval
        states = rank_states(beats, now, silence_after(self.interval))
        self.agent.publish(states, now, unless=float("inf") if self._woken else keepalive)
        if self.group is not None:
            self.group.step()
        if self.aggregator is not None:
            self.aggregator.hosts = self.hosts
            self.fleet = self.aggregator.step()
            self.fleet_at = self.clock()
        elif self.follower is not None and wanted:
            fleet = self.follower.read()
            self.fleet_at = self.clock()
            if fleet is not None:
                self.fleet = fleet


# -- the roll call ------------------------------------------------------------------------------

ROLLCALL_POLL = 0.5
ROLLCALL_BUDGET = 8000.0
"""Polls per second the waiting nodes may make in all: the poll period grows past
ROLLCALL_POLL beyond 4,000 nodes (`rollcall_poll`). A poll (`peek`) costs the store ~6-13 us
of its CPU (benchmarks/control_plane.py): 5-10% of its core, for the seconds a roll call
lasts. (It was 2,000, against a capacity of 17,000 requests/s as a client timed them: the
survivors of 16,384 nodes then learnt the result 8 s apart.)"""


def rollcall_poll(nnodes: int) -> float:
    """Seconds between one node's polls during a roll call."""
    return max(ROLLCALL_POLL, nnodes / ROLLCALL_BUDGET)


class RollCall:
    """After a failed round, which nodes are still alive: each surviving node answers once
    (`answer`: an append and an atomic count); the first to answer counts (it polls one
    counter, not every key), then publishes the `RollCallResult`, which the others poll for
    (one small request each per ROLLCALL_POLL). If the counter dies, the others read the
    answers themselves when the wait is over. Requests per node: two to answer, then one per
    poll until the result: O(1) per node and poll, O(nodes) in all."""

    def __init__(
        self, link: StoreLink, keys: Keys, nnodes: int, skips: Skips | None = None
    ) -> None:
        self.link = link
        self.keys = keys
        self.nnodes = nnodes
        self.skips = skips or Skips()

    def answer(self, node: int, host: str, rank: int, wait: float = 0.0) -> int:
        """Sign this node in; returns how many had answered, this one included. A request
        that fails is retried for `wait` seconds: one slow answer is no lost store. (A retried
        `add` whose first try did land counts this node twice: the count may then end a
        moment early, and `counted` reads the answers themselves, never the count.)"""
        line = RollCallAnswer(node=node, host=host, rank=rank).to_json() + b"\n"
        deadline = time.monotonic() + wait
        self._retried(
            lambda: self.link.call("append", self.keys.rollcall("answers"), line), deadline
        )
        return int(
            self._retried(lambda: self.link.call("add", self.keys.rollcall("count"), 1), deadline)
        )

    def _retried(self, request: Callable[[], Any], deadline: float) -> Any:
        while True:
            try:
                return request()
            except StoreDown:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(left, rollcall_poll(self.nnodes)))

    def all_answered(self) -> bool:
        """One look at the count (the counter's poll): one request."""
        return int(self.link.call("add", self.keys.rollcall("count"), 0)) >= self.nnodes

    def answered(self) -> list[int]:
        raw = peek(self.link, self.keys.rollcall("answers")) or b""
        nodes = set()
        for line in raw.split(b"\n"):
            a = self.skips.decode(RollCallAnswer, line) if line.strip() else None
            if a is not None and a.node < self.nnodes:
                nodes.add(a.node)
        return sorted(nodes)

    def counted(self, node: int) -> RollCallResult:
        """The result as the answers now stand (one read of them)."""
        answered = set(self.answered())
        missing = tuple(n for n in range(self.nnodes) if n not in answered)
        return RollCallResult(nnodes=self.nnodes, missing=missing, counter=node)

    def count(
        self, node: int, wait: float, sleep: Callable[[float], None] = time.sleep
    ) -> RollCallResult:
        """The counter's part: poll the count until every node answered or `wait` is over."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(StoreDown):  # a slow poll: the next one may answer
                if self.all_answered():
                    break
            sleep(rollcall_poll(self.nnodes))
        late = time.monotonic() + SLOW_CALL + RECONNECT_AFTER
        result = self._retried(lambda: self.counted(node), late)
        self._retried(
            lambda: self.link.call("set", self.keys.rollcall("result"), result.to_json()), late
        )
        return result

    def poll(self) -> RollCallResult | None:
        """One look for the counter's result: one request."""
        return self.skips.decode(RollCallResult, peek(self.link, self.keys.rollcall("result")))

    def result(self, wait: float) -> RollCallResult | None:
        """Everyone else's part: poll for the counter's result."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(StoreDown):
                if (result := self.poll()) is not None:
                    return result
            time.sleep(rollcall_poll(self.nnodes))
        return None

    def run(self, node: int, host: str, rank: int, wait: float) -> RollCallResult:
        """Answer, then count (first to answer) or wait for the count; falls back to reading
        the answers when the counter never publishes."""
        position = self.answer(node, host, rank, wait)
        if position == 1:
            return self.count(node, wait)
        result = self.result(wait + 2 * rollcall_poll(self.nnodes) + SLOW_CALL)
        if result is not None:
            return result
        return self.counted(node)
