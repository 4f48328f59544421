"""Real copies on CUDA (marked `gpu`, skipped without one): one GPU is enough for most.

    python -m pytest -m gpu tests/test_p2p_gpu.py

Timing goals (commbench's d2d within 10% of a bare copy loop; pinned host copies at 85% of
the PCIe rate) are measured by benchmarks/p2p_single_gpu.py, never asserted here: tests
check that the copies ran, were timed and moved the right data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from commbench.cli import app
from commbench.p2p import P2PSettings, run_p2p
from commbench.p2p.measure import Buffers, CudaBackend, time_step
from commbench.p2p.plan import HOST, Copy, Step

pytestmark = pytest.mark.gpu

SIZE = 64 << 20


def gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def one(c: Copy, size: int = SIZE, test: str = "bandwidth") -> Step:
    return Step(test=test, mode="sequential", direction="uni", size_bytes=size, copies=(c,))


def gbps(size: int, ms: float) -> float:
    return size / (ms * 1e-3) / 1e9


def test_device_to_device_within_one_gpu() -> None:
    backend = CudaBackend()
    timing = time_step(one(Copy(0, 0)), backend, Buffers(backend), warmup=2, iters=5)
    assert timing.checks == [True]
    (samples,) = timing.samples_ms
    assert len(samples) == 5 and all(s > 0 for s in samples)


def test_pinned_host_copies() -> None:
    backend = CudaBackend()
    buffers = Buffers(backend)
    assert buffers.source(HOST, SIZE).is_pinned()
    assert buffers.dest(HOST, SIZE, 0).is_pinned()
    for c in (Copy(HOST, 0), Copy(0, HOST)):
        timing = time_step(one(c), backend, buffers, warmup=2, iters=5)
        assert timing.checks == [True], c.label
        assert all(ms > 0 for ms in timing.samples_ms[0]), c.label


def test_small_copy_latency() -> None:
    backend = CudaBackend()
    buffers = Buffers(backend)
    for size in (4, 4096, 65536):
        timing = time_step(one(Copy(0, 0), size, "latency"), backend, buffers, warmup=5, iters=50)
        assert timing.checks == [True]
        median_us = sorted(timing.samples_ms[0])[25] * 1e3
        assert median_us > 0, size


class _Corrupting(CudaBackend):
    def copy(self, stream: object, dst: torch.Tensor, src: torch.Tensor) -> None:
        super().copy(stream, dst, src)
        with torch.cuda.stream(stream):  # type: ignore[arg-type]
            dst[-1:].fill_(7)  # the pattern's last element is 124 here


def test_verification_catches_a_wrong_copy() -> None:
    backend = _Corrupting()
    timing = time_step(one(Copy(0, 0)), backend, Buffers(backend), warmup=0, iters=1)
    assert timing.checks == [False]


def test_run_writes_a_complete_run_dir(tmp_path: Path) -> None:
    settings = P2PSettings(
        sizes=[SIZE], host=True, latency=True, latency_sizes=[4, 4096], warmup=2, iters=5
    )
    outcome = run_p2p(settings, tmp_path)
    assert outcome.status == "complete", outcome.failure
    assert outcome.rows and all(r.check == "ok" for r in outcome.rows)
    kinds = {r.p2p.copy for r in outcome.rows if r.p2p}
    assert {"h2d", "d2h"} <= kinds
    assert ("d2d" in kinds) if gpus() == 1 else ("p2p" in kinds)
    meta = json.loads((outcome.run_dir / "run.json").read_text())
    assert meta["kind"] == "p2p" and meta["context"]["device_names"]
    for r in outcome.rows:
        assert r.p2p is not None
        c = r.p2p
        print(
            f"{c.mode:10} {c.pair:10} {r.time_us / 1e3:8.3f} ms  {r.busbw_gbps or 0:8.1f} GB/s  "
            f"{c.diagnosis}"
        )


def test_cli_on_this_machine(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["p2p", "--size", "64M", "--warmup", "2", "--iters", "5", "--host", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    assert "commbench: complete:" in result.stderr


@pytest.mark.skipif(gpus() < 2, reason="needs two GPUs")
def test_concurrent_and_bidirectional_copies_between_gpus(tmp_path: Path) -> None:
    settings = P2PSettings(sizes=[SIZE], bidirectional=True, warmup=2, iters=5)
    outcome = run_p2p(settings, tmp_path)
    assert outcome.status == "complete", outcome.failure
    copies = [r.p2p for r in outcome.rows if r.p2p]
    assert len(copies) == len(outcome.rows)
    assert {c.mode for c in copies} >= {"sequential"}
    assert all(r.check == "ok" for r in outcome.rows)
    totals = [c for c in copies if c.copy == "total"]
    assert totals and all(r.direction == "bi" for r in totals)
