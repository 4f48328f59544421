"""Per-iteration timers. Each returns one sample per iteration, in microseconds.

CPU: a monotonic high-resolution clock around the completed op. CUDA: events recorded on
the current stream before and after each op; torch orders the current stream after the
collective's own stream, so the pair brackets the collective as the GPU ran it; the host
only queries end events between iterations (never inside a pair) and waits on them after the
last enqueue, so the heartbeat follows the GPU. Graph mode replays a captured sequence of ops
and divides each replay's time by the ops in it, taking launch overhead out of the number.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

Tick = Callable[[int], None]


def _no_tick(i: int) -> None:
    pass


def time_cpu(call: Callable[[], None], iters: int, tick: Tick = _no_tick) -> list[float]:
    samples = [0.0] * iters
    clock = time.perf_counter_ns
    for i in range(iters):
        tick(i)
        t0 = clock()
        call()
        samples[i] = (clock() - t0) / 1e3
    return samples


def time_cuda(call: Callable[[], None], iters: int, tick: Tick = _no_tick) -> list[float]:
    """Events around each op; `tick(i)` once iteration i-1 has completed on the GPU.

    The host enqueues far ahead of the GPU, so ticking at enqueue would report the last
    iteration enqueued, then one long silence while a long phase (1 GiB, a slow link) runs.
    Ticks follow the end events instead: a non-blocking query after each enqueue (outside any
    start/end pair, so no sample pays for it), then a wait on each remaining event in turn.
    A hang is then seen at the iteration really stuck, and a slow phase keeps ticking."""
    stream = torch.cuda.current_stream()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    tick(0)
    done = 0  # iterations known to have completed
    for i in range(iters):
        starts[i].record(stream)
        call()
        ends[i].record(stream)
        while done <= i and ends[done].query():
            done += 1
            if done < iters:
                tick(done)
    for k in range(done, iters):
        ends[k].synchronize()
        if k + 1 < iters:
            tick(k + 1)
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


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
    call: Callable[[], None], iters: int, tick: Tick = _no_tick, min_samples: int = 1
) -> tuple[list[float], int]:
    """Capture `GRAPH_OPS` calls in a graph, replay it; returns (per-op samples, ops per replay).

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
    samples = time_cuda(graph.replay, replays, tick)
    return [s / per_graph for s in samples], per_graph


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
