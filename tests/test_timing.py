"""The CUDA timers against fakes of `torch.cuda` (no GPU here; the real timers run in
tests/test_gpu_timing.py, marked gpu):

- `FakeCuda` logs what is called: what runs eagerly before a graph capture, in which mode;
- `FakeGpu` has clocks: a host that takes time to issue each op and a device that runs what
  was queued in order, each item once the host has queued it and the one before is done.
  With it the pre-queue's logic (how long a hold, what a short one does, when the heartbeat
  ticks, where a hang shows) is checked against the device time each op really took.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from commbench import timing


class Hang(Exception):
    """Waiting on an event the fake GPU never completes."""


class FakeCuda:
    """Streams, events and graphs that log what happens; every event completes at once."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.current = SimpleNamespace(name="default", wait_stream=lambda other: None)
        self.capturing: str | None = None

    # -- the part of torch.cuda the timers use -------------------------------------------------
    def Stream(self) -> Any:
        s = SimpleNamespace(name="side")
        s.wait_stream = lambda other: None
        s.synchronize = lambda: self.log.append(("stream_sync", s.name))
        return s

    def current_stream(self) -> Any:
        return self.current

    @contextlib.contextmanager
    def stream(self, s: Any) -> Iterator[None]:
        before, self.current = self.current, s
        try:
            yield
        finally:
            self.current = before

    def CUDAGraph(self) -> Any:
        return SimpleNamespace(replay=lambda: self.op("replay"))

    @contextlib.contextmanager
    def graph(
        self, g: Any, stream: Any = None, capture_error_mode: str = "global"
    ) -> Iterator[None]:
        self.log.append(("capture_begin", stream.name if stream else None, capture_error_mode))
        self.capturing = capture_error_mode
        try:
            with self.stream(stream or self.current):
                yield
        finally:
            self.capturing = None
            self.log.append(("capture_end",))

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        return FakeEvent()

    # -- the fake GPU ------------------------------------------------------------------------
    def op(self, name: str = "call") -> None:
        self.log.append((name, self.current.name, self.capturing))


class FakeEvent:
    def record(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        return 1.0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install() -> FakeCuda:
        cuda = FakeCuda()
        monkeypatch.setattr(timing, "torch", SimpleNamespace(cuda=cuda))
        return cuda

    return install


# --- --graph ---------------------------------------------------------------------------------


@pytest.mark.parametrize("iters", [1, 5, 40])
def test_graph_runs_one_eager_call_on_the_side_stream_then_captures_thread_local(
    fake: Any, iters: int
) -> None:
    cuda = fake()
    timed, per_graph = timing.time_cuda_graph(cuda.op, iters, prequeue=None)
    begin = cuda.log.index(("capture_begin", "side", "thread_local"))
    end = cuda.log.index(("capture_end",))
    assert cuda.log[:begin].count(("call", "side", None)) >= 1  # eager, on the capture stream
    assert cuda.log[begin + 1 : end] == [("call", "side", "thread_local")] * per_graph
    assert all(entry[0] != "call" for entry in cuda.log[end:])  # then only replays
    assert len(timed.samples) >= 1 and per_graph == min(iters, timing.GRAPH_OPS)


# --- eager: the device's time behind a hold, the heartbeat following the GPU ------------------


class FakeGpu:
    """A host and a device with clocks (microseconds). The host takes `issue_us` to issue an
    op, `record_us` to record an event, `launch_us` to launch a hold's unit; the device runs
    each item once the host has queued it and the item before is done: an op for `device_us`,
    a unit of the hold (this is the `Hold` too) for `unit_us`, an event in no time. Op number
    `stuck` (counted from 0, the leads included) never completes."""

    def __init__(
        self,
        device_us: float,
        issue_us: float,
        record_us: float = 1.0,
        unit_us: float = 300.0,
        launch_us: float = 5.0,
        stuck: int | None = None,
    ) -> None:
        self.device_us, self.issue_us, self.record_us = device_us, issue_us, record_us
        self.unit_us, self.launch_us, self.stuck = unit_us, launch_us, stuck
        self.host = 0.0
        self.free = 0.0  # when the device is done with everything queued so far
        self.ops: list[tuple[float, float]] = []  # each op's start and end on the device

    def current_stream(self) -> None:
        return None

    def Event(self, enable_timing: bool = False) -> ClockEvent:
        return ClockEvent(self)

    def op(self) -> None:
        self.host += self.issue_us
        start = max(self.host, self.free)
        end = math.inf if len(self.ops) == self.stuck else start + self.device_us
        self.ops.append((start, end))
        self.free = end

    def run(self, units: int) -> None:  # the Hold
        for _ in range(units):
            self.host += self.launch_us
            self.free = max(self.host, self.free) + self.unit_us

    def ns(self) -> int:
        return round(self.host * 1000)


class ClockEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.at = math.nan

    def record(self, stream: Any = None) -> None:
        g = self.gpu
        g.host += g.record_us
        self.at = max(g.host, g.free)  # the device reaches it once what came before is done

    def query(self) -> bool:
        return self.at <= self.gpu.host

    def synchronize(self) -> None:
        if math.isinf(self.at):
            raise Hang
        self.gpu.host = max(self.gpu.host, self.at)

    def elapsed_time(self, end: ClockEvent) -> float:
        return (end.at - self.at) / 1e3  # milliseconds, as torch's


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(**kw: Any) -> FakeGpu:
        g = FakeGpu(**kw)
        monkeypatch.setattr(timing, "torch", SimpleNamespace(cuda=g))
        monkeypatch.setattr(timing, "_host_ns", g.ns)
        return g

    return install


def op_of(iteration: int) -> int:
    """The index among the fake's ops of timed iteration `iteration`: each batch's untimed
    lead comes first."""
    return iteration + iteration // timing.PREQUEUE_BATCH + 1


@pytest.mark.parametrize(
    ("device_us", "issue_us"),
    [(1.6, 27.0), (27.0, 27.0), (2000.0, 27.0), (1.6, 250.0)],
    ids=["host-bound", "even", "device-bound", "slow host"],
)
def test_behind_a_hold_each_sample_is_its_ops_device_time(
    gpu: Any, device_us: float, issue_us: float
) -> None:
    """The H100's case first: 27 us to issue an op that runs 1.6 us. Behind the hold every
    sample is the op's device time, whatever the host's pace; the host's pace is beside it."""
    g = gpu(device_us=device_us, issue_us=issue_us)
    timed = timing.time_cuda(g.op, 100, prequeue=timing.PreQueue(g))
    assert timed.samples == pytest.approx([device_us] * 100)
    assert (timed.batches, timed.uncovered) == (4, 0)  # 32 + 32 + 32 + 4
    assert timed.issue_us == pytest.approx(issue_us + 2 * g.record_us)
    assert len(g.ops) == 100 + 4  # and a lead a batch


def test_without_a_hold_a_small_ops_samples_are_the_hosts_pace(gpu: Any) -> None:
    """What the hold is for: the same host-bound op timed without it reads the host's time
    (the device waits for each op inside its event pair), 17 times its device time."""
    g = gpu(device_us=1.6, issue_us=27.0)
    timed = timing.time_cuda(g.op, 100, prequeue=None)
    assert min(timed.samples[1:]) >= 27.0 > 10 * 1.6
    assert timed.batches == 0


def test_a_hold_that_fell_short_is_counted_and_the_next_one_is_longer(gpu: Any) -> None:
    """A host far slower than assumed (1 ms an op against an estimate of 1 us): the first
    batch's hold ends while the host is still queueing it; that batch is counted (its row
    says so) and each next hold is longer, until one covers its batch; from there every
    sample is the device's time again."""
    g = gpu(device_us=5.0, issue_us=1000.0)
    prequeue = timing.PreQueue(g, enqueue_us=1.0)
    timed = timing.time_cuda(g.op, 6 * timing.PREQUEUE_BATCH, prequeue=prequeue)
    assert timed.batches == 6 and 1 <= timed.uncovered < 6
    last = timed.samples[-timing.PREQUEUE_BATCH :]
    assert last == pytest.approx([5.0] * timing.PREQUEUE_BATCH)
    assert timed.samples[0] > 5.0  # the first batch's did hold host time
    assert prequeue.enqueue_us == pytest.approx(1000.0 + 2 * g.record_us)  # learnt


def test_a_hold_covers_its_batch_with_a_margin() -> None:
    hold = SimpleNamespace(unit_us=300.0, run=lambda units: None)
    prequeue = timing.PreQueue(hold, enqueue_us=27.0)
    units = prequeue.units(timing.PREQUEUE_BATCH)
    covered = units * hold.unit_us
    assert covered >= (timing.PREQUEUE_BATCH + 1) * 27.0 * timing.PREQUEUE_MARGIN
    assert (units - 1) * hold.unit_us < covered <= 2 * (timing.PREQUEUE_BATCH + 1) * 27.0 + 600
    prequeue.learn(27.0, covered=False)
    assert prequeue.enqueue_us == 54.0  # doubled


@pytest.mark.parametrize("device_us", [1.6, 2000.0])
def test_each_iteration_ticks_once_and_only_after_the_previous_one_completed(
    gpu: Any, device_us: float
) -> None:
    g = gpu(device_us=device_us, issue_us=27.0)
    ticks: list[tuple[int, bool]] = []

    def tick(i: int) -> None:
        ticks.append((i, i == 0 or g.ops[op_of(i - 1)][1] <= g.host))

    timing.time_cuda(g.op, 70, tick, prequeue=timing.PreQueue(g))
    assert [i for i, _ in ticks] == list(range(70))
    assert all(done for _, done in ticks), ticks


def test_a_hang_is_reported_at_the_iteration_really_stuck(gpu: Any) -> None:
    # the host queues the whole batch long before the device gets to iteration 40, which hangs
    g = gpu(device_us=2000.0, issue_us=27.0, stuck=op_of(40))
    ticks: list[int] = []
    with pytest.raises(Hang):
        timing.time_cuda(g.op, 100, ticks.append, prequeue=timing.PreQueue(g))
    assert ticks[-1] == 40


def test_no_iterations_no_wait(gpu: Any) -> None:
    g = gpu(device_us=1.0, issue_us=1.0)
    timed = timing.time_cuda(g.op, 0, prequeue=timing.PreQueue(g))
    assert timed.samples == [] and math.isnan(timed.issue_us) and g.ops == []


def test_the_cpu_timer_reports_the_loops_issue_rate() -> None:
    timed = timing.time_cpu(lambda: None, 1000)
    assert len(timed.samples) == 1000 and timed.batches == 0
    assert timed.issue_us >= statistics.fmean(timed.samples)  # the loop holds the samples
    assert timed.issue_rate == pytest.approx(1e6 / timed.issue_us)


# --- the row: the host's issue rate beside the samples ---------------------------------------


def test_a_rows_issue_rate_goes_through_json_and_csv_and_older_rows_stay_as_they_were() -> None:
    from commbench.errors import UserError
    from commbench.results.csv_rows import csv_columns
    from commbench.results.exporters import Format, export
    from commbench.results.schema import ResultRow
    from tests.factories import make_row

    row = make_row(4096)
    row.issue_ops_per_s = 37000.5
    back = ResultRow.from_dict(json.loads(json.dumps(row.to_dict())))
    assert back.issue_ops_per_s == 37000.5
    old = make_row(4096)  # stored before the rate was kept, or imported
    assert "issue_ops_per_s" not in old.to_dict()
    assert (
        csv_columns([old]) == csv_columns([]) and csv_columns([old, row])[-1] == "issue_ops_per_s"
    )
    lines = export([old, row], Format.csv).splitlines()
    assert lines[0].endswith(",issue_ops_per_s") and lines[2].endswith(",37000.5")
    assert lines[1].endswith(",")  # the older row has none
    hostile = {**row.to_dict(), "issue_ops_per_s": -1.0}
    with pytest.raises(UserError, match="issue_ops_per_s"):
        ResultRow.from_dict(hostile)
