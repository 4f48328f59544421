"""A small DDP training job, as a user would write it (nothing of commbench in it): an MLP of
about 4.2 MB trained for a few steps on gloo, launched by torchrun.

    torchrun --nproc-per-node 2 tests/jobs/ddp_mlp.py [--steps 3] [--bucket-cap-mb 1]
"""

import argparse
import json
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

WIDTH = 512
LAYERS = 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--bucket-cap-mb", type=float, default=1.0)
    parser.add_argument("--fail-at", type=int, default=0, help="raise at this step (tests)")
    parser.add_argument("--kill-at", type=int, default=0, help="SIGKILL itself at this step")
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--times", help="rank 0 writes each step's seconds here (JSON)")
    parser.add_argument(
        "--cpu-times", help="rank 0 writes each step's CPU seconds here (JSON, every thread's)"
    )
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(args.width, args.width) for _ in range(args.layers)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    times, cpu_times = [], []
    for step in range(1, args.steps + 1):
        if step == args.fail_at:
            raise RuntimeError(f"failing at step {step}, as asked")
        if step == args.kill_at:  # no handler, no atexit: as the OOM killer or `kill -9` does
            os.kill(os.getpid(), signal.SIGKILL)
        start, cpu = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss = ddp(torch.randn(args.batch, args.width)).square().mean()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    dist.barrier()
    if args.times and dist.get_rank() == 0:
        with open(args.times, "w") as fh:
            json.dump(times, fh)
    if args.cpu_times and dist.get_rank() == 0:
        with open(args.cpu_times, "w") as fh:
            json.dump(cpu_times, fh)
    if dist.get_rank() == 0:
        print(f"ddp_mlp: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
