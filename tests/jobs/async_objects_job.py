"""Async calls and object collectives, as a hand-written data-parallel job uses them, on 2
ranks, 3 steps of SGD. Prints its own truth (tests/jobs/truth.py).

start-up: rank 0 sends its run configuration, two Python objects, with
`broadcast_object_list`, which (torch.distributed.distributed_c10d) pickles each object
on the source rank into a uint8 tensor, broadcasts their sizes (an int64 tensor, one
element an object), then the pickled bytes concatenated (a uint8 tensor of their sum);
every rank knows the configuration here, so each computes those sizes itself.

each step: the gradients are averaged with one async all_reduce each (async_op=True),
issued as the backward is over, and waited only after an unrelated computation (a
gradient-norm estimate); an async all_to_all_single of the step's per-rank token counts
(even splits) goes with them, and with --uneven an uneven one too (rank r sends 1 + r + 2j
elements to rank j). Then the ranks' metrics are shared with `all_gather_object`:
each rank pickles its metrics dict, all_gathers the sizes (an int64 of one element), then
all_gathers its pickled bytes padded to the largest size of any rank (uint8). The metrics
are built by the same function on every rank, with values whose pickled size does not
depend on what they are (a float pickles in 8 bytes), so every rank computes every rank's
size.

the end: a final barrier.

    torchrun --nproc-per-node 2 tests/jobs/async_objects_job.py [--steps 3] [--uneven]
"""

import argparse
import pickle

import torch
import torch.distributed as dist
import torch.nn as nn
import truth

CONFIG = [{"lr": 0.05, "schedule": "cosine", "warmup": 10}, ["tokens", "layers", 4]]


def metrics(rank: int, step: int, loss: float) -> dict:
    """The metrics rank `rank` shares at `step` (a list as long as its rank + step)."""
    return {"rank": rank, "step": step, "loss": loss, "seen": list(range(rank + step))}


def sends(src: int, dst: int) -> int:
    """Elements rank `src` sends rank `dst` in the uneven all_to_all."""
    return 1 + src + 2 * dst


def pickled_size(obj: object) -> int:
    """What distributed_c10d's `_object_to_tensor` sends of `obj`: pickle's bytes."""
    return len(pickle.dumps(obj))


def share_config(rank: int) -> list:
    objects = list(CONFIG) if rank == 0 else [None] * len(CONFIG)
    dist.broadcast_object_list(objects, src=0)
    sizes = [pickled_size(o) for o in CONFIG]
    truth.say("broadcast", None, in_bytes=8 * len(sizes), dtype="int64", peer=0)
    truth.say("broadcast", None, in_bytes=sum(sizes), dtype="uint8", peer=0)
    return objects


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--uneven", action="store_true", help="an uneven all_to_all too")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = share_config(rank)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=config[0]["lr"])
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(10 * step + rank)
        loss = model(torch.randn(16, 32, generator=data)).square().mean()
        loss.backward()
        works = []
        for p in model.parameters():
            works.append(dist.all_reduce(p.grad, async_op=True))
            truth.say_tensor("all_reduce", step, p.grad, async_op=True)
        tokens = torch.full((world * 3,), float(rank + step))
        routed = torch.empty_like(tokens)
        works.append(dist.all_to_all_single(routed, tokens, async_op=True))
        truth.say_tensor("all_to_all", step, tokens, async_op=True)
        if args.uneven:
            sent = [sends(rank, peer) for peer in range(world)]
            got = [sends(peer, rank) for peer in range(world)]
            ids = torch.arange(sum(sent), dtype=torch.float32)
            back = torch.empty(sum(got))
            works.append(dist.all_to_all_single(back, ids, got, sent, async_op=True))
            truth.say("all_to_all", step, in_bytes=truth.nbytes(ids),
                      out_bytes=truth.nbytes(back), dtype="float32", async_op=True,
                      in_splits=sent, out_splits=got)  # fmt: skip
        # compute while they are in flight: the norm of the parameters, for the metrics
        norm = sum(float(p.detach().square().sum()) for p in model.parameters()) ** 0.5
        for work in works:
            work.wait()
        for p in model.parameters():
            p.grad.div_(world)
        gathered = [None] * world
        dist.all_gather_object(gathered, metrics(rank, step, loss.item() + norm * 0))
        widest = max(pickled_size(metrics(r, step, 0.0)) for r in range(world))
        truth.say("all_gather", step, in_bytes=8, out_bytes=8 * world, dtype="int64",
                  async_op=False)  # fmt: skip
        truth.say("all_gather", step, in_bytes=widest, out_bytes=widest * world,
                  dtype="uint8", async_op=False)  # fmt: skip
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"async_objects_job: {args.steps} steps, {gathered[-1]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
