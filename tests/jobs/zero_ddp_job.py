"""ZeroRedundancyOptimizer over DDP, 2 ranks on gloo, STEPS steps, then a final barrier.
Nothing of commbench in it. Its optimizer step runs its shard's optimizer's step inside its
own, then broadcasts every rank's shard: a recorder must count one training step per
`optimizer.step()`, not two (issue 43, item 8).

Prints its own truth (tests/jobs/truth.py), from the model's parameters and the documented
behaviour of the torch 2.13 APIs it calls (torch/nn/parallel/distributed.py and reducer.cpp,
torch/distributed/optim/zero_redundancy_optimizer.py), never from a trace:

- start-up, DDP's constructor: an all_gather of each rank's parameter count (one int64) and
  a broadcast of the parameters' sizes and strides (int64) from rank 0, checking that every
  rank has the same shapes; then the parameters broadcast from rank 0 (coalesced: one
  float32 call, far under its 250 MB bucket).
- each step: the model (under DDP's first bucket of 1 MiB) is one bucket, all-reduced once
  by the backward. At step 2's forward DDP rebuilds its buckets once, in the order the
  gradients came, and broadcasts rank 0's assignment: the parameters' indices and the
  bucket count (int32, one more than the parameters), then the buckets' sizes (int32, one a
  bucket). ZeRO's step then broadcasts each rank's shard from it, rank by rank, a parameter a
  call: the parameters sorted by size, largest first (stably), each given to the rank with
  the fewest elements so far (the lowest such rank).
- after the last step, the barrier: no step.

    torchrun --nproc-per-node 2 tests/jobs/zero_ddp_job.py [--steps 5]
"""

import argparse

import torch
import torch.distributed as dist
import truth
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

WIDTH = 128
"""Small enough that the model fits DDP's first bucket of 1 MiB: one all_reduce a step."""


def shards(params: list[nn.Parameter], world: int) -> list[list[nn.Parameter]]:
    """ZeRO's partition of `params` (see the module): each rank's, in the order given."""
    per_rank: list[list[nn.Parameter]] = [[] for _ in range(world)]
    sizes = [0] * world
    for p in sorted(params, key=lambda t: t.numel(), reverse=True):
        rank = sizes.index(min(sizes))
        per_rank[rank].append(p)
        sizes[rank] += p.numel()
    return per_rank


def say_start_up(params: list[nn.Parameter], world: int) -> None:
    count = torch.tensor([len(params)], dtype=torch.int64)
    truth.say_tensor("all_gather", None, count, out_bytes=world * truth.nbytes(count))
    shapes = sum(2 * p.dim() for p in params)  # each parameter's sizes and strides
    truth.say("broadcast", None, in_bytes=8 * shapes, dtype="int64", peer=0)
    flat = sum(truth.nbytes(p) for p in params)
    truth.say("broadcast", None, in_bytes=flat, dtype="float32", peer=0)


def say_step(step: int, params: list[nn.Parameter], world: int) -> None:
    if step == 2:  # DDP's rebuilt buckets, rank 0's (one bucket)
        truth.say("broadcast", step, in_bytes=4 * (len(params) + 1), dtype="int32", peer=0)
        truth.say("broadcast", step, in_bytes=4, dtype="int32", peer=0)
    truth.say("all_reduce", step, in_bytes=sum(truth.nbytes(p) for p in params), dtype="float32")
    for rank, shard in enumerate(shards(params, world)):
        for p in shard:
            truth.say_tensor("broadcast", step, p.data, peer=rank)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(WIDTH, 2 * WIDTH), nn.ReLU(), nn.Linear(2 * WIDTH, WIDTH), nn.Linear(WIDTH, 8)
    )
    params = list(model.parameters())
    say_start_up(params, world)
    ddp = DistributedDataParallel(model)
    optimizer = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=0.01)
    for step in range(1, args.steps + 1):
        say_step(step, params, world)
        optimizer.zero_grad()
        ddp(torch.randn(16, WIDTH)).square().mean().backward()
        optimizer.step()
    truth.say_barrier(None)
    dist.barrier()
    truth.log(f"zero_ddp: {args.steps} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
