"""What does the exact correctness check cost next to the op it checks?

Two measurements, because a shared 2-core VM makes wall times noisy:

* in-process (the primary figure): one torchrun launch; at every size, one iteration of the
  op and one full `check` (fill the pattern, run the op once, verify every element) are
  timed alternately, `--reps` times each, maximum over ranks per repeat, median over
  repeats. The check's share of a point is check / (check + (warmup + iters) x op), what
  the check adds to a sweep of `--warmup` + `--iters` iterations per point; "sweep" sums
  it over the sizes.
* sweep: `commbench collectives --ops OPS --sizes SIZES --iters N --warmup W` with and
  without `--no-check`, alternating, `--sweep-repeats` pairs, median wall time of each
  (this includes torchrun's start-up, the probe and the plots, the same in both).

    python benchmarks/check_cost.py                      # CPU, gloo, 2 ranks, all_reduce 1K-64M:x4
    python benchmarks/check_cost.py --part inproc --ops all_reduce,all_gather --dtype bfloat16
    python benchmarks/check_cost.py --device cuda --backend nccl --nproc 1

Run it with PYTHONPATH pointing at another checkout to measure that checkout's check.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from commbench.collectives import ops
    from commbench.collectives.registry import collective
    from commbench.collectives.specs import plan_size

    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    cuda = args.device == "cuda"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    group = ops.Group(handle=None, ranks=list(range(world)), rank=rank)
    dtype = ops.TORCH_DTYPES[args.dtype]

    def now() -> float:
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter()

    def max_over_ranks(value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    out = []
    for op in args.ops:
        for size in args.sizes:
            count = plan_size(op, size, args.dtype, world).count
            entry = collective(op)
            bufs = entry.buffers(count, dtype, device, group, in_place=False)
            call = entry.call(bufs, group, args.reduce_op, async_op=False)
            for _ in range(2):
                call()
            op_s, check_s, ok = [], [], True
            for _ in range(args.reps):
                bufs.out.zero_()  # the check starts from the timed iterations' zeros
                dist.barrier()
                t0 = now()
                call()
                op_s.append(max_over_ranks(now() - t0))
                bufs.out.zero_()
                dist.barrier()
                t0 = now()
                ok &= entry.check(bufs, call, group, args.reduce_op)
                check_s.append(max_over_ranks(now() - t0))
            out.append(
                {
                    "op": op,
                    "size": size,
                    "op_s": statistics.median(op_s),
                    "check_s": statistics.median(check_s),
                    "ok": ok,
                }
            )
            del bufs, call
    if rank == 0:
        Path(args.output).write_text(json.dumps(out))
    dist.destroy_process_group()


def inproc(args: argparse.Namespace, sizes: list[int]) -> list[str]:
    from commbench.sizes import format_size

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
            *_common_flags(args),
            "--sizes",
            ",".join(map(str, sizes)),
            "--reps",
            str(args.reps),
            "--output",
            str(output),
        ]
        # the workers' thread count, as commbench's launcher sets it
        env = {**os.environ, "COMMBENCH_BENCH_WORKER": "1", "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, env=env)
        data = json.loads(output.read_text())
    per_point = args.warmup + args.iters
    lines = [
        f"in-process: {args.dtype} op={args.reduce_op}, {args.backend} on {args.device}, "
        f"{args.nproc} ranks, median of {args.reps} alternating repeats (max over ranks); "
        f"share = check / (check + {per_point} x op)",
        "",
        "| op | size | one op (ms) | check (ms) | check / op | check's share of the point | ok |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for p in data:
        share = p["check_s"] / (p["check_s"] + per_point * p["op_s"])
        lines.append(
            f"| {p['op']} | {format_size(p['size'])} | {p['op_s'] * 1e3:.3f} | "
            f"{p['check_s'] * 1e3:.3f} | {p['check_s'] / p['op_s']:.2f} | {share:.1%} | "
            f"{'yes' if p['ok'] else 'NO'} |"
        )
    for op in args.ops:
        points = [p for p in data if p["op"] == op]
        check = sum(p["check_s"] for p in points)
        timed = sum(per_point * p["op_s"] for p in points)
        lines.append(
            f"\n{op}, whole sweep: check {check:.3f} s, {per_point} x op {timed:.3f} s: "
            f"the check is {check / (check + timed):.1%} of the two together."
        )
    return lines


def sweep(args: argparse.Namespace, sizes_text: str) -> list[str]:
    walls: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.sweep_repeats):
            for checked in (True, False):
                cmd = [
                    sys.executable,
                    "-m",
                    "commbench",
                    "collectives",
                    "--device",
                    args.device,
                    "--backend",
                    args.backend,
                    "--nproc",
                    str(args.nproc),
                    "--ops",
                    ",".join(args.ops),
                    "--dtype",
                    args.dtype,
                    "--reduce-op",
                    args.reduce_op,
                    "--sizes",
                    sizes_text,
                    "--iters",
                    str(args.iters),
                    "--warmup",
                    str(args.warmup),
                    "--out",
                    tmp,
                    "--check" if checked else "--no-check",
                ]
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                walls[checked].append(time.perf_counter() - t0)
    on, off = statistics.median(walls[True]), statistics.median(walls[False])
    return [
        f"sweep: `commbench collectives --device {args.device} --ops {','.join(args.ops)} "
        f"--sizes {sizes_text} --iters {args.iters} --warmup {args.warmup}` "
        f"({args.nproc} ranks, {args.dtype}, op={args.reduce_op}), "
        f"{args.sweep_repeats} alternating pairs",
        "",
        f"- with the check: median {on:.2f} s (runs: {', '.join(f'{w:.1f}' for w in walls[True])})",
        f"- `--no-check`: median {off:.2f} s (runs: {', '.join(f'{w:.1f}' for w in walls[False])})",
        f"- difference: {on - off:+.2f} s, {(on - off) / on:+.1%} of the checked sweep's wall time",
    ]


def _common_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--device",
        args.device,
        "--backend",
        args.backend,
        "--ops",
        ",".join(args.ops),
        "--dtype",
        args.dtype,
        "--reduce-op",
        args.reduce_op,
        "--iters",
        str(args.iters),
        "--warmup",
        str(args.warmup),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["both", "inproc", "sweep"], default="both")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--ops", default="all_reduce", help="comma list")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--reduce-op", default="sum")
    p.add_argument("--sizes", default="1K-64M:x4")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=7, help="in-process repeats per size")
    p.add_argument("--sweep-repeats", type=int, default=5, help="sweep pairs (check, no check)")
    p.add_argument("--markdown", default=None, help="Also write the tables to this file.")
    p.add_argument("--output", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if os.environ.get("COMMBENCH_BENCH_WORKER"):
        args.sizes = [int(s) for s in args.sizes.split(",")]
        worker(args)
        return
    from commbench.sizes import parse_sizes

    lines: list[str] = []
    if args.part in ("both", "inproc"):
        lines += inproc(args, parse_sizes(args.sizes))
    if args.part in ("both", "sweep"):
        lines += ["", *sweep(args, args.sizes)]
    text = "\n".join(lines).strip() + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
