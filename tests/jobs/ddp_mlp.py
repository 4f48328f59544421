"""A small DDP training job, as a user would write it (nothing of commbench in it): an MLP of
about 4.2 MB trained for a few steps on gloo, launched by torchrun.

    torchrun --nproc-per-node 2 tests/jobs/ddp_mlp.py [--steps 3] [--bucket-cap-mb 1]
"""

import argparse

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
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(1, args.steps + 1):
        if step == args.fail_at:
            raise RuntimeError(f"failing at step {step}, as asked")
        opt.zero_grad()
        loss = ddp(torch.randn(16, WIDTH)).square().mean()
        loss.backward()
        opt.step()
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"ddp_mlp: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
