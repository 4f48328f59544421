"""`record` and `replay` of a job on NCCL (issue 34, item 9), skipped without CUDA: one rank
per GPU, at world size 1 on a one-GPU machine, 2 where there are two or more.

What it proves when a GPU is lent: each NCCL call's completion comes from CUDA events (none
left without one, none longer than the step that made it), a call captured into a CUDA graph
is counted and said, and the trace replays on NCCL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.traces.reader import read_trace
from tests.test_record import JOBS, record_argv

pytestmark = [pytest.mark.gpu, pytest.mark.integration]


def _gpus() -> int:
    import torch

    return min(2, torch.cuda.device_count())


def test_an_nccl_ddp_job_records_and_replays(tmp_path: Path, free_port: int) -> None:
    n = _gpus()
    job = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-port", str(free_port), str(JOBS / "nccl_ddp_job.py")]  # fmt: skip
    done = subprocess.run(
        record_argv(tmp_path / "trace", job), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    step_ms = [float(x.split()[-1]) for x in done.stdout.splitlines() if "step_ms" in x]
    trace = read_trace(tmp_path / "trace")
    assert trace.manifest.backends == ("nccl",)
    assert trace.manifest.graph_captured == n  # the captured all_reduce, once per rank
    assert [c.op for r in range(n) for c in trace.calls[r] if c.graph] == ["all_reduce"] * n
    assert "captured into CUDA graphs" in done.stderr
    for rank in range(n):
        calls = [c for c in trace.calls[rank] if c.device.startswith("cuda")]
        assert calls
        stepped = [c for c in calls if c.step is not None]
        # each timed by its events: none without a completion, none longer than a step
        assert all(c.completed_ns is not None for c in stepped)
        longest = max(step_ms) * 1e6
        assert all(c.completed_ns - c.issued_ns <= longest for c in stepped), longest
    out = tmp_path / "out"
    replayed = subprocess.run(
        [sys.executable, "-m", "commbench", "replay", str(tmp_path / "trace"), "--backend",
         "nccl", "--device", "cuda", "--iters", "5", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    (run_dir,) = out.iterdir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
