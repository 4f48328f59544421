"""How much does commbench's harness add to what it measures?

Times the same all_reduce sizes two ways inside one torchrun launch, interleaved round by
round so that machine drift hits both alike:

* bare: `for _ in range(N): dist.all_reduce(x)` between two clock reads (CUDA: two events),
  time per iteration = total / N, maximum over ranks;
* commbench: the timers the workers use (`commbench.timing`), one sample per iteration,
  maximum over ranks per iteration.

On CUDA both time the device: each batch of `PREQUEUE_BATCH` ops (the bare loop's too) waits
behind the same hold (`timing.PreQueue`) and one untimed lead op, so that the GPU finds the
whole batch queued and never waits for the host inside the timed span. Without it, a small
op's figure is the host's pace (27 us an op on an H100 against 1.6 us on the device), in both
loops alike. What the host takes to issue one op is reported beside, for each loop, as ops/s:
the bare loop's is the rate an eager training loop can issue the op at.

Two differences are reported separately, each as the median over rounds of a per-round ratio:

* timer overhead: commbench's per-rank mean (max over ranks) vs the bare loop's, the same
  statistic, so only the per-iteration clock reads differ;
* per-iteration max: the mean of the per-iteration maxima over ranks (what commbench's
  samples are) vs the max of the ranks' means: a rank that is late on one iteration and
  early on the next counts, which the bare loop averages away.

The median (commbench's headline) is shown beside the means: on a machine with bimodal
iteration times it sits well below any mean.

On one rank an in-place all_reduce moves nothing (NCCL returns at once), so the figures would be
the dispatch alone: there both loops time an out-of-place all_gather instead, whose one-rank
form is a real copy of the buffer on the device (`op` in the JSON says which was timed).

`--graph` (NCCL only) compares commbench's `--graph` timer (`time_cuda_graph`: capture, then
one event pair per replay) with a bare loop of replays of the same captured graph between two
events; both divide by the ops per replay.

    python benchmarks/harness_overhead.py                       # CPU, gloo, 2 ranks
    python benchmarks/harness_overhead.py --backend nccl --nproc 1   # one GPU
    python benchmarks/harness_overhead.py --backend nccl --nproc 1 --graph --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from commbench.files import dump_json

OUT_OF_PLACE_OP = "all_gather (out of place, 1 rank: a device copy)"
"""What is timed on one rank, where an in-place all_reduce would move nothing."""
OPS = ("all_reduce", "all_gather")


def ops_timed(asked: str, world: int) -> list[str]:
    """The ops of `--ops` that move data at this world size: on one rank an in-place
    all_reduce moves nothing, so only the all_gather (a device copy) is timed there."""
    ops = [op for op in asked.split(",") if op]
    return ["all_gather"] if world == 1 else ops


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from commbench.collectives.ops import all_gather_tensor
    from commbench.timing import (
        GRAPH_OPS,
        PREQUEUE_BATCH,
        capture,
        device_prequeue,
        time_cpu,
        time_cuda,
        time_cuda_graph,
    )

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    cuda = args.backend == "nccl"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    prequeue = device_prequeue(device) if cuda else None
    one = torch.zeros(1, device=device)

    def lead() -> None:
        """After each hold, in both loops: where the ranks meet (`Worker._lead`)."""
        dist.all_reduce(one)

    def max_over_ranks(values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def bare(call: Any, n: int) -> tuple[float, float]:
        """(time per op, host time to issue one), microseconds: on CUDA the device's, two
        events around each batch behind the same hold as commbench's."""
        if not cuda:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                call()
            spent = (time.perf_counter_ns() - t0) / 1e3 / n
            return spent, spent
        assert prequeue is not None
        device_ms = issue_ns = 0.0
        for first in range(0, n, PREQUEUE_BATCH):
            batch = min(PREQUEUE_BATCH, n - first)
            prequeue.hold.run(prequeue.units(batch))  # as long as commbench's has learnt
            lead()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter_ns()
            start.record()
            for _ in range(batch):
                call()
            end.record()
            issue_ns += time.perf_counter_ns() - t0
            end.synchronize()
            device_ms += start.elapsed_time(end)
        return device_ms * 1e3 / n, issue_ns / 1e3 / n

    def bare_graph(graph: Any, n: int) -> tuple[float, float]:
        replays = max(1, n // GRAPH_OPS)
        us, issue = bare(graph.replay, replays)
        return us / GRAPH_OPS, issue / GRAPH_OPS

    def timer(call: Any, n: int) -> Any:
        """commbench's timer for this mode: a `Timed`."""
        if not cuda:
            return time_cpu(call, n)
        if args.graph:
            return time_cuda_graph(call, n, prequeue=prequeue, lead=lead)[0]
        return time_cuda(call, n, prequeue=prequeue, lead=lead)

    world = dist.get_world_size()
    out = []
    for op, size in [(op, size) for op in ops_timed(args.ops, world) for size in args.sizes]:
        if op == "all_gather":  # S is the gathered buffer, as commbench's all_gather rows
            x = torch.zeros(max(1, size // 4 // world), dtype=torch.float32, device=device)
            out_buf = torch.empty(x.numel() * world, dtype=torch.float32, device=device)
            call = lambda x=x, o=out_buf: all_gather_tensor(o, x)  # noqa: E731
        else:
            x = torch.zeros(size // 4, dtype=torch.float32, device=device)
            call = lambda x=x: dist.all_reduce(x)  # noqa: E731
        for _ in range(5):
            call()
        warm = time_cuda(call, 5, prequeue=prequeue, lead=lead) if cuda else time_cpu(call, 5)
        (est,) = max_over_ranks([statistics.median(warm.samples)])
        n = max(10, min(1000, math.ceil(args.min_time * 1e6 / max(est, 1e-3))))
        graph = capture(call, GRAPH_OPS) if args.graph else None
        rounds = []
        for _ in range(args.rounds):
            dist.barrier()
            b, b_issue = max_over_ranks(
                list(bare_graph(graph, n) if graph is not None else bare(call, n))
            )
            dist.barrier()
            own = timer(call, n)
            own_mean, cb_issue, uncovered = max_over_ranks(
                [statistics.fmean(own.samples), own.issue_us, float(own.uncovered)]
            )
            samples = max_over_ranks(own.samples)
            rounds.append(
                {
                    "bare_mean": b,
                    "bare_issue_us": b_issue,
                    "cb_rank_mean": own_mean,
                    "cb_mean": statistics.fmean(samples),
                    "cb_median": statistics.median(samples),
                    "cb_issue_us": cb_issue,
                    "cb_uncovered": int(uncovered),
                    "cb_batches": own.batches,
                }
            )
        out.append({"op": op, "size": size, "iters": n, "rounds": rounds})
    if rank == 0:
        Path(args.output).write_text(dump_json(out))
    dist.destroy_process_group()


def harness_cost_ns(iters: int = 200_000) -> tuple[float, float]:
    """Per-iteration cost of commbench's CPU timer loop and of a bare loop, around a no-op:
    what the harness itself adds, free of the network's noise. Best of 5."""
    from commbench.timing import time_cpu

    def noop() -> None:
        pass

    bare, timed = [], []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            noop()
        bare.append((time.perf_counter_ns() - t0) / iters)
        t0 = time.perf_counter_ns()
        time_cpu(noop, iters)
        timed.append((time.perf_counter_ns() - t0) / iters)
    return min(bare), min(timed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sizes", default="1K,16K,1M,4M,16M")
    p.add_argument(
        "--ops",
        default="all_reduce",
        help="all_reduce, all_gather or both (comma-separated); one rank times all_gather.",
    )
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--output", default=None, help=argparse.SUPPRESS)
    p.add_argument("--markdown", default=None, help="Also write the table to this file.")
    p.add_argument("--json", default=None, help="Also write the figures to this file.")
    p.add_argument(
        "--graph", action="store_true", help="Time CUDA-graph replays (NCCL only), as --graph."
    )
    args = p.parse_args()
    if args.graph and args.backend != "nccl":
        p.error("--graph needs --backend nccl")
    unknown = [op for op in args.ops.split(",") if op not in OPS]
    if unknown or not args.ops:
        p.error(f"--ops takes {', '.join(OPS)}; not {', '.join(unknown) or 'nothing'}")
    if os.environ.get("COMMBENCH_BENCH_WORKER"):
        args.sizes = [int(s) for s in args.sizes.split(",")]
        worker(args)
        return
    from commbench.launch.pythonpath import with_package_path
    from commbench.sizes import format_size, parse_sizes

    sizes = parse_sizes(args.sizes)
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "out.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(args.nproc),
            __file__,
            "--backend",
            args.backend,
            "--sizes",
            ",".join(map(str, sizes)),
            "--rounds",
            str(args.rounds),
            "--min-time",
            str(args.min_time),
            "--output",
            str(output),
            "--ops",
            args.ops,
            *(["--graph"] if args.graph else []),
        ]
        env = {
            **with_package_path(os.environ),
            "COMMBENCH_BENCH_WORKER": "1",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
        subprocess.run(cmd, check=True, env=env)
        data = json.loads(output.read_text())
    timed_ops = ops_timed(args.ops, args.nproc)
    op = OUT_OF_PLACE_OP if args.nproc == 1 else ", ".join(timed_ops)
    lines = [
        f"harness overhead: {op} float32, {args.backend}, {args.nproc} ranks, {args.rounds} interleaved rounds"
        + (", CUDA graph replays" if args.graph else ""),
        "",
        "| op | size | iters/round | bare mean us | commbench mean us | timer overhead (range) "
        "| per-iteration max effect | commbench median us | host issue ops/s, bare | "
        "host issue ops/s, commbench | batches the host fell behind |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    figures: list[dict[str, Any]] = []
    for point in data:
        rounds = point["rounds"]
        timer = [r["cb_rank_mean"] / r["bare_mean"] - 1 for r in rounds]
        maxeff = [r["cb_mean"] / r["cb_rank_mean"] - 1 for r in rounds]
        bare = statistics.median(r["bare_mean"] for r in rounds)
        cb = statistics.median(r["cb_rank_mean"] for r in rounds)
        med = statistics.median(r["cb_median"] for r in rounds)
        bare_rate = 1e6 / statistics.median(r.get("bare_issue_us", math.nan) for r in rounds)
        cb_rate = 1e6 / statistics.median(r.get("cb_issue_us", math.nan) for r in rounds)
        behind = sum(r.get("cb_uncovered", 0) for r in rounds)
        batches = sum(r.get("cb_batches", 0) for r in rounds)
        figures.append(
            {
                "op": point["op"],
                "size": point["size"],
                "iters": point["iters"],
                "bare_mean_us": bare,
                "commbench_mean_us": cb,
                "commbench_median_us": med,
                "timer_overhead": statistics.median(timer),
                "per_iteration_max_effect": statistics.median(maxeff),
                "bare_issue_ops_per_s": bare_rate,
                "commbench_issue_ops_per_s": cb_rate,
                "uncovered_batches": behind,
                "batches": batches,
                "rounds": rounds,
            }
        )
        lines.append(
            f"| {point['op']} | {format_size(point['size'])} | {point['iters']} | {bare:.1f} | {cb:.1f} | "
            f"{statistics.median(timer):+.1%} ({min(timer):+.0%}..{max(timer):+.0%}) | "
            f"{statistics.median(maxeff):+.1%} | {med:.1f} | {bare_rate:,.0f} | {cb_rate:,.0f} | "
            f"{behind} of {batches} |"
        )
    bare_ns, timed_ns = harness_cost_ns()
    added_us = (timed_ns - bare_ns) / 1e3
    lines += [
        "",
        f"Harness cost per iteration around a no-op (best of 5 x 200k): bare loop {bare_ns:.0f} ns, "
        f"commbench's timer loop {timed_ns:.0f} ns: {added_us * 1e3:.0f} ns added per iteration, "
        + ", ".join(
            f"{added_us / statistics.median(r['bare_mean'] for r in p['rounds']):.3%} of {format_size(p['size'])}"
            for p in data
        )
        + ".",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        report = {
            "op": op,
            "backend": args.backend,
            "nproc": args.nproc,
            "graph": args.graph,
            "rounds": args.rounds,
            "harness_ns_per_iteration": timed_ns - bare_ns,
            "sizes": figures,
        }
        Path(args.json).write_text(dump_json(report))


if __name__ == "__main__":
    main()
