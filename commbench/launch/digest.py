"""One node's part of the cross-node watch: its ranks' states as its launcher sees them (their
heartbeats and /proc: `rank_states`), published as its `NodeDigest` (`NodeAgent`): one store
request per node, when a state changed or as a keep-alive."""

from __future__ import annotations

import time
from collections.abc import Callable

from commbench.fields import pick
from commbench.launch import procs
from commbench.launch.protocol import (
    NodeDigest,
    RankState,
    Sighting,
)
from commbench.launch.store_link import Keys, StoreLink


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
    """Publishes this node's digest: one request when it publishes, answered.

    c10d's client sends a `set` and never waits for an answer, so a follower that only
    publishes never saw a store that stopped (issue 45: 7 of 8 run.json files of a run whose
    store stopped for 60 s did not say so). The digest replaces the last one with
    `compare_set`, which the store answers: a stopped store fails it past its deadline and
    degrades this node's watch like any read. Only the first digest (or one after the key
    held something else: the aggregator's placeholder, a store that lost its keys) is a `set`."""

    def __init__(
        self, link: StoreLink, keys: Keys, node: int, host: str, phase: float = 0.0
    ) -> None:
        self.link = link
        self.phase = phase
        """Where in its keep-alive period (0..1) this node's quiet digests fall: nodes that
        start together would otherwise all keep alive in the same interval, a burst of one
        request per node every period (`plane`: random past KEEPALIVE_INTERVALS)."""
        self.keys = keys
        self.node = node
        self.host = host
        self.seq = 0
        self._states: tuple[tuple[int, str], ...] | None = None
        self._published_at = -float("inf")
        self._last: bytes | None = None
        """The digest this node last wrote: what its key holds, unless the store lost it."""

    def publish(
        self, ranks: tuple[RankState, ...], now: float | None = None, *, unless: float = 0.0
    ) -> bool:
        """One `set`, unless no rank's state changed since the last one and that was less
        than `unless` seconds ago. Whether it published."""
        now = time.time() if now is None else now
        states = tuple((r.rank, r.state) for r in ranks)
        if states == self._states and now - self._published_at < unless:
            return False
        first = self._states is None
        self._states, self._published_at = states, now
        if first and unless != float("inf"):  # the first keep-alive comes `phase` early
            self._published_at -= self.phase * unless
        self.seq += 1
        digest = NodeDigest(
            node=self.node,
            host=self.host,
            seq=self.seq,
            time=now,
            ranks=ranks,
        )
        key, value = self.keys.digest(self.node), digest.to_json()
        if (
            self._last is None
            or bytes(self.link.call("compare_set", key, self._last, value)) != value
        ):
            self.link.call("set", key, value)
        self._last = value
        return True
