"""The cross-node watch on the real clock (issue 45): its real thread against a real c10d
TCPStore whose every request takes its time, where the simulated clock, which stands still
inside a step, never showed what the real one does."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch_distributed = pytest.importorskip("torch.distributed")

from commbench.launch.aggregation import (  # noqa: E402
    GROUP_NODES,
    ONE_TIER_NODES,
    group_count,
    plan_interval,
)
from commbench.launch.plane import ControlPlane, JobView  # noqa: E402

NNODES = 2
INTERVALS = 8


@contextlib.contextmanager
def _store_port() -> Iterator[int]:
    """A real c10d TCPStore of its own on a free port, for one case."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = torch_distributed.TCPStore(
        "127.0.0.1", port, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False
    )
    try:
        yield port
    finally:
        del server


class Slow:
    """A client of the real store whose every request first sleeps `delay` seconds: a store
    far away, or busy serving everyone else."""

    def __init__(self, client: Any, delay: float) -> None:
        self._client = client
        self._delay = delay

    def __getattr__(self, name: str) -> Callable[..., Any]:
        request = getattr(self._client, name)

        def slow(*args: Any) -> Any:
            time.sleep(self._delay)
            return request(*args)

        return slow


def _slow_factory(delay: float) -> Callable[[str, int], Callable[[], Any]]:
    def factory(host: str, port: int) -> Callable[[], Any]:
        def connect() -> Slow:
            client = torch_distributed.TCPStore(
                host, port, is_master=False, timeout=timedelta(seconds=1), wait_for_workers=False
            )
            return Slow(client, delay)

        return connect

    return factory


CASES = [(0, False), (2, False), (20, False), (20, True)]
"""(delay_ms, stalled): every request of the watch takes `delay_ms`; `stalled`, its launcher
asks for the summary on every poll."""


def _watch_on_the_real_clock(tmp_path: Path, delay_ms: int, stalled: bool) -> None:
    """One case of the test below, on its own store, plane and directory."""
    with _store_port() as store_port:
        view = JobView(host="127.0.0.1", port=store_port, node=0, nnodes=NNODES, writer=True)
        plane = ControlPlane(
            tmp_path,
            factory=_slow_factory(delay_ms / 1000),
            find_view=lambda pids: view,
            beats=dict,
        )
        plane.start()
        try:
            deadline = time.monotonic() + 60  # a generous bound on a loaded machine, never met
            while time.monotonic() < deadline:  # until its steps span INTERVALS intervals
                watched = plane.watched
                if watched and watched[1] - watched[0] >= (INTERVALS - 1) * plane.interval:
                    break
                if stalled:
                    plane.want_summary()
                time.sleep(0.1)
        finally:
            plane.stop()
        watch = plane.record()
    assert watch is not None and watch["interval_s"] == plan_interval(NNODES)
    intervals = watch["watched_s"] / watch["interval_s"] + 1  # the steps' span, both ends in
    assert intervals >= INTERVALS - 1, watch
    # one multi_get per read at NNODES nodes: the store's own count, beside the watch's
    reads = watch["requests_by_op"]["multi_get"]
    assert watch["reads"] == reads, watch
    assert reads >= 0.9 * intervals, watch
    assert watch["requests_by_op"]["set"] >= reads  # each read published its summary


def test_the_aggregator_reads_once_per_interval_on_the_real_clock(tmp_path: Path) -> None:
    """The writer's launcher's real watch thread, each of its requests taking `delay_ms`, for
    INTERVALS intervals (and, `stalled`, its launcher asking for the summary on every 0.1 s
    poll): its aggregator reads the digests in at least 0.9 of its intervals. Before, the
    skip test took the time after the step's own digest (a request on every
    KEEPALIVE_INTERVALS-th step only), so the step after one that published came within the
    interval of its read and returned the last summary: 66 reads in 131 intervals of a real
    run, 4 in 8 here; and a wake-up, too soon to read, put off the next read.

    The CASES run at once, each in a thread of its own with its own store, plane and
    directory: each spends INTERVALS intervals of the real clock asleep (3.5 s), so one
    after the other they held a worker of the fast lane 14 s, together 3.6 s. Each case's
    failure is reported under its name; no control thread outlives the planes' stops."""
    failures: dict[tuple[int, bool], BaseException] = {}

    def run(case: tuple[int, bool]) -> None:
        directory = tmp_path / f"{case[0]}ms-{'stalled' if case[1] else 'polled'}"
        directory.mkdir()
        try:
            _watch_on_the_real_clock(directory, *case)
        except BaseException as exc:  # reported under its case below
            failures[case] = exc

    threads = [threading.Thread(target=run, args=(case,)) for case in CASES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not any(t.name == "commbench-control" for t in threading.enumerate())
    if failures:
        pytest.fail(
            "\n\n".join(
                f"case delay_ms={delay_ms}, stalled={stalled}:\n"
                + "".join(traceback.format_exception(exc))
                for (delay_ms, stalled), exc in failures.items()
            ),
            pytrace=False,
        )


TIERED = ONE_TIER_NODES + 1
"""Past one tier: 17 groups of up to GROUP_NODES nodes (the last holds one), an interval of
2.1 s."""
TIERED_DELAYS = (0, 2, 20)


def _tiers_on_the_real_clock(tmp_path: Path, delay_ms: int) -> dict[str, Any]:
    """The launchers that aggregate at TIERED nodes, each its real watch thread on the real
    clock against one real store: every group's first node (its `GroupAggregator`), node 0
    the writer besides (its `FleetAggregator`), whose every request takes `delay_ms`. The
    other nodes never publish (their digests are placeholders). The writer's record."""
    with _store_port() as port:
        planes = []
        for group in range(group_count(TIERED)):
            node = group * GROUP_NODES
            view = JobView(host="127.0.0.1", port=port, node=node, nnodes=TIERED, writer=node == 0)
            planes.append(
                ControlPlane(
                    tmp_path,
                    factory=_slow_factory(delay_ms / 1000 if node == 0 else 0.0),
                    find_view=lambda pids, view=view: view,
                    beats=dict,
                )
            )
        writer = planes[0]
        for plane in planes:
            plane.start()
        try:
            deadline = time.monotonic() + 120  # a generous bound on a loaded machine
            while time.monotonic() < deadline:  # until its steps span INTERVALS intervals
                watched = writer.watched
                if watched and watched[1] - watched[0] >= (INTERVALS - 1) * writer.interval:
                    break
                time.sleep(0.1)
        finally:
            for plane in planes:
                plane.stop()
        watch = writer.record()
    assert watch is not None
    return watch


@pytest.mark.integration
@pytest.mark.parametrize("delay_ms", TIERED_DELAYS)
def test_each_tier_reads_once_per_interval_on_the_real_clock(tmp_path: Path, delay_ms: int) -> None:
    """Past ONE_TIER_NODES, on the real clock: the writer's launcher steps both tiers, its
    group's aggregator (the digests of its group) and the fleet's (the groups' summaries),
    each of its requests taking `delay_ms`, beside the other groups' aggregators; each tier
    reads in at least 0.9 of its intervals, as the single tier does above (issue 45: a
    skip test that took the time after the step's own requests read in half). One delay at
    a time: three stores' 51 watch threads at once, beside the lane's own load, took a
    first request past SLOW_CALL here."""
    watch = _tiers_on_the_real_clock(tmp_path, delay_ms)
    assert watch["interval_s"] == plan_interval(TIERED) and watch["group"] == 0, watch
    intervals = watch["watched_s"] / watch["interval_s"] + 1
    assert intervals >= INTERVALS - 1, watch
    assert watch["group_reads"] >= 0.9 * intervals, watch
    assert watch["reads"] >= 0.9 * intervals, watch
    # each read of each tier is one multi_get (its group's 128 digests; the 17 groups'
    # summaries) and publishes its summary
    assert watch["requests_by_op"]["multi_get"] >= watch["reads"] + watch["group_reads"], watch
    assert watch["requests_by_op"]["set"] >= watch["reads"] + watch["group_reads"], watch
    assert not any(t.name == "commbench-control" for t in threading.enumerate())


STOPPED_S = 4.0
"""Past SLOW_CALL and a keep-alive's period at the shortest interval (2 x 0.5 s)."""


@pytest.mark.integration
def test_a_follower_whose_ranks_never_stall_records_a_stopped_store(
    tmp_path: Path, stoppable_store: tuple[int, int]
) -> None:
    """A follower's real watch thread, its ranks never stalled so it only publishes its
    digest: with the store stopped for STOPPED_S, its record says the watch was degraded,
    and until when. Before, its digest was a `set`, which c10d's client sends without
    waiting for an answer: 7 of 8 run.json files of a real run never said the store
    stopped (issue 45)."""
    port, pid = stoppable_store
    view = JobView(host="127.0.0.1", port=port, node=1, nnodes=NNODES, writer=False)
    plane = ControlPlane(tmp_path, find_view=lambda pids: view, beats=dict)
    plane.start()
    try:
        deadline = time.monotonic() + 60
        while plane.steps < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert plane.link is not None and plane.link.total_requests > 0  # it worked before
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(STOPPED_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        # it reconnects after RECONNECT_AFTER, at its next keep-alive
        while plane.link.degraded is None and time.monotonic() < deadline:
            time.sleep(0.05)
        while plane.link.degraded is not None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        plane.stop()
    watch = plane.record()
    assert watch is not None and not watch["aggregator"], watch
    assert set(watch["requests_by_op"]) <= {"set", "compare_set"}, watch  # never a read
    assert len(watch["degraded"]) == 1, watch
    episode = watch["degraded"][0]
    assert episode["until"] is not None and episode["until"] > episode["since"], episode
