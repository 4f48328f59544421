"""Latency-bound calls between stretches of pure-Python work, as a tensor-parallel job makes
them: 16 KiB all_reduces, each followed by about `--gap-ms` of Python holding the GIL (the
interpreter's bookkeeping between a layer's kernels, a logging-heavy loop). Three forms, each
`--rounds` times, in this order every round:

- `sync`: `dist.all_reduce(x)`, which waits before it returns;
- `async`: `dist.all_reduce(x, async_op=True)`, then `.wait()` at once;
- `dtensor`: a DTensor with a Partial placement redistributed to Replicate (DTensor's
  functional all_reduce, waited when the result is read: `to_local()` + a sum);
- `monitored_barrier`: `dist.monitored_barrier()`, which returns no Work: it is done when
  it returns.

The job times each call itself, from before it is issued to after its result is usable,
with `time.time_ns` (the trace's clock), and prints per rank and call in issue order:
`truth: <rank> <form> <issued_ns> <done_ns>`. A recorder that stamps a call's completion
when a thread of its own next gets the GIL records it up to the switch interval (5 ms) or
the gap late; the job's own clock says how long it took.

    torchrun --nproc-per-node 2 tests/jobs/latency_job.py [--rounds 30] [--gap-ms 8]
"""

import argparse
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate

ELEMENTS = 4096  # 16 KiB of float32


def python_work(ms: float) -> int:
    """Pure Python for `ms`: the GIL held throughout, as an interpreter-bound loop holds it."""
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        n += sum(range(50))
    return n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--gap-ms", type=float, default=8.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x = torch.ones(ELEMENTS)
    lines = []
    for _ in range(args.rounds):
        t0 = time.time_ns()
        dist.all_reduce(x)
        lines.append(("sync", t0, time.time_ns()))
        python_work(args.gap_ms)

        t0 = time.time_ns()
        dist.all_reduce(x, async_op=True).wait()
        lines.append(("async", t0, time.time_ns()))
        python_work(args.gap_ms)

        partial = DTensor.from_local(torch.ones(ELEMENTS), mesh, [Partial()], run_check=False)
        t0 = time.time_ns()
        total = float(partial.redistribute(mesh, [Replicate()]).to_local().sum())
        lines.append(("dtensor", t0, time.time_ns()))
        assert total == ELEMENTS * dist.get_world_size(), total
        python_work(args.gap_ms)

        t0 = time.time_ns()
        dist.monitored_barrier()
        lines.append(("monitored_barrier", t0, time.time_ns()))
        python_work(args.gap_ms)
        x.fill_(1.0)
    for form, t0, t1 in lines:  # one write a line: two ranks share the pipe (print writes
        sys.stdout.write(f"truth: {rank} {form} {t0} {t1}\n")  # the newline apart, unbuffered)
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
