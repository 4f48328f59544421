"""The cross-node watch's store traffic grows with the nodes, not with their square: request
counts (never timings) from commbench's real control-plane classes against a real c10d
TCPStore, with simulated nodes. And the roll call names the lost nodes at 1,024 nodes."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch_distributed = pytest.importorskip("torch.distributed")

from commbench.launch import roll_call, store_link  # noqa: E402
from commbench.launch.aggregation import (  # noqa: E402
    GROUP_NODES,
    KEEPALIVE_INTERVALS,
    MAX_KEEPALIVE,
    ONE_TIER_NODES,
    STEADY_BUDGET,
    Aggregator,
    FleetAggregator,
    Follower,
    GroupAggregator,
    aggregation_requests,
    group_count,
    keepalive_intervals,
    node_silence_after,
    plan_interval,
    silence_after,
    steady_requests,
)
from commbench.launch.digest import NodeAgent  # noqa: E402
from commbench.launch.protocol import (  # noqa: E402
    PREFIX,
    GroupSummary,
    NodeDigest,
    RankState,
    RollCallResult,
    Skips,
)
from commbench.launch.roll_call import ROLLCALL_POLL, RollCall, rollcall_poll  # noqa: E402
from commbench.launch.store_link import Keys, StoreDown, StoreLink  # noqa: E402

RANKS_PER_NODE = 8


@pytest.fixture
def store() -> Iterator[object]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = torch_distributed.TCPStore(
        "127.0.0.1", port, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False
    )
    yield server
    del server


def _ranks(node: int, point: int) -> tuple[RankState, ...]:
    return tuple(
        RankState(rank=node * RANKS_PER_NODE + i, local_rank=i, node=node, host=f"n{node}",
                  pid=1000 + i, point=point, phase="timed", iteration=3)
        for i in range(RANKS_PER_NODE)
    )  # fmt: skip


def _interval_requests(store: object, nnodes: int, intervals: int = 3) -> tuple[int, int]:
    """Requests of the steady watch of `nnodes` simulated nodes: (first interval, each later
    one), counted by the StoreLinks every node's real classes go through."""
    keys = Keys(f"steady{nnodes}")
    links = [StoreLink(lambda: store) for _ in range(nnodes)]
    agents = [NodeAgent(links[n], keys, n, f"n{n}") for n in range(nnodes)]
    now = [0.0]
    interval = plan_interval(nnodes)
    aggregator = Aggregator(links[0], keys, nnodes, interval, clock=lambda: now[0])
    followers = [Follower(links[n], keys) for n in range(1, nnodes)]
    counts = []
    for step in range(intervals):
        before = sum(link.total_requests for link in links)
        for n, agent in enumerate(agents):
            agent.publish(_ranks(n, step))
        summary = aggregator.step()
        counts.append(sum(link.total_requests for link in links) - before)
        assert summary.reporting == nnodes and not summary.problems
        # a wake-up within the interval (a stalled node asking) reads no digest again
        before = links[0].total_requests
        assert aggregator.step() is summary and links[0].total_requests == before
        now[0] += interval
    # a follower reads only when asked: one request
    before = links[1].total_requests
    assert followers[0].read() is not None
    assert links[1].total_requests - before == 1
    return counts[0], counts[-1]


def test_steady_requests_grow_linearly_with_the_nodes(store: object) -> None:
    first8, steady8 = _interval_requests(store, 8)
    first64, steady64 = _interval_requests(store, 64)
    # one digest per node, the aggregator's multi_get and its summary
    assert steady8 == 8 + 2 and steady64 == 64 + 2 == 64 + aggregation_requests(64)
    assert steady64 <= 8.5 * steady8 and first64 <= 8.5 * first8
    # the launchers publish every KEEPALIVE_INTERVALS while their ranks' states hold
    assert steady_requests(64) == 64 / KEEPALIVE_INTERVALS + aggregation_requests(64)
    # and per second, held to the budget by the interval
    assert steady64 / plan_interval(64) <= 500
    assert steady_requests(1024) / plan_interval(1024) <= 500.001 < steady_requests(1024) / 0.5


def _stopped(ranks: tuple[RankState, ...], local_rank: int) -> tuple[RankState, ...]:
    return tuple(
        RankState(**{**r.payload(), "state": "stopped"}) if r.local_rank == local_rank else r
        for r in ranks
    )


@pytest.mark.integration  # past ONE_TIER_NODES: 2,000 nodes' traffic through a real store
def test_past_one_tier_the_groups_summaries_merge_into_the_same_fleet_summary(
    store: object,
) -> None:
    """Past ONE_TIER_NODES the first node of each group reads its 128 digests and the writer
    merges the groups' summaries: the fleet summary says what one aggregator reading every
    digest says (who is stopped, who is behind and how many, how far the furthest got), for
    2 G + 2 requests per interval beside the digests (G groups), and every later wake-up
    within the interval costs nothing."""
    nnodes = ONE_TIER_NODES + 2 * GROUP_NODES + 5  # a last group of 5
    keys = Keys("tiers")
    link = StoreLink(lambda: store)
    now = [0.0]
    interval = plan_interval(nnodes)
    groups = [
        GroupAggregator(link, keys, nnodes, interval, g, clock=lambda: now[0])
        for g in range(group_count(nnodes))
    ]
    top = FleetAggregator(link, keys, nnodes, interval, clock=lambda: now[0])
    flat = Aggregator(link, Keys("tiers"), nnodes, interval, clock=lambda: now[0])
    agents = [NodeAgent(link, keys, node, f"n{node}") for node in range(nnodes)]
    for step in range(2):
        before = link.total_requests
        for node, agent in enumerate(agents):
            ranks = _ranks(node, 7 + step - (node in (17, 2100)))  # two nodes one point behind
            agent.publish(_stopped(ranks, 3) if node in (600, 2200) else ranks)
        for group in groups:
            group.step()
        fleet = top.step()
        if step:  # the first interval also places every key once
            assert link.total_requests - before == nnodes + aggregation_requests(nnodes)
        before = link.total_requests
        assert top.step() is fleet and link.total_requests == before
        now[0] += interval
    expected = flat.step()
    assert [(r.rank, r.host, r.state) for r in fleet.problems] == [
        (600 * 8 + 3, "n600", "stopped"),
        (2200 * 8 + 3, "n2200", "stopped"),
    ]
    for name in ("reporting", "furthest", "problems", "silent_nodes", "behind", "behind_count"):
        assert getattr(fleet, name) == getattr(expected, name), name
    assert fleet.behind_count == 16 and {r.node for r in fleet.behind} == {17}


@pytest.mark.integration  # past ONE_TIER_NODES: 2,000 nodes' traffic through a real store
def test_a_group_whose_aggregator_stops_is_read_by_the_writer(store: object) -> None:
    """A group's aggregator (its first node's launcher) dies or freezes: its summary stops
    changing, and after the silence limit the writer reads that group's digests itself, so a
    rank stopped there is still named (and a value of another place, a newer commbench or
    too big under a group's key is skipped with one warning each, never taken for a group)."""
    nnodes = ONE_TIER_NODES + GROUP_NODES
    keys = Keys("orphan")
    link = StoreLink(lambda: store)
    now = [0.0]
    interval = plan_interval(nnodes)
    skips = Skips()
    groups = [
        GroupAggregator(link, keys, nnodes, interval, g, clock=lambda: now[0])
        for g in range(group_count(nnodes))
    ]
    top = FleetAggregator(link, keys, nnodes, interval, skips, clock=lambda: now[0])
    agents = [NodeAgent(link, keys, node, f"n{node}") for node in range(nnodes)]
    for step in range(6):
        for node, agent in enumerate(agents):
            ranks = _ranks(node, step)
            agent.publish(
                _stopped(ranks, 1) if step >= 3 and node == 5 * GROUP_NODES + 9 else ranks
            )
        for group in groups:
            if group.group != 5 or step < 2:  # group 5's aggregator stops after two steps
                group.step()
        if step == 2:  # values of other software under groups' keys
            wrong = GroupSummary(group=3, first=3 * GROUP_NODES, nnodes=128, seq=1, time=1.0,
                                 reporting=0, progress=0)  # fmt: skip
            store.set(keys.group(7), wrong.to_json())  # type: ignore[attr-defined]
            store.set(keys.group(8), b'{"type": "group", "version": 9}')  # type: ignore[attr-defined]
            store.set(keys.group(9), b"\x00" * (300 << 10))  # type: ignore[attr-defined]
        fleet = top.step()
        now[0] += interval
    assert 4 * interval > silence_after(interval)
    assert [(r.rank, r.state) for r in fleet.problems] == [
        ((5 * GROUP_NODES + 9) * 8 + 1, "stopped")
    ]
    assert fleet.reporting == nnodes and not fleet.silent_nodes
    reasons = sorted(w.split(" (")[1].split(")")[0] for w in skips.warnings)
    assert reasons == ["misplaced", "newer", "oversized"], skips.warnings


def test_a_launcher_publishes_on_a_change_and_else_every_other_interval(store: object) -> None:
    """A node's digest is its steady cost: its launcher sends it when a rank's state changed,
    otherwise once per keep-alive (`unless` seconds); positions alone wait for that."""
    link = StoreLink(lambda: store)
    agent = NodeAgent(link, Keys("keepalive"), 3, "n3")
    assert agent.publish(_ranks(3, 1), 100.0, unless=7.5)  # the first one
    assert not agent.publish(_ranks(3, 2), 105.0, unless=7.5)  # moved on: not yet
    assert agent.publish(_stopped(_ranks(3, 2), 4), 106.0, unless=float("inf"))  # one stopped
    assert not agent.publish(_stopped(_ranks(3, 2), 4), 107.0, unless=float("inf"))
    assert agent.publish(_stopped(_ranks(3, 3), 4), 113.6, unless=7.5)  # kept alive
    # one request a digest: the first a `set`, the others a `compare_set` the store answers
    assert link.requests == {"set": 1, "compare_set": 2} and agent.seq == 3
    raw = store.get(Keys("keepalive").digest(3))  # type: ignore[attr-defined]
    assert NodeDigest.from_json(raw).seq == 3  # the last one is there


def test_a_quiet_nodes_keepalive_grows_with_the_cluster_to_hold_the_steady_budget() -> None:
    """The interval's 5 s cap broke the budget at 16,384 nodes (8,450 requests an interval,
    1,690 a second); past ~5,000 nodes a quiet node keeps alive less often instead, and the
    sign that its launcher died waits as much longer."""
    for nnodes in (8, 64, 1024, 2048, 4096, 8192, 16384):
        assert steady_requests(nnodes) / plan_interval(nnodes) <= STEADY_BUDGET * 1.000001
    assert keepalive_intervals(1024) == keepalive_intervals(4096) == KEEPALIVE_INTERVALS
    assert keepalive_intervals(16384) == MAX_KEEPALIVE
    assert keepalive_intervals(10**6) == MAX_KEEPALIVE  # past ~20,000 nodes: over the budget
    interval = plan_interval(16384)
    assert node_silence_after(interval, MAX_KEEPALIVE) == (MAX_KEEPALIVE + 2) * interval


def test_a_node_keeps_alive_at_its_phase_of_the_period(store: object) -> None:
    """Nodes that start together keep alive spread over the period, not in one interval: a
    node at phase 0.75 sends its first keep-alive a quarter period after its first digest,
    then every period."""
    link = StoreLink(lambda: store)
    agent = NodeAgent(link, Keys("phase"), 3, "n3", phase=0.75)
    assert agent.publish(_ranks(3, 1), 100.0, unless=8.0)
    assert not agent.publish(_ranks(3, 2), 101.9, unless=8.0)
    assert agent.publish(_ranks(3, 3), 102.1, unless=8.0)  # 8 s early by three quarters
    assert not agent.publish(_ranks(3, 4), 110.0, unless=8.0)
    assert agent.publish(_ranks(3, 5), 110.2, unless=8.0)  # then a whole period on


def test_the_summary_names_a_stopped_rank_and_a_silent_node(store: object) -> None:
    keys = Keys("names")
    link = StoreLink(lambda: store)
    now = [100.0]
    aggregator = Aggregator(link, keys, 3, 0.5, clock=lambda: now[0], hosts={2: "n2"})
    stopped = tuple(
        r if r.local_rank != 5 else RankState(**{**r.payload(), "state": "stopped"})
        for r in _ranks(1, 4)
    )
    NodeAgent(link, keys, 0, "n0").publish(_ranks(0, 4))
    NodeAgent(link, keys, 1, "n1").publish(stopped)
    summary = aggregator.step()
    assert [(r.rank, r.host, r.state) for r in summary.problems] == [(13, "n1", "stopped")]
    assert not summary.silent_nodes  # node 2 not yet overdue
    now[0] += 30  # node 2 never published, nodes 0 and 1 stopped publishing
    summary = Follower(link, keys).read() if aggregator.step() else None
    assert summary is not None
    silent = {s.node: s for s in summary.silent_nodes}
    assert set(silent) == {0, 1, 2} and silent[2].never and silent[2].host == "n2"
    assert silent[1].ranks[5].state == "stopped"


def test_a_value_from_other_software_is_skipped_once_never_fatal(store: object) -> None:
    keys = Keys("hostile")
    link = StoreLink(lambda: store)
    skips = Skips()
    aggregator = Aggregator(link, keys, 4, 0.5, skips)
    NodeAgent(link, keys, 0, "n0").publish(_ranks(0, 1))
    store.set(keys.digest(1), b"\xff\xfe not json")  # type: ignore[attr-defined]
    store.set(keys.digest(2), b'{"type": "digest", "version": 7}')  # type: ignore[attr-defined]
    wrong = NodeDigest(node=0, host="liar", seq=1, time=1.0, ranks=())
    store.set(keys.digest(3), wrong.to_json())  # type: ignore[attr-defined]
    for _ in range(3):
        summary = aggregator.step()
    assert summary.reporting == 1
    reasons = sorted(w.split(" (")[1].split(")")[0] for w in skips.warnings)
    assert reasons == ["malformed", "misplaced", "newer"], skips.warnings
    assert all(k.startswith(PREFIX) for k in (keys.digest(0), keys.fleet))


def test_the_muster_costs_two_requests_a_node(store: object) -> None:
    """diagnose's sign-in: each node appends itself to the roll and reads node rank 0's
    result in one request that waits for it; node rank 0 reads the roll once per POLL and
    publishes who is missing. Nobody acknowledges the read (node rank 0's store stays up
    READ_WAIT in the background instead)."""
    import threading

    from commbench.diagnose.muster import POLL, MusterRoll

    nnodes, missing = 300, 123
    own = torch_distributed.TCPStore(  # node rank 0's: the others' reads block theirs
        "127.0.0.1",
        store.port,
        is_master=False,
        wait_for_workers=False,  # type: ignore[attr-defined]
    )
    links = [
        StoreLink(lambda n=n: own if n == 0 else store, slow_after=None) for n in range(nnodes)
    ]
    rolls = [MusterRoll(links[n], "muster-test", nnodes) for n in range(nnodes)]
    for n in range(nnodes):
        if n != missing:
            rolls[n].sign_in(n, f"n{n}")
    published: list[object] = []
    master = threading.Thread(target=lambda: published.append(rolls[0].publish(0.5)))
    master.start()
    try:
        results = [rolls[n].read() for n in range(1, nnodes) if n != missing]
    finally:
        master.join()
    assert all(r == published[0] for r in results)
    assert results[0] is not None and results[0].missing == (missing,)
    assert rolls[0].hosts[5] == "n5" and missing not in rolls[0].hosts
    assert {links[n].total_requests for n in range(1, nnodes) if n != missing} == {2}
    # its sign-in, a read of the roll at once and after each POLL of the wait, the result
    assert links[0].total_requests <= 1 + (1 + math.ceil(0.5 / POLL)) + 1


class SleeplessTime:
    """The `time` module as the roll call and its store link see it, where only a sleep moves the
    monotonic clock, and takes no time: the roll call's deadlines and polls run as they do,
    on a clock no slow store request or busy machine moves, and a wait for the lost costs
    the test nothing. The sleeps are kept."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return sum(self.slept)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.mark.parametrize("lost", [[], [7], [3, 512, 1023]])
def test_the_roll_call_names_the_lost_nodes_among_1024(
    store: object, lost: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,024 nodes through the real RollCall: every survivor answers once, the first counts
    one counter (not 1,024 keys), the others read its result; requests stay O(1) per node."""
    clock = SleeplessTime()
    monkeypatch.setattr(roll_call, "time", clock)
    monkeypatch.setattr(store_link, "time", clock)
    nnodes = 1024
    keys = Keys(f"roll{len(lost)}")
    link = StoreLink(lambda: store)
    survivors = [n for n in range(nnodes) if n not in lost]
    roll = RollCall(link, keys, nnodes)
    positions = [roll.answer(n, f"n{n}", n * RANKS_PER_NODE) for n in survivors]
    assert positions == list(range(1, len(survivors) + 1))
    before = link.total_requests
    wait = 0.6  # the counter waits the whole of it for the lost: two polls (ROLLCALL_POLL)
    result = roll.count(survivors[0], wait=wait if lost else 30, sleep=clock.sleep)
    assert result.lost == lost and result.counter == survivors[0]
    # polled at ROLLCALL_POLL until the wait was over; not at all once every node answered
    assert clock.slept == ([rollcall_poll(nnodes)] * 2 if lost else []), clock.slept
    counting = link.total_requests - before
    # one count per poll (ROLLCALL_POLL), one read of the answers, one set of the result
    assert counting <= (3 if not lost else wait / ROLLCALL_POLL + 4), counting
    for _ in survivors[1:4]:
        before = link.total_requests
        seen = RollCall(link, keys, nnodes).result(wait=1.0, sleep=clock.sleep)
        # one wait that the store answers at once (published), one read: no poll
        assert seen == result and link.total_requests - before == 2
    assert link.total_requests <= 2 * len(survivors) + counting + 6


def test_a_wait_is_one_request_and_ends_unset_with_the_link_up(store: object) -> None:
    """`StoreLink.wait`: True at once where the key is set; False when its seconds are over,
    and the link stays up (a wait that ends unset is no failure of the store): one request
    each, and the connection serves on."""
    from commbench.launch.store_link import tcp_store_factory

    link = StoreLink(tcp_store_factory("127.0.0.1", store.port))  # type: ignore[attr-defined]
    store.set("commbench/t/there", b"1")  # type: ignore[attr-defined]
    assert link.wait("commbench/t/there", 5.0) is True
    began = time.monotonic()
    assert link.wait("commbench/t/never", 0.2) is False
    assert 0.15 < time.monotonic() - began < 2.0
    assert link.degraded is None and link.requests == {"wait": 2}
    assert link.call("add", "commbench/t/n", 1) == 1
    link.close()


@pytest.mark.integration
def test_a_wait_ends_when_another_client_sets_its_key(store: object) -> None:
    """A wait longer than the client's own timeout (SLOW_CALL) ends when another client sets
    the key, not at the client's timeout, and not before."""
    import threading

    from commbench.launch.store_link import SLOW_CALL, tcp_store_factory

    link = StoreLink(tcp_store_factory("127.0.0.1", store.port))  # type: ignore[attr-defined]
    setter = threading.Timer(SLOW_CALL + 0.5, store.set, ("commbench/t/later", b"1"))  # type: ignore[attr-defined]
    setter.start()
    began = time.monotonic()
    try:
        assert link.wait("commbench/t/later", 10.0) is True
    finally:
        setter.join()
    assert SLOW_CALL + 0.4 < time.monotonic() - began < 5.0
    assert link.degraded is None
    link.close()


def _roll_calls(
    port: int, nnodes: int, lost: set[int], wait: float, keys: Keys
) -> tuple[dict[int, Any], dict[int, StoreLink]]:
    """Every surviving node's real `RollCall.run`, each on a thread of its own with its own
    link (opened first, as a worker does at its start): their results and links."""
    import threading

    from commbench.launch.store_link import tcp_store_factory

    links = {n: StoreLink(tcp_store_factory("127.0.0.1", port)) for n in range(nnodes)}
    for n in lost:
        del links[n]
    for link in links.values():
        link.call("check", ["commbench/t/open"])
    results: dict[int, Any] = {}

    def run(node: int) -> None:
        try:
            results[node] = RollCall(links[node], keys, nnodes).run(node, f"n{node}", node, wait)
        except Exception as exc:  # the assertion below names it
            results[node] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in links]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results, links


@pytest.mark.integration
def test_the_survivors_wait_for_the_result_and_never_poll(store: object) -> None:
    """Every survivor but the counter makes four requests, however long the counter waits
    for the lost node: its answer's two, one wait that the store answers when the result is
    published, one read. (Each polled once per rollcall_poll before: 2 + wait / 0.5.)"""
    for wait in (0.3, 1.5):
        keys = Keys(f"wait{wait}")
        results, links = _roll_calls(store.port, 12, {5}, wait, keys)  # type: ignore[attr-defined]
        assert {n: r.lost for n, r in results.items()} == {n: [5] for n in links}, results
        counter = next(iter(results.values())).counter
        made = {n: link.requests for n, link in links.items() if n != counter}
        assert all(m == {"check": 1, "append": 1, "add": 1, "wait": 1, "compare_set": 1}
                   for m in made.values()), made  # fmt: skip
        assert all(link.degraded is None for link in links.values())


@pytest.mark.integration
def test_the_counter_waits_for_answers_spread_past_its_wait(
    store: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The survivors answer over answer_spread(N), which past 24,000 nodes is longer than
    ROLLCALL_WAIT: the counter (the first to answer) counts until the spread and the wait
    are both over, and names only the lost node, not the survivors that answered late."""
    monkeypatch.setattr(roll_call, "ANSWER_RATE", 8.0)  # 8 nodes' answers over 1 s
    results, links = _roll_calls(store.port, 8, {2}, 0.3, Keys("spread"))  # type: ignore[attr-defined]
    assert {n: r.lost for n, r in results.items()} == {n: [2] for n in links}, results


@pytest.mark.integration
def test_a_survivor_whose_wait_fails_asks_again_and_never_creates_the_result(
    store: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A survivor's wait fails (its connection reset): it asks again once its link is back,
    and never creates the result's key meanwhile (a `peek` would, and the store wakes every
    other waiter when a key is created: they would all read a placeholder and poll)."""
    import threading

    from commbench.launch.store_link import tcp_store_factory

    monkeypatch.setattr(store_link, "RECONNECT_AFTER", 0.05)
    keys, failed = Keys("waitfails"), [False]
    connect = tcp_store_factory("127.0.0.1", store.port)  # type: ignore[attr-defined]

    class ResetOnce:  # its own connection, as a node's link has
        def __init__(self) -> None:
            self.client = connect()

        def __getattr__(self, name: str) -> object:
            if name == "wait" and not failed[0]:
                failed[0] = True
                raise RuntimeError("Connection reset by peer")
            return getattr(self.client, name)

    link = StoreLink(ResetOnce)
    key = keys.rollcall("result")
    published = RollCallResult(nnodes=4, missing=(3,), counter=0)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(RollCall(link, keys, 4).result(5.0)))
    waiter.start()
    time.sleep(0.6)
    assert failed[0] and not store.check([key])  # type: ignore[attr-defined]
    store.set(key, published.to_json())  # type: ignore[attr-defined]
    waiter.join(timeout=10)
    assert got == [published]


@pytest.mark.integration
def test_a_counter_that_never_publishes_is_stood_in_for_by_the_second(store: object) -> None:
    """The counter dies after answering: every other survivor's wait ends unset at the
    deadline, its link still up; one of them claims the count and publishes, and the other
    reads that result, not the N answers itself."""
    import threading

    from commbench.launch.store_link import tcp_store_factory

    nnodes, keys = 4, Keys("nocounter")
    links = [StoreLink(tcp_store_factory("127.0.0.1", store.port)) for _ in range(3)]  # type: ignore[attr-defined]
    RollCall(links[0], keys, nnodes).answer(0, "n0", 0)  # the counter, never to count
    results: dict[int, Any] = {}

    def run(node: int) -> None:
        results[node] = RollCall(links[node], keys, nnodes).run(node, f"n{node}", node, 0.3)

    began = time.monotonic()
    threads = [threading.Thread(target=run, args=(n,)) for n in (1, 2)]
    threads[0].start()
    while int(store.add(keys.rollcall("count"), 0)) < 2:  # type: ignore[attr-defined]
        time.sleep(0.01)  # node 1 answers second, node 2 third
    threads[1].start()
    for thread in threads:
        thread.join(timeout=30)
    assert results[1] == results[2] and results[1].lost == [3], results
    assert results[1].counter in (1, 2)
    # one stand-in read the answers and published; the other read its result
    assert sorted(link.requests.get("set", 0) for link in links[1:]) == [0, 1]
    assert time.monotonic() - began < 0.3 + 3 * ROLLCALL_POLL + 4.0
    assert all(link.degraded is None for link in links)


def test_a_lost_store_degrades_the_link_and_it_recovers(store: object) -> None:
    down = [True]

    class Flaky:
        def __getattr__(self, name: str) -> object:
            if down[0]:
                raise RuntimeError("Connection refused")
            return getattr(store, name)

    link = StoreLink(lambda: Flaky())
    with pytest.raises(StoreDown):
        link.call("set", "commbench/t/x", b"1")
    episode = link.degraded
    assert episode is not None and "Connection refused" in episode.reason
    with pytest.raises(StoreDown, match="reconnect"):  # no retry before RECONNECT_AFTER
        link.call("set", "commbench/t/x", b"1")
    down[0] = False
    link._retry_at = 0.0  # the back-off elapsed
    link.call("set", "commbench/t/x", b"1")
    assert link.degraded is None and link.episodes[0].until is not None


def test_the_summary_names_a_stopped_rank_among_1024_nodes(store: object) -> None:
    """At 1,024 nodes a stopped rank reaches the fleet summary by its node's digest and the
    aggregator's read: one problem, named by rank, host and phase (how soon every launcher
    knows, the loop itself measures: `test_every_node_names_a_stopped_rank_within_10_s`)."""
    nnodes = 1024
    keys = Keys("big")
    link = StoreLink(lambda: store)
    aggregator = Aggregator(link, keys, nnodes, plan_interval(nnodes))
    for node in range(nnodes):
        ranks = _ranks(node, 7)
        if node == 613:
            ranks = tuple(
                RankState(**{**r.payload(), "state": "stopped"}) if r.local_rank == 2 else r
                for r in ranks
            )
        NodeAgent(link, keys, node, f"n{node}").publish(ranks)
    aggregator.step()
    summary = Follower(link, keys).read()
    assert summary is not None and summary.reporting == nnodes
    (named,) = summary.problems
    assert (named.rank, named.host, named.phase) == (613 * RANKS_PER_NODE + 2, "n613", "timed")


BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "control_plane.py"


def _simulate(tmp_path: Path, *flags: str) -> dict[str, Any]:
    """benchmarks/control_plane.py's simulated cluster (its own processes: the store's, and
    the cluster's, whose thousands of connections need QUICK_DNS before c10d's first
    lookup), one part, its JSON."""
    out = tmp_path / f"sim{len(list(tmp_path.iterdir()))}.json"
    subprocess.run(
        [sys.executable, str(BENCHMARK), "--procs", "1", "--json", str(out), *flags],
        check=True,
        timeout=240,
        stdout=subprocess.DEVNULL,
    )
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.mark.integration
def test_every_node_names_a_stopped_rank_within_10_s(tmp_path: Path) -> None:
    """1,024 simulated nodes, each running its launcher's real loop (its Watch polled every
    0.1 s, every poll run; its ControlPlane stepped when its own pacing says; its own store
    connection): one rank's process gets SIGSTOP, its heartbeat stops, every other rank
    waits. Every node's launcher names it, by rank, host and phase, in its own account of
    the stall (`describe_hang`), within 10 s, measured on the clock those loops ran on
    (commbench.launch.simulate: simulated, so that 1,024 launchers' polls fit this machine;
    a store request takes none of it, ~0.1 ms in a run). The model says three intervals:
    6.2 s."""
    doc = _simulate(tmp_path, "--nodes", "1024", "--phases", "naming", "--every-poll")
    naming = doc["naming"]["1024"]
    assert len(naming["named"]) == 1024, sorted(set(map(str, range(1024))) - set(naming["named"]))
    worst = max(naming["named"].values())
    assert worst <= 10.0, worst
    rank, host = naming["rank"], naming["host"]
    assert naming["accounts"]
    for node, account in naming["accounts"].items():
        assert f"rank {rank} (host {host}, pid " in account, (node, account)
        assert "is stopped (SIGSTOP or a debugger)" in account and "phase timed" in account


@pytest.mark.integration
def test_the_simulation_leaves_out_only_polls_that_change_nothing(tmp_path: Path) -> None:
    """The benchmark runs a poll only where it can find something new (`Cluster._news`); run
    every poll instead and the store sees the same requests, and the stopped rank is named
    by every node at the same simulated moments."""
    flags = ("--nodes", "64", "--phases", "steady,naming,failure")
    every = _simulate(tmp_path, *flags, "--every-poll")
    some = _simulate(tmp_path, *flags)
    assert some["polls"]["64"] < every["polls"]["64"] / 2
    assert some["naming"]["64"]["named"] == every["naming"]["64"]["named"]
    # the simulated launchers' requests (the failure row adds the real roll calls')
    assert some["simulated"]["64"] == every["simulated"]["64"]


@pytest.mark.integration
def test_the_benchmark_measures_each_phase_as_the_store_feels_it(tmp_path: Path) -> None:
    """The benchmark's plumbing at 8 nodes: each phase's row has the store's CPU, connections
    included, and the probe's p50, p99 and max beside it; the workers' start opens one
    roll-call link per surviving node, the muster one connection per node; the failure
    phase's real roll calls (`RollCall.run` on those links) all name the lost node and add
    their requests to the launchers'."""
    doc = _simulate(tmp_path, "--nodes", "8")
    rows = {r["phase"]: r for r in doc["rows"]}
    assert set(rows) == {"probe alone", "steady", "start", "failure", "muster", "health gather"}
    alone = rows["probe alone"]  # what the probe costs the store, nobody else asking
    assert alone["requests"] == 0 and alone["store_cpu_s"] > 0 and alone["probes"] > 0, alone
    for phase in ("steady", "start", "failure", "muster"):
        row = rows[phase]
        assert "capacity_share" not in row
        # the phase's share leaves out the probe's, at the rate the store spent it alone,
        # over the phase's measurement (its window and lead), not the whole run
        alone_share = alone["store_cpu_s"] / alone["window_s"]
        assert 0 < row["probe_cpu_s"] <= alone_share * (row["window_s"] + 30), (row, alone)
        assert row["probes"] > 0, row
        assert row["probe_p50_ms"] <= row["probe_p99_ms"] <= row["probe_max_ms"], row
    assert (rows["start"]["connects"], rows["muster"]["connects"]) == (7, 8)
    assert rows["steady"]["connects"] == rows["failure"]["connects"] == 0
    assert doc["notes"] == []  # every roll call named node 7, no link failed to open
    assert rows["failure"]["requests"] > doc["simulated"]["8"]["failure"]


def test_a_stalled_launcher_asking_every_poll_wakes_the_watch_once_per_interval(
    tmp_path: object, store: object
) -> None:
    """The launcher polls every 0.1 s and, while its ranks stall, asks for the summary on each
    poll: a follower's control thread still steps at most twice per interval (its own step
    and one wake-up), not ten times (the real thread and its real wait, on the real store)."""
    import threading

    from commbench.launch.aggregation import MIN_INTERVAL
    from commbench.launch.plane import ControlPlane, JobView

    port = store.port  # type: ignore[attr-defined]
    view = JobView(host="127.0.0.1", port=port, node=1, nnodes=2, writer=False)
    plane = ControlPlane(tmp_path, find_view=lambda pids: view, beats=dict)  # type: ignore[arg-type]
    plane.start()
    try:
        began = time.monotonic()
        while time.monotonic() - began < 2 * MIN_INTERVAL:
            plane.want_summary()
            time.sleep(0.01)
        elapsed = time.monotonic() - began
    finally:
        plane.stop()
    assert not any(t.name == "commbench-control" for t in threading.enumerate())
    intervals = elapsed / MIN_INTERVAL
    assert 1 <= plane.steps <= 2 * (intervals + 1), (plane.steps, elapsed)


@pytest.mark.integration
def test_a_stopped_store_never_holds_a_request_past_its_deadline(
    stoppable_store: tuple[int, int],
) -> None:
    """The job's store SIGSTOPped (its host frozen): c10d's client waits on its socket with
    no deadline for a compare_set or a fresh connect; through a StoreLink each request gives
    up at SLOW_CALL, the link says the store is down, and it comes back once the store does.
    Timed with a clock, with a wide margin: before, the first request blocked for as long as
    the store was stopped."""
    import os
    import signal

    from commbench.launch.store_link import RECONNECT_AFTER, SLOW_CALL, tcp_store_factory

    port, pid = stoppable_store
    connected = StoreLink(tcp_store_factory("127.0.0.1", port))
    connected.call("set", "k", b"1")
    os.kill(pid, signal.SIGSTOP)
    began = time.monotonic()
    with pytest.raises(StoreDown):
        connected.call("compare_set", "k", "1", b"2")
    assert time.monotonic() - began < SLOW_CALL + 4
    assert connected.degraded is not None
    fresh = StoreLink(tcp_store_factory("127.0.0.1", port))
    began = time.monotonic()
    with pytest.raises(StoreDown):
        fresh.call("compare_set", "k", "", b"-")
    assert time.monotonic() - began < SLOW_CALL + 4
    os.kill(pid, signal.SIGCONT)
    time.sleep(RECONNECT_AFTER + 0.5)
    assert fresh.call("add", "n", 1) == 1 and fresh.degraded is None


@pytest.mark.integration
@pytest.mark.parametrize("users_level", [None, "INFO"])
def test_a_lost_store_prints_no_cpp_stack_in_the_launcher(users_level: str | None) -> None:
    """Issue 43, item 6: a launcher's store client whose store went away (the node that held
    it ended first) or cannot be reached logged each failure with libtorch's C++ stack on the
    user's stderr, whenever TORCH_CPP_LOG_LEVEL was the user's own or diagnose's muster had
    imported torch first. `store_class` is the one import of it, and holds the C++ log to
    FATAL whatever the user said; the user's level is back in the environment at once, for
    the workers it is meant for. The failures are still said, once, as commbench's own."""
    code = (
        "import os, socket\n"
        "from commbench.launch.store_link import StoreDown, StoreLink, tcp_store_factory\n"
        "from commbench.launch.store_link import store_class\n"
        "from datetime import timedelta\n"
        "tcp_store = store_class()\n"
        "print(os.environ.get('TORCH_CPP_LOG_LEVEL'))\n"
        "with socket.socket() as s:\n"
        "    s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
        "server = tcp_store('127.0.0.1', port, is_master=True, wait_for_workers=False,\n"
        "                   timeout=timedelta(seconds=5))\n"
        "link = StoreLink(tcp_store_factory('127.0.0.1', port))\n"
        "link.call('set', 'k', b'1')\n"
        "del server\n"
        "for op in range(3):\n"
        "    try:\n"
        "        link.call('compare_set', 'k', '', b'x')\n"
        "    except StoreDown:\n"
        "        pass\n"
        "print(link.degraded is not None)\n"
        "link.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
    if users_level is not None:
        env["TORCH_CPP_LOG_LEVEL"] = users_level
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(users_level), "True"], done.stdout
    assert "Exception raised from" not in done.stderr and "frame #" not in done.stderr, done.stderr
    assert not re.search(r"^\[[WEI]\d{4}", done.stderr, re.M), done.stderr
