"""The p2p measurement loop on the CPU backend: gate, iterations, buffers, verification.

The CUDA backend differs only in where tensors live and how streams and events work; its
own tests are in test_p2p_gpu.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from commbench.p2p import measure
from commbench.p2p.measure import (
    Buffers,
    CpuBackend,
    TorchMeasurer,
    element_type,
    fill_pattern,
    holds_pattern,
    pattern,
    time_step,
)
from commbench.p2p.plan import HOST, Copy, Step


def step(*copies: Copy, size: int = 4096, test: str = "bandwidth") -> Step:
    mode = "concurrent" if len(copies) > 1 else "sequential"
    return Step(test=test, mode=mode, direction="uni", size_bytes=size, copies=copies)


def test_element_type_and_pattern() -> None:
    assert element_type(400_000_000) == (torch.float32, "float32", 10**8)
    assert element_type(6) == (torch.uint8, "uint8", 6)
    p = pattern(250, 3, torch.float32, torch.device("cpu"))
    assert p.tolist() == [250.0, 0.0, 1.0]
    t = torch.empty(1000, dtype=torch.uint8)
    fill_pattern(t)
    assert holds_pattern(t)
    t[999] += 1
    assert not holds_pattern(t)


def test_verification_spans_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "VERIFY_CHUNK", 7)
    t = torch.empty(50, dtype=torch.float32)
    fill_pattern(t)
    assert t.tolist() == [float(i % 251) for i in range(50)]
    t[23] = -1
    assert not holds_pattern(t)


def test_gate_only_for_copies_timed_together() -> None:
    backend = CpuBackend(4)
    buffers = Buffers(backend)
    timing = time_step(step(Copy(0, 1), Copy(0, 2)), backend, buffers, warmup=2, iters=3)
    assert backend.gates == 2 + 3 + 1  # warm-up, timed, verification rounds
    assert len(timing.samples_ms) == 2 and all(len(s) == 3 for s in timing.samples_ms)
    assert timing.total_ms == [max(a, b) for a, b in zip(*timing.samples_ms)]
    assert timing.checks == [True, True] and (timing.warmup, timing.dtype) == (2, "float32")
    time_step(step(Copy(0, 1)), backend, buffers, warmup=2, iters=3)
    assert backend.gates == 6


def test_buffers_are_reused_and_fan_in_gets_a_slot_per_copy() -> None:
    backend = CpuBackend(3)
    buffers = Buffers(backend)
    bi = step(Copy(0, 1), Copy(1, 0), Copy(0, 2), Copy(2, 0))
    time_step(bi, backend, buffers, warmup=0, iters=1)
    assert buffers.dest(0, 4096, 0) is not buffers.dest(0, 4096, 1)  # 1->0 and 2->0
    src = buffers.source(0, 4096)
    time_step(step(Copy(0, 1)), backend, buffers, warmup=0, iters=1)
    assert buffers.source(0, 4096) is src
    big = 2 << 20
    buffers.source(0, big)
    buffers.keep_only(4096)
    assert (0, big) not in buffers._sources and (0, 4096) in buffers._sources
    buffers.keep_only(big)
    assert (0, 4096) in buffers._sources  # latency-sized buffers stay
    buffers.keep_only(None)
    assert not buffers._sources and not buffers._dests


def test_host_and_local_copies_verify() -> None:
    backend = CpuBackend(1)
    for c in (Copy(HOST, 0), Copy(0, HOST), Copy(0, 0)):
        timing = time_step(step(c, size=4099), backend, Buffers(backend), warmup=1, iters=2)
        assert timing.checks == [True] and timing.dtype == "uint8"


def test_a_corrupted_copy_fails_only_its_own_check() -> None:
    calls: list[int] = []

    def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
        calls.append(1)
        dst.copy_(src)
        if dst.data_ptr() == target[0]:
            dst[5] = 99

    backend = CpuBackend(3, copy_fn=copy)
    buffers = Buffers(backend)
    target = [buffers.dest(2, 4096, 0).data_ptr()]
    timing = time_step(step(Copy(0, 1), Copy(0, 2)), backend, buffers, warmup=0, iters=1)
    assert timing.checks == [True, False]
    timing = time_step(step(Copy(0, 1)), backend, buffers, warmup=0, iters=1, check=False)
    assert timing.checks == [None]


@pytest.mark.parametrize(
    ("iters", "min_time", "per_round", "test", "expected"),
    [
        (7, None, 0.1, "bandwidth", 7),
        (None, None, 0.1, "bandwidth", 20),
        (None, None, 0.1, "latency", 200),
        (None, 1.0, 0.01, "bandwidth", 100),
        (None, 1.0, 10.0, "bandwidth", 5),
        (None, 100.0, 1e-6, "latency", 1000),
    ],
)
def test_iteration_count(
    iters: int | None, min_time: float | None, per_round: float, test: str, expected: int
) -> None:
    s = step(Copy(0, 1), test=test)
    assert measure._iterations(s, iters, min_time, per_round) == expected


def test_min_time_without_warmup_still_estimates() -> None:
    backend = CpuBackend(2)
    timing = time_step(
        step(Copy(0, 1)), backend, Buffers(backend), warmup=0, iters=None, min_time=1e-9
    )
    assert timing.warmup == 1 and timing.iters == 5


def test_measurer_frees_other_sizes_between_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[Any] = []
    backend = CpuBackend(2)
    monkeypatch.setattr(backend, "release", lambda: released.append(1))
    m = TorchMeasurer(warmup=0, iters=1, min_time=None, backend=backend)
    m.measure(step(Copy(0, 1), size=2 << 20))
    m.measure(step(Copy(0, 1), size=4 << 20))
    assert released == [1]
    assert m.device_count == 2 and m.context()["device"] == "cpu"
    m.close()
