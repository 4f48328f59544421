"""Timing real copies with torch: streams, the start gate, CUDA events, warm-up, verification.

Each copy of a step runs on its own stream, created on the GPU that drives it (the source, or
the GPU end of a host copy), as `dst.copy_(src, non_blocking=True)` inside
`torch.cuda.stream(s)`: torch runs a cross-device copy on the source device's current
stream. For a step of several copies, a gate stream spins for about a millisecond and then
records an event; every copy stream waits on that event before recording its start event, so
all copies are enqueued before any starts and they start together. Each copy is timed by a
pair of events on the stream that runs it. Every round ends with a synchronisation of the
GPUs involved, so rounds never overlap; the total of a round is its slowest copy.

Buffers are allocated once per (endpoint, size) and reused: sources hold a known pattern
(i mod 251 in the element type), destinations are per endpoint and slot. Host buffers are
pinned. The warm-up rounds come first (torch enables peer access on the first copy). After
timing, destinations are zeroed, one more round runs, and every destination is compared with
the pattern, chunk by chunk.

The backend (streams, events, allocation) is swappable: `CudaBackend` is the real one;
`CpuBackend` runs the same loop on CPU tensors so the logic is tested without a GPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from commbench.p2p.plan import Copy, Step, no_gpu
from commbench.p2p.settings import DEFAULT_ITERS, MAX_ITERS, MIN_ITERS

PATTERN_MOD = 251
VERIFY_CHUNK = 1 << 24
# Cycles the gate stream spins before it opens: about 1 ms at 1.5-2 GHz, longer than the host
# takes to enqueue the copies of a fan-out, so none of them starts before the others.
GATE_SPIN_CYCLES = 2_000_000
# Buffers this small (latency copies) are kept for the whole run.
SMALL_BUFFER = 1 << 20


def element_type(size_bytes: int) -> tuple[torch.dtype, str, int]:
    """(dtype, name, element count) for a copy of `size_bytes`: float32 when it divides."""
    if size_bytes % 4 == 0:
        return torch.float32, "float32", size_bytes // 4
    return torch.uint8, "uint8", size_bytes


def pattern(start: int, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Elements start..start+count-1 of the pattern i mod 251 (exact in every dtype used)."""
    index = torch.arange(start, start + count, dtype=torch.int64, device=device)
    return (index % PATTERN_MOD).to(dtype)


def fill_pattern(t: torch.Tensor) -> None:
    n = t.numel()
    for off in range(0, n, VERIFY_CHUNK):
        k = min(VERIFY_CHUNK, n - off)
        t[off : off + k].copy_(pattern(off, k, t.dtype, t.device))


def holds_pattern(t: torch.Tensor) -> bool:
    n = t.numel()
    for off in range(0, n, VERIFY_CHUNK):
        k = min(VERIFY_CHUNK, n - off)
        if not torch.equal(t[off : off + k], pattern(off, k, t.dtype, t.device)):
            return False
    return True


# --- backends ----------------------------------------------------------------------------------


class CudaBackend:
    """Streams, events and buffers on this process's CUDA devices."""

    name = "cuda"

    def __init__(self) -> None:
        if not torch.cuda.is_available():
            raise no_gpu()
        self.device_count = torch.cuda.device_count()
        if self.device_count < 1:
            raise no_gpu()
        self._streams: dict[tuple[int, object], torch.cuda.Stream] = {}

    def device_names(self) -> list[str]:
        return [torch.cuda.get_device_name(i) for i in range(self.device_count)]

    def memory(self, devices: list[int]) -> dict[int, tuple[int, int]]:
        return {d: torch.cuda.mem_get_info(d) for d in devices if 0 <= d < self.device_count}

    def context(self) -> dict[str, Any]:
        return {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "device": "cuda",
            "device_names": self.device_names(),
            "device_count": self.device_count,
        }

    def empty(self, endpoint: int | None, numel: int, dtype: torch.dtype) -> torch.Tensor:
        if endpoint is None:
            return torch.empty(numel, dtype=dtype, pin_memory=True)
        return torch.empty(numel, dtype=dtype, device=torch.device("cuda", endpoint))

    def stream(self, device: int, slot: object) -> Any:
        key = (device, slot)
        if key not in self._streams:
            self._streams[key] = torch.cuda.Stream(device=device)
        return self._streams[key]

    def timer(self) -> Any:
        return torch.cuda.Event(enable_timing=True)

    def open_gate(self, device: int) -> Any:
        stream = self.stream(device, "gate")
        gate = torch.cuda.Event()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(GATE_SPIN_CYCLES)
            gate.record(stream)
        return gate

    def wait(self, stream: Any, gate: Any) -> None:
        stream.wait_event(gate)

    def record(self, timer: Any, stream: Any) -> None:
        timer.record(stream)

    def copy(self, stream: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
        if dst.is_cuda and src.is_cuda and dst.device != src.device:
            # torch orders a cross-device copy after the destination's *current* stream and
            # makes that stream wait for the copy: with the default stream there, copies into
            # one GPU (bidirectional, a matrix column) would queue behind each other. A stream
            # of this lane's own on the destination keeps them independent.
            dst_stream = self.stream(dst.device.index, ("dst", id(stream)))
            with torch.cuda.stream(stream), torch.cuda.stream(dst_stream):
                dst.copy_(src, non_blocking=True)
            return
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)

    def sync(self, devices: list[int]) -> None:
        for d in devices:
            torch.cuda.synchronize(d)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def release(self) -> None:
        torch.cuda.empty_cache()


@dataclass(slots=True)
class _CpuTimer:
    t: float = 0.0


class CpuBackend:
    """The same loop on CPU tensors, one copy after another: for tests without a GPU.

    `device_count` pretends to be that many GPUs; `copy_fn` replaces the copy (a test can
    corrupt the data to see verification fail).
    """

    name = "cpu"

    def __init__(
        self,
        device_count: int = 2,
        copy_fn: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
        memory: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        self.device_count = device_count
        self.copy_fn = copy_fn
        self.gates = 0
        self._memory = memory or {}
        """(free, total) the pretend GPUs report; unknown (no preflight) by default."""

    def device_names(self) -> list[str]:
        return ["cpu"] * self.device_count

    def memory(self, devices: list[int]) -> dict[int, tuple[int, int]]:
        return {d: m for d, m in self._memory.items() if d in devices}

    def context(self) -> dict[str, Any]:
        return {"torch": torch.__version__, "device": "cpu", "device_count": self.device_count}

    def empty(self, endpoint: int | None, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype)

    def stream(self, device: int, slot: object) -> Any:
        return (device, slot)

    def timer(self) -> Any:
        return _CpuTimer()

    def open_gate(self, device: int) -> Any:
        self.gates += 1
        return device

    def wait(self, stream: Any, gate: Any) -> None:
        pass

    def record(self, timer: Any, stream: Any) -> None:
        timer.t = time.perf_counter()

    def copy(self, stream: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
        if self.copy_fn is not None:
            self.copy_fn(dst, src)
        else:
            dst.copy_(src)

    def sync(self, devices: list[int]) -> None:
        pass

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return max((end.t - start.t) * 1e3, 1e-6)

    def release(self) -> None:
        pass


# --- buffers and timing -------------------------------------------------------------------------


class Buffers:
    """Pre-allocated tensors: a patterned source per (endpoint, size), destinations per slot."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self._sources: dict[tuple[int | None, int], torch.Tensor] = {}
        self._dests: dict[tuple[int | None, int, int], torch.Tensor] = {}

    def source(self, endpoint: int | None, size: int) -> torch.Tensor:
        key = (endpoint, size)
        if key not in self._sources:
            dtype, _, numel = element_type(size)
            t = self.backend.empty(endpoint, numel, dtype)
            fill_pattern(t)
            if endpoint is not None:  # the fill ran on the default stream; copies use others
                self.backend.sync([endpoint])
            self._sources[key] = t
        return self._sources[key]

    def dest(self, endpoint: int | None, size: int, slot: int) -> torch.Tensor:
        key = (endpoint, size, slot)
        if key not in self._dests:
            dtype, _, numel = element_type(size)
            self._dests[key] = self.backend.empty(endpoint, numel, dtype)
        return self._dests[key]

    def keep_only(self, size: int | None) -> None:
        """Free the large buffers of every other size (`size` is about to be measured)."""

        def keep(s: int) -> bool:
            return s == size or s <= SMALL_BUFFER

        before = len(self._sources) + len(self._dests)
        self._sources = {k: v for k, v in self._sources.items() if size is not None and keep(k[1])}
        self._dests = {k: v for k, v in self._dests.items() if size is not None and keep(k[1])}
        if len(self._sources) + len(self._dests) < before:
            self.backend.release()


@dataclass(slots=True)
class _Lane:
    copy: Copy
    src: torch.Tensor
    dst: torch.Tensor
    stream: Any


@dataclass(kw_only=True, slots=True)
class StepTiming:
    """What timing one step produced."""

    samples_ms: list[list[float]]
    """Per copy, per timed round."""
    total_ms: list[float]
    """Per timed round: the slowest copy (they start together)."""
    checks: list[bool | None]
    """Per copy: the data arrived intact (None: not checked)."""
    warmup: int
    dtype: str
    iters: int = 0
    notes: list[str] = field(default_factory=list)


def _iterations(step: Step, iters: int | None, min_time: float | None, per_round: float) -> int:
    if iters is not None:
        return iters
    if min_time is None:
        return DEFAULT_ITERS[step.test]
    if per_round <= 0:
        return MAX_ITERS
    return max(MIN_ITERS, min(MAX_ITERS, math.ceil(min_time / per_round)))


def time_step(
    step: Step,
    backend: Any,
    buffers: Buffers,
    *,
    warmup: int,
    iters: int | None = None,
    min_time: float | None = None,
    check: bool = True,
) -> StepTiming:
    """Warm up, time, then verify one step's copies."""
    _, dtype_name, _ = element_type(step.size_bytes)
    lanes: list[_Lane] = []
    slots: dict[int | None, int] = {}
    for k, c in enumerate(step.copies):
        slot = slots.get(c.dst, 0)
        slots[c.dst] = slot + 1
        lanes.append(
            _Lane(
                copy=c,
                src=buffers.source(c.src, step.size_bytes),
                dst=buffers.dest(c.dst, step.size_bytes, slot),
                stream=backend.stream(c.device, k),
            )
        )
    devices = step.devices
    gated = len(lanes) > 1

    def one_round(timers: list[tuple[Any, Any]] | None) -> None:
        gate = backend.open_gate(lanes[0].copy.device) if gated else None
        for k, lane in enumerate(lanes):
            if gate is not None:
                backend.wait(lane.stream, gate)
            if timers is not None:
                backend.record(timers[k][0], lane.stream)
            backend.copy(lane.stream, lane.dst, lane.src)
            if timers is not None:
                backend.record(timers[k][1], lane.stream)
        backend.sync(devices)

    rounds = warmup if warmup > 0 or iters is not None or min_time is None else 1
    t0 = time.perf_counter()
    for _ in range(rounds):
        one_round(None)
    per_round = (time.perf_counter() - t0) / rounds if rounds else 0.0
    n = _iterations(step, iters, min_time, per_round)
    timers = [[(backend.timer(), backend.timer()) for _ in lanes] for _ in range(n)]
    for i in range(n):
        one_round(timers[i])
    samples = [[backend.elapsed_ms(*timers[i][k]) for i in range(n)] for k in range(len(lanes))]
    totals = [max(samples[k][i] for k in range(len(lanes))) for i in range(n)]
    checks: list[bool | None] = [None] * len(lanes)
    if check:
        for lane in lanes:
            lane.dst.zero_()
        backend.sync(devices)
        one_round(None)
        checks = [holds_pattern(lane.dst) for lane in lanes]
    return StepTiming(
        samples_ms=samples,
        total_ms=totals,
        checks=checks,
        warmup=rounds,
        dtype=dtype_name,
        iters=n,
    )


class TorchMeasurer:
    """Measures steps on real devices through a backend; keeps buffers between steps."""

    def __init__(
        self,
        *,
        warmup: int,
        iters: int | None,
        min_time: float | None,
        backend: Any = None,
    ) -> None:
        self.backend = backend if backend is not None else CudaBackend()
        self.buffers = Buffers(self.backend)
        self.warmup = warmup
        self.iters = iters
        self.min_time = min_time

    @property
    def device_count(self) -> int:
        return int(self.backend.device_count)

    def device_names(self) -> list[str]:
        return list(self.backend.device_names())

    def context(self) -> dict[str, Any]:
        return dict(self.backend.context())

    def memory(self, devices: list[int]) -> dict[int, tuple[int, int]]:
        return dict(self.backend.memory(devices))

    def measure(self, step: Step) -> StepTiming:
        self.buffers.keep_only(step.size_bytes)
        return time_step(
            step,
            self.backend,
            self.buffers,
            warmup=self.warmup,
            iters=self.iters,
            min_time=self.min_time,
        )

    def close(self) -> None:
        self.buffers.keep_only(None)


def bare_copy_loop(dst: torch.Tensor, src: torch.Tensor, iters: int) -> float:
    """Milliseconds per copy of a plain `dst.copy_(src)` loop on the current stream.

    The yardstick for commbench's own numbers: no gate, no per-copy events, no sync between
    copies; two events around the whole loop.
    """
    device = dst.device if dst.is_cuda else src.device
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dst.copy_(src, non_blocking=True)  # warm-up (peer access, first-touch costs)
        torch.cuda.synchronize(device)
        start.record(stream)
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        end.record(stream)
        end.synchronize()
        return float(start.elapsed_time(end)) / iters
