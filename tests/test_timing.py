"""The CUDA timers' call order, against a fake `torch.cuda` that records what is called.

No GPU here: these are unit tests of order only (what runs eagerly before a graph capture,
in which capture mode; when the heartbeat ticks relative to the GPU's progress). The real
timers run in tests/test_gpu_timing.py, marked gpu.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from commbench import timing


class Hang(Exception):
    """Waiting on an event the fake GPU never completes."""


class FakeCuda:
    """Streams, events and graphs that log what happens, and a GPU that runs `lag` events
    behind the host: an event completes once `lag` later ones are recorded, or when waited
    on; the end event of iteration `stuck` (and everything after it) never completes."""

    def __init__(self, lag: int = 0, stuck: int | None = None) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.current = SimpleNamespace(name="default", wait_stream=lambda other: None)
        self.capturing: str | None = None
        self.lag = lag
        # time_cuda records iteration k's start as event 2k and its end as 2k+1
        self.stuck_seq = 2 * stuck + 1 if stuck is not None else None
        self.recorded = 0
        self.done = 0  # events completed, in order

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
        return FakeEvent(self)

    # -- the fake GPU ------------------------------------------------------------------------
    def op(self, name: str = "call") -> None:
        self.log.append((name, self.current.name, self.capturing))

    def limit(self, seq: int) -> int:
        return seq if self.stuck_seq is None else min(seq, self.stuck_seq)


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.seq = -1

    def record(self, stream: Any) -> None:
        c = self.cuda
        self.seq, c.recorded = c.recorded, c.recorded + 1
        c.done = max(c.done, c.limit(c.recorded - c.lag))

    def query(self) -> bool:
        return 0 <= self.seq < self.cuda.done

    def synchronize(self) -> None:
        c = self.cuda
        if c.limit(self.seq + 1) <= self.seq:
            raise Hang
        c.done = max(c.done, self.seq + 1)

    def elapsed_time(self, end: FakeEvent) -> float:
        return 1.0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(**kw: Any) -> FakeCuda:
        cuda = FakeCuda(**kw)
        monkeypatch.setattr(timing, "torch", SimpleNamespace(cuda=cuda))
        return cuda

    return install


# --- --graph ---------------------------------------------------------------------------------


@pytest.mark.parametrize("iters", [1, 5, 40])
def test_graph_runs_one_eager_call_on_the_side_stream_then_captures_thread_local(
    fake: Any, iters: int
) -> None:
    cuda = fake()
    samples, per_graph = timing.time_cuda_graph(cuda.op, iters)
    begin = cuda.log.index(("capture_begin", "side", "thread_local"))
    end = cuda.log.index(("capture_end",))
    assert cuda.log[:begin].count(("call", "side", None)) >= 1  # eager, on the capture stream
    assert cuda.log[begin + 1 : end] == [("call", "side", "thread_local")] * per_graph
    assert all(entry[0] != "call" for entry in cuda.log[end:])  # then only replays
    assert len(samples) >= 1 and per_graph == min(iters, timing.GRAPH_OPS)


# --- the heartbeat follows the GPU, not the enqueue ----------------------------------------------


def ticks_of(cuda: FakeCuda, iters: int) -> list[tuple[int, int]]:
    """time_cuda's ticks, each with how many iterations had completed when it came."""
    ticks: list[tuple[int, int]] = []
    timing.time_cuda(cuda.op, iters, lambda i: ticks.append((i, cuda.done // 2)))
    return ticks


@pytest.mark.parametrize("lag", [0, 1, 6, 1000])
def test_each_iteration_ticks_once_and_only_after_the_previous_one_completed(
    fake: Any, lag: int
) -> None:
    ticks = ticks_of(fake(lag=lag), 10)
    assert [i for i, _ in ticks] == list(range(10))
    assert all(completed >= i for i, completed in ticks), ticks


def test_a_hang_is_reported_at_the_iteration_really_stuck(fake: Any) -> None:
    # the host enqueues all 10 iterations long before the GPU gets to the 6th, which hangs
    cuda = fake(lag=1000, stuck=5)
    ticks: list[int] = []
    with pytest.raises(Hang):
        timing.time_cuda(cuda.op, 10, ticks.append)
    assert ticks[-1] == 5


def test_no_iterations_no_wait(fake: Any) -> None:
    assert timing.time_cuda(fake().op, 0) == []
