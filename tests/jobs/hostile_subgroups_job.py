"""Subgroups made by `dist.new_subgroups` (pairs) and by `new_group` with
use_local_synchronization=True (the even ranks, the odd ranks), on 4 ranks: each step a
bf16 all_reduce in the pair, an int64 all_gather in the parity group, a broadcast from the
parity group's highest rank, and a world all_reduce of the gradients.

    torchrun --nproc-per-node 4 tests/jobs/hostile_subgroups_job.py [--steps 3]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pair, _ = dist.new_subgroups(group_size=2)
    pair_ranks = truth.ranks(pair)
    parity_ranks = [r for r in range(world) if r % 2 == rank % 2]
    parity = dist.new_group(parity_ranks, use_local_synchronization=True)
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, args.steps + 1):
        loss = model(torch.randn(2, 8)).sum()
        loss.backward()
        h = torch.full((5 + step,), float(rank), dtype=torch.bfloat16)
        dist.all_reduce(h, group=pair)
        truth.say_tensor("all_reduce", step, h, group=pair_ranks)
        ids = torch.arange(step, dtype=torch.int64) + rank
        out = [torch.empty_like(ids) for _ in parity_ranks]
        dist.all_gather(out, ids, group=parity)
        truth.say_tensor("all_gather", step, ids, out_bytes=truth.nbytes(ids) * len(out),
                         group=parity_ranks)  # fmt: skip
        src = max(parity_ranks)
        b = torch.zeros(3, 4)
        dist.broadcast(b, src=src, group=parity)
        truth.say_tensor("broadcast", step, b, group=parity_ranks, peer=src)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            truth.say_tensor("all_reduce", step, p.grad)
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
