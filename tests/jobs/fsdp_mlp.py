"""A small FSDP2 training job (`fully_shard` on each layer and the root), as a user would
write it: an MLP of about 4.2 MB on gloo, launched by torchrun.

    torchrun --nproc-per-node 2 tests/jobs/fsdp_mlp.py [--steps 2]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

WIDTH = 512
LAYERS = 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        opt.zero_grad()
        loss = model(torch.randn(16, WIDTH)).square().mean()
        loss.backward()
        opt.step()
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"fsdp_mlp: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
