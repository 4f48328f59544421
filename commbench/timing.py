"""Per-iteration timers. Each returns one sample per iteration, in microseconds (`Timed`).

CPU: a monotonic high-resolution clock around the completed op.

CUDA: events recorded on the current stream before and after each op; torch orders the
current stream after the collective's own stream, so the pair brackets the collective as the
GPU ran it, provided the GPU never waits for the host inside a pair. Eagerly, at small sizes,
it would: the host takes longer to issue an op (Python, the dispatcher, the kernel launch:
27 us for a one-rank NCCL all_gather on an H100) than the GPU takes to run it (1.6 us), so
each start event ran at once and the op only when the host got there, and the sample was the
host's time. So every batch of iterations starts behind a hold (`PreQueue`): device work of a
known length, long enough to cover the host's enqueue of the whole batch, then one untimed
lead (the worker's: a one-element all_reduce over the point's group, which ends on every rank
only once every rank's hold has ended, so no rank's samples wait out a peer's longer hold),
then the batch. When the GPU reaches the batch, every op of it is already queued: the samples
are the device's. What the host can issue is measured beside them (`Timed.issue_us`, the
host's time per iteration of the enqueue loop): what an eager training loop sees at small
sizes. An op that makes the host wait for the device (NCCL's barrier; every op under
TORCH_NCCL_BLOCKING_WAIT) cannot be queued ahead: the worker times it without a hold
(`host_waits`). Were one timed behind holds, each batch would be counted as uncovered, and
the holds would stay bounded (`PreQueue.learn`).

The host waits on the end events after the batch's enqueue, ticking as each completes, so the
heartbeat follows the GPU. Graph mode replays a captured sequence of ops, behind the same
holds, and divides each replay's time by the ops in it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

Tick = Callable[[int], None]


def _no_tick(i: int) -> None:
    pass


def _host_ns() -> int:
    """The host's clock (a test's fake GPU replaces it with its own)."""
    return time.perf_counter_ns()


@dataclass(slots=True)
class Timed:
    """A timer's result: one sample per iteration (microseconds), and what the host took to
    issue one (the enqueue loop's time per iteration; on CPU, where the op completes before
    the call returns, the loop's own)."""

    samples: list[float] = field(default_factory=list)
    issue_us: float = math.nan
    """Host microseconds per iteration of the enqueue loop; NaN without iterations."""
    batches: int = 0
    """Batches timed behind a hold (CUDA, eager and graph); 0 on CPU."""
    uncovered: int = 0
    """Of them, those whose hold ended before the host had enqueued the batch: their samples
    may hold host time. The next batch's hold covers twice that batch's enqueue."""

    @property
    def issue_rate(self) -> float | None:
        """Ops per second the host issued; None without iterations."""
        return 1e6 / self.issue_us if self.issue_us > 0 else None


def time_cpu(call: Callable[[], None], iters: int, tick: Tick = _no_tick) -> Timed:
    samples = [0.0] * iters
    clock = time.perf_counter_ns
    began = clock()
    for i in range(iters):
        tick(i)
        t0 = clock()
        call()
        samples[i] = (clock() - t0) / 1e3
    issue = (clock() - began) / 1e3 / iters if iters else math.nan
    return Timed(samples, issue)


# -- the pre-queue --------------------------------------------------------------------------

PREQUEUE_BATCH = 32
"""Iterations timed behind one hold: few enough that a batch's enqueues (two events and the
op's few launches each) stay well inside CUDA's launch queue (about a thousand entries), so
the host never blocks behind the hold; many enough that the holds cost little."""
PREQUEUE_MARGIN = 1.5
"""The hold covers the host's last measured enqueue time of a batch this many times over..."""
PREQUEUE_SLACK_US = 200.0
"""... and this much more (a scheduler tick, a page fault)."""
FIRST_ENQUEUE_US = 200.0
"""The host's enqueue time per iteration assumed before any batch was measured: seven times a
one-rank NCCL all_gather's on an H100 (27 us), so a process's first hold covers a slow host."""
MAX_ENQUEUE_US = 10_000.0
"""... and the most it is ever taken to be (10 ms an op): a hold never grows without bound."""
MAX_HOLD_UNITS = 256
"""Units in one hold at most: with a batch's few hundred launches, inside CUDA's launch queue
(a host that blocks on a full queue would time its blocking as its issue time). 77 ms of
device time on an H100; a host slower than that is counted as behind."""
HOLD_N = 2048
"""The hold's unit: one float32 HOLD_N x HOLD_N matmul (17 GFLOP, 0.3 ms on an H100, a few ms
on a small GPU), on 32 MiB of its own (and cuBLAS's workspace: within the collectives'
reserve, `gpu_memory.COLLECTIVES_RESERVE`)."""
CALIBRATION_UNITS = 8


class Hold(Protocol):
    """Device work of a known length, enqueued on the current stream."""

    unit_us: float
    """Device microseconds of one unit."""

    def run(self, units: int) -> None: ...


class CudaHold:
    """`Hold` by public ops: float32 matmuls on buffers of its own (no sleep kernel: torch's
    is private), timed once by events when made."""

    def __init__(self, device: Any) -> None:
        # a @ a == a: the values stay put however many units run
        self.a = torch.full((HOLD_N, HOLD_N), 1.0 / HOLD_N, dtype=torch.float32, device=device)
        self.out = torch.empty_like(self.a)
        stream = torch.cuda.current_stream(device)
        self.run(2)  # cuBLAS's first call: its handle, its workspace
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        self.run(CALIBRATION_UNITS)
        end.record(stream)
        end.synchronize()
        self.unit_us = start.elapsed_time(end) * 1e3 / CALIBRATION_UNITS

    def run(self, units: int) -> None:
        for _ in range(units):
            torch.mm(self.a, self.a, out=self.out)


@dataclass(slots=True)
class PreQueue:
    """How long to hold the device before a batch, learnt from the batches before it: the
    host's enqueue time, and the hold's own unit as the device last ran it (a GPU at idle
    clocks when the hold was calibrated, or a TF32 setting changed since, would otherwise
    leave every hold short)."""

    hold: Hold
    enqueue_us: float = FIRST_ENQUEUE_US
    """The host's time to enqueue one iteration, as the last batch measured it."""
    unit_us: float = math.nan
    """Device microseconds of one unit, as the last hold ran; the hold's calibration before."""

    def __post_init__(self) -> None:
        if not self.unit_us > 0:
            self.unit_us = self.hold.unit_us

    def units(self, iterations: int) -> int:
        """Hold units covering the enqueue of the lead and `iterations` more."""
        need = (iterations + 1) * self.enqueue_us * PREQUEUE_MARGIN + PREQUEUE_SLACK_US
        return max(1, min(MAX_HOLD_UNITS, math.ceil(need / self.unit_us)))

    def learn(self, enqueue_us: float, covered: bool) -> None:
        """After a batch: its enqueue time per iteration, and whether its hold outlasted it.
        Where it did not, the next covers twice that batch's enqueue."""
        measured = enqueue_us if covered else 2 * enqueue_us
        self.enqueue_us = min(MAX_ENQUEUE_US, measured)

    def ran(self, units: int, device_us: float) -> None:
        """A hold of `units` took the device `device_us`."""
        if units > 0 and device_us > 0:
            self.unit_us = device_us / units


_PREQUEUES: dict[int, PreQueue] = {}


def host_waits(op: str, backend: str) -> str:
    """Why `op` makes the host wait for the device on `backend` ('' where it does not): such
    an op cannot be queued ahead of the device, and is timed without a hold."""
    if backend != "nccl":
        return ""
    if os.environ.get("TORCH_NCCL_BLOCKING_WAIT", "0") not in ("", "0"):
        return "TORCH_NCCL_BLOCKING_WAIT makes the host wait for each op"
    if op == "barrier":
        return "NCCL's barrier makes the host wait for the device"
    return ""


def device_prequeue(device: Any) -> PreQueue:
    """The process's pre-queue on `device` (made, and its hold calibrated, on first use)."""
    index = torch.device(device).index
    key = torch.cuda.current_device() if index is None else index
    if key not in _PREQUEUES:
        _PREQUEUES[key] = PreQueue(CudaHold(torch.device("cuda", key)))
    return _PREQUEUES[key]


def time_cuda(
    call: Callable[[], None],
    iters: int,
    tick: Tick = _no_tick,
    *,
    prequeue: PreQueue | None,
    lead: Callable[[], None] | None = None,
) -> Timed:
    """Events around each op, in batches behind a hold (`prequeue`; None: none, the host's
    pace then shows in small ops' samples) and `lead` (untimed, after the hold: where the
    ranks meet; `call` itself by default); `tick(i)` once iteration i-1 has completed on the
    GPU.

    The host enqueues a whole batch before it waits, then waits on each end event in turn
    and ticks: a hang is seen at the iteration really stuck, and a slow phase (1 GiB, a slow
    link) keeps ticking. Every rank makes the same calls (a lead and the batch's, however
    long its hold), so no collective is left without its peers."""
    stream = torch.cuda.current_stream()
    out = Timed()
    if iters <= 0:
        return out
    lead = call if lead is None else lead
    enqueue_ns = 0
    tick(0)
    for first in range(0, iters, PREQUEUE_BATCH):
        n = min(PREQUEUE_BATCH, iters - first)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        held = before = None
        units = 0
        if prequeue is not None:
            units = prequeue.units(n)
            before = torch.cuda.Event(enable_timing=True)
            before.record(stream)
            prequeue.hold.run(units)
            held = torch.cuda.Event(enable_timing=True)
            held.record(stream)
            lead()
        t0 = _host_ns()
        for k in range(n):
            starts[k].record(stream)
            call()
            ends[k].record(stream)
        spent = _host_ns() - t0
        enqueue_ns += spent
        if prequeue is not None and held is not None:
            covered = not held.query()
            prequeue.learn(spent / 1e3 / n, covered)
            out.batches += 1
            out.uncovered += not covered
        for k in range(n):
            ends[k].synchronize()
            if first + k + 1 < iters:
                tick(first + k + 1)
        if prequeue is not None and before is not None and held is not None:
            prequeue.ran(units, before.elapsed_time(held) * 1e3)
        out.samples += [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    out.issue_us = enqueue_ns / 1e3 / iters
    return out


# Ops captured per graph in --graph mode: enough to amortise the replay launch, few enough
# to keep several samples per point.
GRAPH_OPS = 10


def capture(call: Callable[[], None], ops: int) -> torch.cuda.CUDAGraph:
    """`ops` calls captured in a CUDA graph, after one eager call on the capture stream (see
    `time_cuda_graph`)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
        for _ in range(ops):
            call()
    torch.cuda.current_stream().wait_stream(side)
    return graph


def time_cuda_graph(
    call: Callable[[], None],
    iters: int,
    tick: Tick = _no_tick,
    min_samples: int = 1,
    *,
    prequeue: PreQueue | None,
    lead: Callable[[], None] | None = None,
) -> tuple[Timed, int]:
    """Capture `GRAPH_OPS` calls in a graph, replay it; returns (per-op samples, ops per
    replay). The replays are timed as `time_cuda` times eager calls, behind the same holds
    (`lead`, a replay by default): a replay's launch takes the host longer than ten small ops
    take the GPU. The issue time is then the replay's launch per op, not an eager loop's.

    At least `iters` ops run, in at least `min_samples` replays: each replay is one sample, and
    the regression gate's significance test needs several.

    One eager call on the capture's side stream always comes first, whatever `--warmup` said:
    NCCL connects lazily, and its first call on a stream sets up connections and allocates
    memory, which a capture forbids. The capture is thread-local, as nccl-tests' is, so a
    stray allocation or sync elsewhere in the process (NCCL's proxy, P2P pre-connect) does not
    invalidate it; global mode would."""
    per_graph = max(1, min(GRAPH_OPS, iters))
    replays = max(min_samples, math.ceil(iters / per_graph))
    graph = capture(call, per_graph)
    graph.replay()  # one untimed replay: first-launch costs out of the samples
    timed = time_cuda(graph.replay, replays, tick, prequeue=prequeue, lead=lead)
    timed.samples = [s / per_graph for s in timed.samples]
    timed.issue_us /= per_graph
    return timed, per_graph


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
