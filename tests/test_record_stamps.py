"""When `record` stamps a call complete (issue 43 items 9 and 10), and that a recorded job
never aborts at exit because of the recording (issue 43, "A recorded job must never die of
the recording").

- A latency-bound call is stamped where the job learns it is done (its wait returns, a
  functional collective's result is waited), not when a thread of ours next gets the GIL:
  under a CPU load, a 16 KiB all_reduce between stretches of Python was recorded at up to 17x
  the job's own clock around it (tests/jobs/latency_job.py); it must stay within 2x.
- `monitored_barrier` returns no Work: it is complete when it returns (it was recorded with
  no completion at all, so a replay timed what the recording counted as zero).
- A thread of ours inside a C++ wait when the interpreter finalizes aborts the process
  ("terminate called without an active exception"): a job that exits with a call in flight,
  completed while the process tears down, died so on every run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from commbench.completion import SLICE_S, Completions
from commbench.record.capture import CLOSE_DRAIN_S
from commbench.traces.reader import read_trace
from tests.test_record import JOBS, record

LATENCY_JOB = JOBS / "latency_job.py"


@contextlib.contextmanager
def cpu_load(processes: int = 2) -> Iterator[None]:
    """`processes` busy loops: a machine whose cores are all taken."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)
    ]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _truth(stdout: str) -> dict[int, list[tuple[str, int, int]]]:
    out: dict[int, list[tuple[str, int, int]]] = {0: [], 1: []}
    for line in stdout.splitlines():
        if line.startswith("truth: "):
            _, rank, form, t0, t1 = line.split()
            out[int(rank)].append((form, int(t0), int(t1)))
    return out


@pytest.mark.integration
def test_a_latency_bound_call_is_recorded_within_twice_the_jobs_own_clock_under_load(
    tmp_path: Path, free_port: int
) -> None:
    with cpu_load():
        done = record(tmp_path, [str(LATENCY_JOB), "--rounds", "10"], free_port, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    truth = _truth(done.stdout)
    trace = read_trace(tmp_path / "trace")
    for rank in (0, 1):
        calls = [c for c in trace.calls[rank] if c.op in ("all_reduce", "barrier")]
        calls = [c for c in calls if c.op == "barrier" or c.in_bytes == 16384]
        assert len(calls) == len(truth[rank]) == 40, [c.op for c in calls]
        for call, (form, t0, t1) in zip(calls, truth[rank], strict=True):
            assert call.op == ("barrier" if form == "monitored_barrier" else "all_reduce")
            assert call.completed_ns is not None, (rank, form)
            recorded, job = call.completed_ns - call.issued_ns, t1 - t0
            assert t0 <= call.issued_ns <= call.completed_ns, (rank, form)
            assert recorded <= 2 * job, (rank, form, recorded / 1e3, job / 1e3)


@pytest.mark.integration
def test_a_job_that_exits_with_a_call_in_flight_does_not_abort_under_record(
    tmp_path: Path, free_port: int
) -> None:
    """Rank 0 exits with an all_reduce in flight that rank 1 joins just after rank 0's
    recorder has stopped waiting for it: the call completes while rank 0 tears down. Before
    the recorder's threads were joined at exit, rank 0 aborted (SIGABRT) on every run."""
    job = tmp_path / "in_flight_at_exit.py"
    job.write_text(
        "import os, time\n"
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "rank = dist.get_rank()\n"
        "t = torch.ones(1000)\n"
        "dist.all_reduce(t)\n"
        "if rank == 1:\n"
        "    time.sleep(float(os.environ['DELAY']))\n"
        "work = dist.all_reduce(t, async_op=True)\n"
        "if rank == 1:\n"
        "    work.wait()\n"
        "    assert float(t[0]) == 4.0, t[0]\n"
        "print(f'truth: rank {rank} done', flush=True)\n"
    )
    env = {**os.environ, "DELAY": str(CLOSE_DRAIN_S + 0.3)}
    done = record(tmp_path, [str(job)], free_port, env=env, timeout=120)
    assert "terminate called" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("done") == 2
    trace = read_trace(tmp_path / "trace")
    assert [len(trace.calls[r]) for r in (0, 1)] == [2, 2]


class _Work:
    """A Work that completes when `finish` is called; `wait(timeout)` keeps to its timeout
    unless `deaf` (as gloo's reduce_scatter does not)."""

    def __init__(self, deaf: bool = False) -> None:
        self.done = threading.Event()
        self.deaf = deaf
        self.inside = threading.Event()

    def wait(self, timeout: object = None) -> bool:
        self.inside.set()
        if self.deaf or timeout is None:
            self.done.wait()
            return True
        if not self.done.wait(timeout.total_seconds()):  # type: ignore[attr-defined]
            raise RuntimeError("Operation timed out!")
        return True

    def is_completed(self) -> bool:
        return self.done.is_set()


def test_close_stops_and_joins_a_thread_waiting_for_a_work_that_never_completes() -> None:
    stamps: list[int | None] = []
    completions: Completions[str] = Completions(lambda token, stamp: stamps.append(stamp))
    work = _Work()
    completions.watch("g", work, "call")
    assert work.inside.wait(5)
    started = time.monotonic()
    assert completions.close(timeout=5) == 0  # no thread of ours left inside a wait
    assert time.monotonic() - started < 5
    work.done.set()
    time.sleep(2 * SLICE_S)
    assert stamps == []  # stopped, never stamped: the call is written without a completion


def test_a_work_that_keeps_to_no_slice_is_named_by_close_and_still_stamped() -> None:
    stamps: list[int | None] = []
    completions: Completions[str] = Completions(lambda token, stamp: stamps.append(stamp))
    work = _Work(deaf=True)
    completions.watch("g", work, "call")
    assert work.inside.wait(5)
    assert completions.close(timeout=0.2) == 1
    work.done.set()
    assert completions.drain(5)
    assert len(stamps) == 1 and stamps[0] is not None
