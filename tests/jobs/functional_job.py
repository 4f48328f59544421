"""Functional collectives (`torch.distributed._functional_collectives`, the only place torch
offers them), eager and under `torch.compile`, in a hand-written ZeRO-style job on 2 ranks:
3 steps of SGD. Prints its own truth (tests/jobs/truth.py) and, on rank 0, the compile time.

start-up: the compiled function (an all_reduce of a [4] float32 tensor over the world) is
called once, so that it is compiled before the first step (compiling takes seconds: a
replay paced by the recording would wait that out in a step). Its call is one all_reduce
of its input's bytes: what the graph runs is the functional all_reduce of that tensor.

each step, eager: the gradients, flattened and padded to a multiple of the world size, are
reduce-scattered (`reduce_scatter_single`, formerly `reduce_scatter_tensor`: the input is
the whole flat buffer, the output one rank's shard) and the averaged shards all-gathered
back (`all_gather_single`, formerly `all_gather_tensor`, gather_dim=0: the input is the
shard, the output the whole buffer); then the loss is all-reduced for the log
(`all_reduce` of one float32). Compiled: the squared gradient norm's parts, a [4] float32,
all-reduced by the compiled function. Each functional collective is one c10d call.

    torchrun --nproc-per-node 2 tests/jobs/functional_job.py [--steps 3] [--backend inductor]
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
import truth

# the new names (torch 2.10 deprecated the old ones); the same collectives
all_gather_single = getattr(funcol, "all_gather_single", funcol.all_gather_tensor)
reduce_scatter_single = getattr(funcol, "reduce_scatter_single", funcol.reduce_scatter_tensor)


def norm_parts(parts: torch.Tensor) -> torch.Tensor:
    """Compiled: the world's sum of the norm's parts."""
    return funcol.all_reduce(parts, "sum", dist.group.WORLD) * 1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    world_group = dist.group.WORLD
    compiled = torch.compile(norm_parts, backend=args.backend, fullgraph=True)
    start = time.perf_counter()
    parts = torch.ones(4)
    compiled(parts).sum().item()
    truth.say_tensor("all_reduce", None, parts)
    compile_s = time.perf_counter() - start
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 30), nn.ReLU(), nn.Linear(30, 5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step * 7 + rank)
        loss = model(torch.randn(8, 16, generator=data)).square().mean()
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        padded = torch.zeros(-(-flat.numel() // world) * world)
        padded[: flat.numel()] = flat
        shard = reduce_scatter_single(padded, "sum", 0, world_group)
        truth.say("reduce_scatter", step, in_bytes=truth.nbytes(padded),
                  out_bytes=truth.nbytes(padded) // world, dtype="float32")  # fmt: skip
        shard = shard / world
        whole = all_gather_single(shard, 0, world_group)
        truth.say("all_gather", step, in_bytes=truth.nbytes(padded) // world,
                  out_bytes=truth.nbytes(padded), dtype="float32")  # fmt: skip
        offset = 0
        for g in grads:
            g.copy_(whole[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        logged = funcol.all_reduce(loss.detach().reshape(1), "sum", world_group)
        truth.say("all_reduce", step, in_bytes=4, dtype="float32")
        parts = torch.stack([g.square().sum() for g in grads])
        total = compiled(parts)
        truth.say_tensor("all_reduce", step, parts)
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(
            f"functional_job: {args.steps} steps, loss {float(logged[0]) / world:.4f}, "
            f"norm {float(total.sum()) ** 0.5:.4f}, compile ({args.backend}) {compile_s:.1f} s"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
