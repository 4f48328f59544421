"""What does `commbench record` cost each call, in microseconds of the job's own thread?

benchmarks/record_overhead.py answers for a whole DDP step on two ranks, where gloo's noise on
2 shared cores is several percent of a step. This isolates the recorder's part: one process,
a real gloo process group of one rank, `dist.all_reduce` of 1 KiB issued back to back (a
synchronous call; an async one waited at once; eight in flight, then waited), timed

- plain;
- through a kernel that only passes each call on (`torch.library` at BackendSelect, as the
  capture registers its own): the floor of any capture at the dispatcher;
- under the capture itself (`commbench.record.capture.install`), after a module's forward
  so that a step is open and calls are written as they complete.

Each mode runs in its own process (a kernel registered stays for the process's life), the
modes alternate `--rounds` times, and each figure is the median of its rounds. A call's cost
is recorded minus plain, in wall time and in the process's CPU time (every thread's: the
completion threads' included), which the machine's other load disturbs far less; times a job's calls per step, over its step time, it bounds what the
recorder can add to the job's step on an idle machine.

    python benchmarks/record_call_cost.py                  # about 30 s
    python benchmarks/record_call_cost.py --rounds 7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("plain", "passthrough", "recorded")
SHAPES = ("sync", "async", "eight")
COLUMNS = (*SHAPES, *(f"{s} cpu" for s in SHAPES))


def child(mode: str, calls: int) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(str(Path(tmp) / "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        keep: Any = None
        if mode == "passthrough":
            keep = torch.library.Library("c10d", "IMPL")
            overload = torch.ops.c10d.allreduce_.default
            below = torch.DispatchKey.BackendSelect

            def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
                return overload.redispatch(keyset.remove(below), *args, **kwargs)

            keep.impl("allreduce_", kernel, "BackendSelect", with_keyset=True)
        elif mode == "recorded":
            from commbench.record import capture

            keep = capture.install(Path(tmp) / "trace")
        torch.nn.Linear(2, 2)(torch.ones(1, 2))  # a forward: the capture's first step opens
        tensor = torch.ones(256)

        def shape(name: str) -> None:
            if name == "sync":
                dist.all_reduce(tensor)
            elif name == "async":
                dist.all_reduce(tensor, async_op=True).wait()
            else:
                works = [dist.all_reduce(tensor, async_op=True) for _ in range(8)]
                for work in works:
                    work.wait()

        out = {}
        for name in SHAPES:
            per = 8 if name == "eight" else 1
            for _ in range(max(1, 200 // per)):
                shape(name)
            start, cpu = time.perf_counter_ns(), time.process_time_ns()
            for _ in range(calls // per):
                shape(name)
            done = calls // per * per
            out[name] = (time.perf_counter_ns() - start) / done / 1e3
            out[f"{name} cpu"] = (time.process_time_ns() - cpu) / done / 1e3
        if mode == "recorded":
            keep.close()
        dist.destroy_process_group()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.calls)))
        return
    samples: dict[str, dict[str, list[float]]] = {m: {s: [] for s in COLUMNS} for m in MODES}
    for round_ in range(args.rounds):
        order = MODES if round_ % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            done = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--calls", str(args.calls)],
                check=True, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            for name, us in json.loads(done.stdout.splitlines()[-1]).items():
                samples[mode][name].append(us)
    medians = {m: {s: statistics.median(v) for s, v in d.items()} for m, d in samples.items()}
    print(f"{'us a call':<12}" + "".join(f"{s:>11}" for s in COLUMNS))
    for mode in MODES:
        print(f"{mode:<12}" + "".join(f"{medians[mode][s]:>11.1f}" for s in COLUMNS))
    cost = {s: medians["recorded"][s] - medians["plain"][s] for s in COLUMNS}
    floor = {s: medians["passthrough"][s] - medians["plain"][s] for s in COLUMNS}
    print(f"{'recorder':<12}" + "".join(f"{cost[s]:>11.1f}" for s in COLUMNS))
    print(f"{'of it, floor':<12}" + "".join(f"{floor[s]:>11.1f}" for s in COLUMNS))
    if args.json:
        args.json.write_text(
            json.dumps({"samples_us": samples, "median_us": medians, "cost_us": cost,
                        "floor_us": floor, "calls": args.calls}, indent=2) + "\n"
        )  # fmt: skip


if __name__ == "__main__":
    main()
