"""FSDP2 (`fully_shard` on each linear layer and on the root), as a user writes it: an MLP of
three linears of different shapes, two of which do not divide by the world size, 3 steps
of SGD on gloo, 2 ranks. Prints its own truth (tests/jobs/truth.py), derived from the
parameter shapes, the world size and FSDP2's documented behaviour:

- sharding: each parameter is sharded on dim 0, padded to a multiple of the world size
  (`_get_dim0_padded_size`), so every rank holds ceil(dim0 / world) rows.
- a layer's all_gather (`all_gather_into_tensor`) has its parameters' padded shards as
  input, one flat buffer (weight then bias), and the world's as output; its
  reduce_scatter (`reduce_scatter_tensor`) has the padded unsharded gradients as input
  and one rank's shard as output. All float32.
- forward: each layer all-gathers its parameters as its forward begins, in order.
  Every layer but the root reshards after its forward (`reshard_after_forward` is True
  for non-root modules); the root here has no parameters of its own, so it gathers none.
- backward, in reverse: a layer's pre-backward all-gathers it again, then prefetches the
  layer before it (the default backward prefetch, one layer in `post_forward_order`),
  and its post-backward reduce-scatters its gradients: so for layers 0, 1, 2: AG2, AG1
  (prefetched), RS2, AG0 (prefetched), RS1, RS0.
- no collectives at `fully_shard` or in the optimizer's step (it steps the shards).

then a final barrier.

    torchrun --nproc-per-node 2 tests/jobs/fsdp2_job.py [--steps 3]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import truth
from torch.distributed.fsdp import fully_shard

SHAPES = ((24, 33), (33, 16), (16, 5))
"""(in, out) of each linear: out (a weight's dim 0, and the bias's) 33 and 5 do not divide by 2."""
F32 = 4


def shard_bytes(fan_in: int, fan_out: int, world: int) -> int:
    """One rank's padded shard of a Linear(fan_in, fan_out): weight [out, in] and bias [out],
    dim 0 padded to a multiple of the world size."""
    rows = -(-fan_out // world)
    return (rows * fan_in + rows) * F32


def step_truth(step: int, world: int) -> None:
    def gather(layer: int) -> None:
        shard = shard_bytes(*SHAPES[layer], world)
        truth.say("all_gather", step, in_bytes=shard, out_bytes=shard * world, dtype="float32")

    def scatter(layer: int) -> None:
        shard = shard_bytes(*SHAPES[layer], world)
        truth.say("reduce_scatter", step, in_bytes=shard * world, out_bytes=shard,
                  dtype="float32")  # fmt: skip

    last = len(SHAPES) - 1
    for layer in range(len(SHAPES)):  # forward
        gather(layer)
    gather(last)  # backward: the last layer first
    for layer in range(last, -1, -1):
        if layer > 0:
            gather(layer - 1)  # prefetched as `layer`'s backward begins
        scatter(layer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = [nn.Linear(i, o) for i, o in SHAPES]
    model = nn.Sequential(layers[0], nn.ReLU(), layers[1], nn.ReLU(), layers[2])
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step * 13 + rank)
        loss = model(torch.randn(8, SHAPES[0][0], generator=data)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step_truth(step, world)
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"fsdp2_job: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
