"""Four ranks and two kinds of subgroup, as 2-D parallel jobs make them: `dist.new_group`
of the pairs {0,1}, {2,3} (data parallel: each pair averages its gradients in bfloat16)
and of the cross groups {0,2}, {1,3} (an all_gather of each rank's token counts and a
broadcast of routing ids, both int64, from the cross group's second rank). Each step first
broadcasts a learning-rate schedule over the world, before its forward; 3 steps of SGD,
then a final barrier. Prints its own truth (tests/jobs/truth.py): every call is the job's
own, its tensors the job's.

    torchrun --nproc-per-node 4 tests/jobs/subgroups_job.py [--steps 3]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import truth

PAIRS = ([0, 1], [2, 3])
CROSS = ([0, 2], [1, 3])


def mine(groups: tuple[list[int], ...], handles: list[dist.ProcessGroup], rank: int):
    """This rank's group of a kind: its global ranks and its handle."""
    for ranks, handle in zip(groups, handles, strict=True):
        if rank in ranks:
            return ranks, handle
    raise SystemExit(f"rank {rank} is in no group of {groups}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 4:
        raise SystemExit("subgroups_job runs on 4 ranks")
    # every rank makes every group, in the same order
    pair_ranks, pair = mine(PAIRS, [dist.new_group(r) for r in PAIRS], rank)
    cross_ranks, cross = mine(CROSS, [dist.new_group(r) for r in CROSS], rank)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, args.steps + 1):
        schedule = torch.full((64,), 0.1 / step) if rank == 0 else torch.empty(64)
        dist.broadcast(schedule, src=0)  # before the forward: still this step's
        truth.say_tensor("broadcast", step, schedule, peer=0)
        data = torch.Generator().manual_seed(100 * step + rank)
        loss = model(torch.randn(8, 16, generator=data)).square().mean()
        loss.backward()
        for p in model.parameters():  # the pair's data-parallel average, in bfloat16
            grad = p.grad.to(torch.bfloat16)
            dist.all_reduce(grad, group=pair)
            truth.say_tensor("all_reduce", step, grad, group=pair_ranks)
            p.grad.copy_(grad).div_(len(pair_ranks))
        counts = torch.arange(4, dtype=torch.int64) + rank * step
        gathered = [torch.empty_like(counts) for _ in cross_ranks]
        dist.all_gather(gathered, counts, group=cross)
        truth.say_tensor(
            "all_gather", step, counts, out_bytes=truth.nbytes(counts) * len(cross_ranks),
            group=cross_ranks,
        )  # fmt: skip
        root = cross_ranks[1]  # a global rank that is not the group's first
        ids = (
            torch.arange(16, dtype=torch.int64)
            if rank == root
            else torch.empty(16, dtype=torch.int64)
        )
        dist.broadcast(ids, src=root, group=cross)
        truth.say_tensor("broadcast", step, ids, group=cross_ranks, peer=root)
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"subgroups_job: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
