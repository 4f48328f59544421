"""The roll call after a failed diagnosis round: which nodes are still alive, in O(1)
requests per node (one answer each, an atomic counter, one reader that counts and publishes
the `RollCallResult`)."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from typing import Any

from commbench.launch.protocol import (
    RollCallAnswer,
    RollCallResult,
    Skips,
)
from commbench.launch.store_link import RECONNECT_AFTER, SLOW_CALL, Keys, StoreDown, StoreLink, peek

ROLLCALL_POLL = 0.5
ROLLCALL_BUDGET = 8000.0
"""Polls per second the counter and any survivor whose wait failed may make in all: the poll
period grows past ROLLCALL_POLL beyond 4,000 nodes (`rollcall_poll`). The survivors do not
poll for the result: each waits for it in one request (`RollCall.result`). (Each polled
once per ROLLCALL_POLL before: 16 requests a node over a roll call's 8 s wait, 32,768 a
second at 16,384 nodes, held to 8,000 by this budget at the price of hearing the result up
to 2 s late.)"""


ANSWER_RATE = 3000.0
"""Survivors per second that answer, and that read the result once it is published: each
waits a random part of `answer_spread` first, then makes 3 requests (its answer's `append`
and `add`, and the wait for the result), and after the result another random part before
reading it. Without a spread every survivor of 16,384 nodes answered within the first
100 ms (49k requests), and the store's other clients (the job's own rendezvous and
process-group traffic) waited behind the burst (an unrelated `get` up to 48 ms at 1,024
nodes). At 3,000 a second the store takes 9,000 requests a second (~0.15-0.3 of its core:
docs/scale.md); the answers take 5.5 s at 16,384 nodes, 0.34 s at 1,024, and the counter
waits that long more than ROLLCALL_WAIT (`RollCall.run`)."""
CONNECT_RATE = 2000.0
"""New connections per second a fleet may open at one store (the roll-call links at a
worker's start, the muster's sign-ins): each waits a random part of `connect_spread` first.
c10d's libuv store names every new peer on its event loop (`getnameinfo`, a reverse DNS
lookup where the hosts file does not know the peer; docs/scale.md): ~80 us of its CPU with
the connection's first request, plus the lookup; 2,000 a second, 0.17 of its core where
lookups are fast (benchmarks/control_plane.py)."""


def rollcall_poll(nnodes: int) -> float:
    """Seconds between one node's polls during a roll call."""
    return max(ROLLCALL_POLL, nnodes / ROLLCALL_BUDGET)


def answer_spread(nnodes: int) -> float:
    """Seconds over which the survivors' answers, and their reads of the result, are spread
    (ANSWER_RATE)."""
    return nnodes / ANSWER_RATE


def connect_spread(nnodes: int) -> float:
    """Seconds over which `nnodes` nodes' new connections to one store are spread."""
    return nnodes / CONNECT_RATE


def open_link(link: StoreLink, keys: Keys) -> None:
    """Open `link`'s connection now, in one request that changes nothing (a `check` of the
    result's key), so that the roll call finds it open: a worker opens its node's link at
    its start (at a random moment of `connect_spread`), never in the failure's burst, where
    each new connection would cost the store a reverse lookup on its event loop."""
    link.call("check", [keys.rollcall("result")])


class RollCall:
    """After a failed round, which nodes are still alive: each surviving node answers once
    (`answer`: an append and an atomic count); the first to answer counts (it polls one
    counter, not every key), then publishes the `RollCallResult`, which each of the others
    waits for in one request and then reads. If the counter dies, the first survivor to
    claim the count reads the answers and publishes in its stead (if it died too, each reads
    them itself). Requests per node: four (two to answer, the wait, the read); the counter's
    one per poll besides: O(nodes) in all."""

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

    def result(
        self, wait: float, sleep: Callable[[float], None] = time.sleep
    ) -> RollCallResult | None:
        """Everyone else's part: one request that the store answers when the counter
        publishes (or at `wait`), then, after a random part of `answer_spread` (every waiter
        hears at once: their reads are spread as their answers were), one read. Where the
        wait fails (the store does not answer), it is asked again every `rollcall_poll`
        until `wait` is over. Nothing here creates the result's key before the counter sets
        it (as `peek` would): the store wakes every waiter when a key is created."""
        deadline = time.monotonic() + wait
        while True:
            with contextlib.suppress(StoreDown):
                if not self.link.wait(self.keys.rollcall("result"), deadline - time.monotonic()):
                    return None  # the wait is over, the result unset
                sleep(random.uniform(0.0, answer_spread(self.nnodes)))
                if (result := self.poll()) is not None:  # the key is set: a read, no write
                    return result
            if time.monotonic() >= deadline:
                return None
            sleep(min(rollcall_poll(self.nnodes), max(deadline - time.monotonic(), 0.0)))

    def run(
        self,
        node: int,
        host: str,
        rank: int,
        wait: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> RollCallResult:
        """After a random part of `answer_spread` (the survivors' burst bounded at
        ANSWER_RATE), answer, then count (first to answer) or wait for the count; falls back
        to reading the answers when the counter never publishes.

        The survivors reach the roll call within `wait` of one another and answer within
        `answer_spread` of reaching it: the counter, the first to answer, counts until every
        node answered or both are over (past 24,000 nodes the spread alone is longer than
        ROLLCALL_WAIT: a counter that waited only that would name the late answerers
        lost)."""
        spread = answer_spread(self.nnodes)
        until = time.monotonic() + spread + wait
        sleep(random.uniform(0.0, spread))
        position = self.answer(node, host, rank, wait)
        if position == 1:
            return self.count(node, until - time.monotonic(), sleep)
        result = self.result(
            until - time.monotonic() + rollcall_poll(self.nnodes) + SLOW_CALL, sleep
        )
        if result is not None:
            return result
        # the counter died after answering (or no node holds position 1: an `add` that landed
        # but passed its deadline is retried, and counts again): one survivor, the first to
        # claim it, counts in its stead and publishes, so that the others read N answers
        # once between them, not N times each
        if self._stands_in(node):
            return self.count(node, 0.0, sleep)
        result = self.result(rollcall_poll(self.nnodes) + 2 * SLOW_CALL, sleep)
        return result if result is not None else self.counted(node)

    def _stands_in(self, node: int) -> bool:
        """Whether this node is the first to claim the count (one `compare_set`)."""
        claim = str(node).encode()
        try:
            return (
                bytes(self.link.call("compare_set", self.keys.rollcall("stand-in"), "", claim))
                == claim
            )
        except StoreDown:
            return False
