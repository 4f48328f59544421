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
    a unit of the hold (this is the `Hold` too, whose calibration says `unit_us`) for
    `real_unit_us` (`unit_us` unless given), an event in no time. Op number `stuck` (counted
    from 0, the leads included) never completes; `syncs`: each op returns only once the device
    has run it (NCCL's barrier). What the host did is logged in `log` ('hold', 'op')."""

    def __init__(
        self,
        device_us: float,
        issue_us: float,
        record_us: float = 1.0,
        unit_us: float = 300.0,
        launch_us: float = 5.0,
        stuck: int | None = None,
        real_unit_us: float | None = None,
        syncs: bool = False,
    ) -> None:
        self.device_us, self.issue_us, self.record_us = device_us, issue_us, record_us
        self.unit_us, self.launch_us, self.stuck = unit_us, launch_us, stuck
        self.real_unit_us = unit_us if real_unit_us is None else real_unit_us
        self.syncs = syncs
        self.host = 0.0
        self.free = 0.0  # when the device is done with everything queued so far
        self.ops: list[tuple[float, float]] = []  # each op's start and end on the device
        self.log: list[str] = []
        self.capturing = False
        self.captured = 0

    def current_stream(self) -> Any:
        return SimpleNamespace(wait_stream=lambda other: None)

    def Event(self, enable_timing: bool = False) -> ClockEvent:
        return ClockEvent(self)

    def op(self, ops: int = 1) -> None:
        if self.capturing:
            self.captured += 1
            return
        self.log.append("op")
        self.host += self.issue_us
        start = max(self.host, self.free)
        end = math.inf if len(self.ops) == self.stuck else start + ops * self.device_us
        self.ops.append((start, end))
        self.free = end
        if self.syncs:
            self.host = max(self.host, end)

    def run(self, units: int) -> None:  # the Hold
        self.log.append("hold")
        for _ in range(units):
            self.host += self.launch_us
            self.free = max(self.host, self.free) + self.real_unit_us

    # -- a CUDA graph: the ops captured run as one item a replay, launched as one op ------------
    def Stream(self) -> Any:
        return SimpleNamespace(wait_stream=lambda other: None, synchronize=lambda: None)

    @contextlib.contextmanager
    def stream(self, s: Any) -> Iterator[None]:
        yield

    def CUDAGraph(self) -> Any:
        return SimpleNamespace(replay=lambda: self.op(self.captured))

    @contextlib.contextmanager
    def graph(self, g: Any, stream: Any = None, capture_error_mode: str = "") -> Iterator[None]:
        self.capturing = True
        try:
            yield
        finally:
            self.capturing = False

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
    # never past CUDA's launch queue, however slow the host
    prequeue.learn(1e9, covered=False)
    assert prequeue.enqueue_us == timing.MAX_ENQUEUE_US
    assert prequeue.units(timing.PREQUEUE_BATCH) == timing.MAX_HOLD_UNITS


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


def test_a_hold_measured_short_of_its_calibration_is_corrected_at_once(gpu: Any) -> None:
    """The hold was calibrated at 600 us a unit (a GPU at idle clocks, a TF32 setting changed
    since) and runs in 300: each hold plans from the device's own time of the last one, so at
    most the first batch is short."""
    g = gpu(device_us=1.6, issue_us=27.0, unit_us=600.0, real_unit_us=300.0)
    prequeue = timing.PreQueue(g, enqueue_us=27.0)
    timed = timing.time_cuda(g.op, 20 * timing.PREQUEUE_BATCH, prequeue=prequeue)
    assert timed.uncovered <= 1 and timed.batches == 20
    assert prequeue.unit_us == pytest.approx(300.0, rel=0.01)  # and a launch before the first
    assert timed.samples[timing.PREQUEUE_BATCH :] == pytest.approx(
        [1.6] * 19 * timing.PREQUEUE_BATCH
    )


def test_an_op_that_makes_the_host_wait_keeps_its_holds_bounded(gpu: Any) -> None:
    """An op whose call returns only once the device ran it (NCCL's barrier) can never be
    queued ahead: every batch is counted as behind, and the holds stay bounded (before, each
    doubled the last: a 40 s hold after 12 batches)."""
    g = gpu(device_us=20.0, issue_us=10.0, syncs=True)
    prequeue = timing.PreQueue(g)
    timed = timing.time_cuda(g.op, 30 * timing.PREQUEUE_BATCH, prequeue=prequeue)
    assert timed.uncovered == timed.batches == 30
    assert prequeue.enqueue_us <= timing.MAX_ENQUEUE_US
    assert prequeue.units(timing.PREQUEUE_BATCH) <= timing.MAX_HOLD_UNITS
    assert g.host < 30 * timing.MAX_HOLD_UNITS * g.unit_us + 1e6  # bounded, not 10**11 us


def test_the_lead_runs_once_a_batch_between_its_hold_and_its_ops(gpu: Any) -> None:
    g = gpu(device_us=1.6, issue_us=27.0)
    leads: list[int] = []

    def lead() -> None:
        leads.append(len(g.log))
        g.log.append("lead")
        g.op()

    timing.time_cuda(g.op, 3 * timing.PREQUEUE_BATCH, prequeue=timing.PreQueue(g), lead=lead)
    assert len(leads) == 3
    assert all(g.log[i - 1] == "hold" and g.log[i + 2] == "op" for i in leads), g.log[:40]


def test_graph_replays_are_timed_behind_the_holds_per_op(gpu: Any) -> None:
    """Ten small ops a replay, a replay's launch slower than the ten on the device: behind the
    holds each sample is an op's device time; the issue time is the launch's, per op."""
    g = gpu(device_us=1.6, issue_us=27.0)
    timed, per_graph = timing.time_cuda_graph(g.op, 200, prequeue=timing.PreQueue(g))
    assert per_graph == timing.GRAPH_OPS
    assert timed.samples == pytest.approx([1.6] * 20) and timed.uncovered == 0
    assert timed.issue_us == pytest.approx((27.0 + 2 * g.record_us) / per_graph)


def test_ops_that_make_the_host_wait_are_named() -> None:
    assert "barrier" in timing.host_waits("barrier", "nccl")
    assert timing.host_waits("all_reduce", "nccl") == ""
    assert timing.host_waits("barrier", "gloo") == ""


def test_the_host_falling_behind_is_said_in_the_row_s_note() -> None:
    from commbench.launch.worker import Exchanged

    behind = Exchanged(samples=[], failed=[], issue_rate=None, uncovered=3, batches=7)
    assert behind.behind == (
        "the host fell behind the device in 3 of 7 batches (their samples may hold host time)"
    )
    assert Exchanged(samples=[], failed=[], issue_rate=None, uncovered=0, batches=7).behind == ""
