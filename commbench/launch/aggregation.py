"""The cross-node watch's aggregators, and the cost model that sizes them: one aggregator
reads every node's digest and publishes the `FleetSummary`; past ONE_TIER_NODES the first
node of each group aggregates its group (`GroupAggregator`) and the writer merges the groups'
summaries (`FleetAggregator`). The interval grows with the cluster (`plan_interval`) so the
steady load stays within STEADY_BUDGET requests per second (docs/scale.md)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from commbench.launch.protocol import (
    MAX_LISTED,
    FleetSummary,
    GroupSummary,
    NodeDigest,
    NodeSilence,
    ProtocolError,
    RankState,
    Skips,
)
from commbench.launch.store_link import PLACEHOLDER, Keys, StoreLink, peek

STEADY_BUDGET = 500.0
"""Store requests per second the steady watch may cost in all: at the ~13 us of the store's
CPU a digest's `set` costs it (benchmarks/control_plane.py), under 1% of its core."""
MIN_INTERVAL = 0.5
MAX_INTERVAL = 5.0
KEEPALIVE_INTERVALS = 2
"""A node whose ranks' states did not change publishes its digest (their positions, and that
its launcher lives) every this many intervals: the digests are the steady watch's cost, one
request per node, and 16,384 nodes' every 5 s took 4.5% of the store's core."""
MAX_KEEPALIVE = 8
"""The most intervals between a quiet node's digests (`keepalive_intervals`): a launcher that
died is then noticed within ~46 s at 16,384 nodes. Past ~20,000 nodes the steady watch
exceeds STEADY_BUDGET rather than wait longer."""
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


def keepalive_intervals(nnodes: int) -> int:
    """Intervals between a quiet node's digests: KEEPALIVE_INTERVALS, or more where even
    MAX_INTERVAL would put the steady watch past STEADY_BUDGET (past ~5,000 nodes: 8 at
    16,384, whose digests every 2 intervals cost 1,690 requests/s, 0.069 of the store's core
    at the 41 us a request costs it under 8 concurrent clients). A node whose ranks change
    state publishes at once whatever this is; what waits longer is the sign that a quiet
    node's launcher died (`node_silence_after`)."""
    room = max(1.0, STEADY_BUDGET * MAX_INTERVAL - aggregation_requests(nnodes))
    return min(MAX_KEEPALIVE, max(KEEPALIVE_INTERVALS, math.ceil(nnodes / room)))


def steady_requests(nnodes: int) -> float:
    """Store requests per interval of the steady watch: a digest from each node every
    `keepalive_intervals`, and the aggregators' (`aggregation_requests`)."""
    return nnodes / keepalive_intervals(nnodes) + aggregation_requests(nnodes)


def plan_interval(nnodes: int) -> float:
    """Seconds between digests: `steady_requests` per interval held to STEADY_BUDGET per
    second; never below MIN_INTERVAL (local watchdogs poll faster anyway) nor above
    MAX_INTERVAL (a stuck rank is named within three intervals, four past ONE_TIER_NODES)."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, steady_requests(nnodes) / STEADY_BUDGET))


def silence_after(interval: float) -> float:
    """Seconds without a sign of life that make a rank (its heartbeat) or a group's
    aggregator (its summary) silent: a few intervals, at least 5 s."""
    return max(5.0, 3 * interval)


def node_silence_after(interval: float, keepalive: int = KEEPALIVE_INTERVALS) -> float:
    """Seconds without a new digest that make a node silent: its keep-alive's period
    (`keepalive` intervals) and two intervals more (the aggregator reads once per interval,
    and a step may come late)."""
    return max(5.0, (keepalive + 2) * interval)


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
    keepalive: int = KEEPALIVE_INTERVALS
    """Intervals between a quiet node's digests (`keepalive_intervals` of the cluster)."""
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
        quiet_limit = node_silence_after(self.interval, self.keepalive)
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
    reads: int = field(default=0, kw_only=True)
    """Steps that read (the rest returned the last summary): what run.json records against
    its intervals."""

    def _recent(self, now: float) -> S | None:
        if self._last is not None and now - self._last[0] < self.interval:
            return self._last[1]
        return None

    def _now(self, at: float | None) -> float:
        """The step's time: when its interval began (`at`, the watch's thread's), else now. A
        step that took its time for the clock here read late, and a next one that spent less
        before its read would come within the interval of it and be skipped: half the reads
        on the real clock (issue 45)."""
        return self.clock() if at is None else at

    def _publish(self, key: str, summary: S, now: float) -> S:
        self.reads += 1
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

    def step(self, at: float | None = None) -> FleetSummary:
        """Read every digest and publish the summary; at most once per interval (a stalled
        node's wake-up between two steps gets the summary of the last one, for no request).
        `at`: when the step's interval began (`_now`)."""
        now = self._now(at)
        if (recent := self._recent(now)) is not None:
            return recent
        if self._nodes is None:
            self._nodes = _Nodes(
                self.link,
                self.keys,
                range(self.nnodes),
                self.interval,
                self.skips,
                keepalive=keepalive_intervals(self.nnodes),
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

    def step(self, at: float | None = None) -> GroupSummary:
        now = self._now(at)
        if (recent := self._recent(now)) is not None:
            return recent
        if self._nodes is None:
            nodes = group_nodes(self.group, self.nnodes)
            self._nodes = _Nodes(
                self.link,
                self.keys,
                nodes,
                self.interval,
                self.skips,
                self.group,
                keepalive_intervals(self.nnodes),
            )
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

    def step(self, at: float | None = None) -> FleetSummary:
        now = self._now(at)
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
                    orphan = _Nodes(
                        self.link,
                        self.keys,
                        nodes,
                        self.interval,
                        self.skips,
                        group,
                        keepalive_intervals(self.nnodes),
                    )
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
