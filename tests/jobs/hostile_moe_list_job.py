"""A mixture-of-experts step with the list form of `dist.all_to_all`: each rank routes an
uneven, step-dependent number of tokens to each expert, padded to the expert's capacity
(gloo's list all_to_all wants equal tensors; one tensor per destination), the
first collective is an all_gather_object before any module exists, and each step ends with
an all_reduce of the gradients and an all_gather_object of the step's routing counts.

    torchrun --nproc-per-node 2 tests/jobs/hostile_moe_list_job.py [--steps 3]
"""

import argparse
import pickle

import torch
import torch.distributed as dist
import torch.nn as nn
import truth

DIM = 16
CAPACITY = 6


def padded(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([t, t.new_zeros(CAPACITY - t.shape[0], DIM)])


def routed(src: int, dst: int, step: int) -> int:
    """Tokens rank `src` sends expert `dst` at `step` (uneven, changing every step)."""
    return 1 + (src * 3 + dst * 5 + step * 7) % 6


def say_object_gather(step: int | None, objs: list, world: int) -> None:
    widest = max(len(pickle.dumps(o)) for o in objs)
    truth.say("all_gather", step, in_bytes=8, out_bytes=8 * world, dtype="int64")
    truth.say("all_gather", step, in_bytes=widest, out_bytes=widest * world, dtype="uint8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    hello = [None] * world
    dist.all_gather_object(hello, {"host": f"node{rank}", "rank": rank})
    say_object_gather(None, [{"host": f"node{r}", "rank": r} for r in range(world)], world)
    torch.manual_seed(0)
    gate = nn.Linear(DIM, DIM)
    expert = nn.Linear(DIM, DIM)
    params = list(gate.parameters()) + list(expert.parameters())
    optimizer = torch.optim.SGD(params, lr=0.01)
    for step in range(1, args.steps + 1):
        sends = [routed(rank, d, step) for d in range(world)]
        recvs = [routed(s, rank, step) for s in range(world)]
        x = torch.randn(sum(sends), DIM)
        h = gate(x)
        inputs = [padded(t) for t in h.detach().split(sends)]
        outputs = [torch.empty(CAPACITY, DIM) for _ in recvs]
        dist.all_to_all(outputs, inputs)
        size = 4 * DIM * CAPACITY * world
        truth.say("all_to_all", step, in_bytes=size, dtype="float32")
        y = expert(torch.cat([o[:n] for o, n in zip(outputs, recvs)]))
        back_in = [padded(t) for t in y.detach().split(recvs)]
        back_out = [torch.empty(CAPACITY, DIM) for _ in sends]
        dist.all_to_all(back_out, back_in)
        truth.say("all_to_all", step, in_bytes=size, dtype="float32")
        loss = (h * torch.cat([o[:n] for o, n in zip(back_out, sends)])).sum() + y.sum()
        loss.backward()
        for p in params:
            dist.all_reduce(p.grad)
            truth.say_tensor("all_reduce", step, p.grad)
        counts = [None] * world
        dist.all_gather_object(counts, sends)
        say_object_gather(step, [[routed(r, d, step) for d in range(world)]
                                 for r in range(world)], world)  # fmt: skip
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
