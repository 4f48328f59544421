"""Batched point-to-point and coalesced collectives, the way Megatron-style jobs use them, on
2 ranks (or more): 3 steps of SGD. Prints its own truth (tests/jobs/truth.py).

each step:
- a ring exchange with `dist.batch_isend_irecv`: each rank sends its activations to the
  next rank and receives the previous rank's (rank r sends 64 * (r + 1) float32). On a
  backend without coalescing (gloo) torch issues the batch's isend and irecv one after the
  other, in the list's order (`batch_isend_irecv`: "backend not support coalescing"):
  a send to r + 1, then a recv from r - 1, whose input is nothing and whose output the
  buffer received into.
- `_coalescing_manager` (torch.distributed.distributed_c10d; private, and called by
  Megatron-style jobs) around an all_reduce of each gradient: inside it, each all_reduce is
  only noted; on leaving, torch issues them as one `allreduce_coalesced` of the gradients
  together (all float32), which is one call of their summed bytes.
- the same with `async_ops=True` around `all_gather_into_tensor` of two shards of the
  parameters, waited with `cm.wait()`: one `allgather_into_tensor_coalesced`, its input
  the shards' bytes together, its output the world's.

then a final barrier.

On gloo and the CPU by default; `--device cuda` runs it on NCCL, one GPU per rank (torchrun's
LOCAL_RANK), for `make gpu-check` (tests/test_record_gpu.py), where the coalesced calls go as
one NCCL group each and the batch as one NCCL group launch. On one GPU it runs at world size 1,
where there is no other rank to exchange with: the ring is left out, and its truth with it.

    torchrun --nproc-per-node 2 tests/jobs/coalesced_job.py [--steps 3] [--device cuda]
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import truth
from torch.distributed.distributed_c10d import _coalescing_manager


def width(rank: int) -> int:
    """Elements rank `rank` sends in the ring."""
    return 64 * (rank + 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 24), nn.GELU(), nn.Linear(24, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step + 31 * rank)
        out = model(torch.randn(8, 16, generator=data).to(device))
        loss = out.square().mean()
        loss.backward()
        if world > 1:  # torch refuses a send to oneself
            # the ring: my activations (padded to my width) to the next rank, the previous
            # rank's in
            mine = torch.zeros(width(rank), device=device)
            mine[: out.numel()] = out.detach().reshape(-1)[: width(rank)]
            theirs = torch.empty(width(prev), device=device)
            ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, theirs, prev)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            batch = step - 1  # one batch_isend_irecv a step
            truth.say_tensor("send", step, mine, peer=nxt, batch=batch)
            truth.say("recv", step, in_bytes=0, out_bytes=truth.nbytes(theirs), dtype="float32",
                      peer=prev, batch=batch)  # fmt: skip
        grads = [p.grad for p in model.parameters()]
        with _coalescing_manager():
            for g in grads:
                dist.all_reduce(g)
        truth.say("all_reduce", step, in_bytes=sum(truth.nbytes(g) for g in grads),
                  dtype="float32")  # fmt: skip
        for g in grads:
            g.div_(world)
        shards = [model[0].weight.detach().reshape(-1)[:32], model[2].bias.detach()]
        gathered = [torch.empty(s.numel() * world, device=device) for s in shards]
        with _coalescing_manager(async_ops=True) as cm:
            for whole, shard in zip(gathered, shards, strict=True):
                dist.all_gather_into_tensor(whole, shard)
        cm.wait()
        shard_bytes = sum(truth.nbytes(s) for s in shards)
        truth.say("all_gather", step, in_bytes=shard_bytes, out_bytes=shard_bytes * world,
                  dtype="float32")  # fmt: skip
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"coalesced_job: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
