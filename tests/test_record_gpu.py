"""`record` and `replay` of a job on NCCL (issue 34, item 9), skipped without CUDA: one rank
per GPU, at world size 1 on a one-GPU machine, 2 where there are two or more.

What it proves when a GPU is lent: each NCCL call's completion comes from CUDA events (none
left without one, none longer than the step that made it), a call captured into a CUDA graph
is counted and said, and the trace replays on NCCL; symmetric-memory calls that really ran on
the GPU are counted and named (issue 46, item 3); a coalesced group recorded on NCCL is one
call, and replayed on NCCL as one."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.replay import compiled
from commbench.traces.reader import read_trace
from tests.job_truth import JobSpec, compare
from tests.job_truth import record as record_job
from tests.test_record import JOBS, record_argv, run_record, torchrun

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


def test_symmetric_memory_calls_on_cuda_are_counted_and_named(
    tmp_path: Path, free_port: int
) -> None:
    """tests/jobs/symm_mem_job.py on NCCL: one_shot_all_reduce really runs, on symmetric
    memory (its result checked by the job), three times a rank. The trace cannot hold it (not
    a c10d op): the manifest names it with the job's own count, and record says so; the
    c10d all_reduce beside it is the trace's only call."""
    n = _gpus()
    trace_dir = tmp_path / "trace"
    done = run_record(
        trace_dir, [*torchrun(free_port, n), str(JOBS / "symm_mem_job.py"), "--device", "cuda"],
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # a truth line is one write, though it may land mid-line after another rank's text
    said = [line[line.find("truth: ") :].split() for line in done.stdout.splitlines()
            if "truth: " in line]  # fmt: skip
    assert sorted(int(words[1]) for words in said) == list(range(n)), done.stdout[-2000:]
    assert {words[2] for words in said} == {"symm_mem::one_shot_all_reduce"}
    made = sum(int(words[-1]) for words in said)
    assert made == 3 * n
    trace = read_trace(trace_dir)
    assert trace.manifest.backends == ("nccl",)
    assert trace.manifest.not_captured == (("symm_mem::one_shot_all_reduce", made),)
    assert f"not captured: {made} call(s) of symm_mem::one_shot_all_reduce" in done.stderr
    assert any("not captured" in note for note in trace.notes())
    for rank in range(n):
        calls = trace.calls[rank]
        assert [c.op for c in calls] == ["all_reduce"], [c.name for c in calls]
        assert calls[0].device == f"cuda:{rank}"


def test_an_nccl_coalesced_group_records_and_replays_as_one(tmp_path: Path, free_port: int) -> None:
    """tests/jobs/coalesced_job.py on NCCL: each step's all_reduces of the gradients inside
    `_coalescing_manager` go as one `allreduce_coalesced` and its all_gathers as one
    `allgather_into_tensor_coalesced`; with two GPUs, the ring's send and receive go as one
    `batch_isend_irecv` (one NCCL group). The trace holds each as the job's truth says (one
    call of the group's summed bytes; the batch's calls marked with its number), and the
    replay on NCCL runs each as one: one issue a step (one row in results.csv), the batch's
    send and receive under one batch number (issued together by `batch_isend_irecv`)."""
    n = _gpus()
    steps = 3
    spec = JobSpec("coalesced_nccl", "coalesced_job.py", nproc=n, args=("--device", "cuda"))
    job = record_job(spec, tmp_path / "trace", free_port, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    assert "(complete)" in job.stderr, job.stderr[-2000:]
    assert sorted(job.truth) == list(range(n)), job.stdout[-2000:]
    trace = job.trace()
    assert trace.manifest.backends == ("nccl",)
    # call for call as the job says it made them: op, bytes, dtype, group, peer, step, batch
    mismatches = compare(trace, job.truth)
    assert not mismatches, "\n".join(str(m) for m in mismatches[:12])
    said = {t.op: t for t in job.truth[0] if t.step == 1}
    reduced = said["all_reduce"].in_bytes  # every gradient's bytes together
    shards, gathered = said["all_gather"].in_bytes, said["all_gather"].out_bytes
    p2p = ["send", "recv"] if n > 1 else []  # no ring on one GPU
    for rank in range(n):
        stepped = [c for c in trace.calls[rank] if c.step is not None]
        assert [c.op for c in stepped] == [*p2p, "all_reduce", "all_gather"] * steps
        assert [(c.name, c.in_bytes) for c in stepped if c.op == "all_reduce"] == [
            ("allreduce_coalesced", reduced)
        ] * steps
        assert [(c.name, c.in_bytes, c.out_bytes) for c in stepped if c.op == "all_gather"] == [
            ("allgather_into_tensor_coalesced", shards, gathered)
        ] * steps
        assert all(c.device == f"cuda:{rank}" for c in stepped)
        assert [c.batch for c in stepped if c.op in p2p] == [b for b in range(steps) for _ in p2p]
    out = tmp_path / "out"
    replayed = subprocess.run(
        [sys.executable, "-m", "commbench", "replay", str(job.trace_dir), "--backend", "nccl",
         "--device", "cuda", "--iters", "3", "--warmup", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    (run_dir,) = out.iterdir()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete"
    assert run["replay"]["step_numbers"] == list(range(1, steps + 1))
    # what the workers ran (the run's program/): one issue per coalesced group a step, the
    # batch's send and receive under the recorded batch number
    program = compiled.read(run_dir / "program")
    for rank in range(n):
        sequence = program.sequence(rank)
        assert len(sequence) == steps
        for step, issues in enumerate(sequence):
            assert [i.op for i in issues] == [*p2p, "all_reduce", "all_gather"]
            assert [(i.op, i.size_bytes) for i in issues if i.op not in p2p] == [
                ("all_reduce", reduced),
                ("all_gather", gathered),  # S of an all_gather: the gathered buffer
            ]
            assert [i.batch for i in issues if i.op in p2p] == [step] * len(p2p)
    # and the rows it timed: one all_reduce and one all_gather of the groups' bytes, 3 calls
    with open(run_dir / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    for op, size in (("all_reduce", reduced), ("all_gather", gathered)):
        assert [(r["size_bytes"], r["world_size"], r["calls"]) for r in rows if r["op"] == op] == [
            (str(size), str(n), str(steps))
        ], rows
