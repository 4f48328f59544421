"""Each step broadcasts a 4 KiB tensor (a learning-rate schedule, a data-loader seed) before
its forward, then averages its gradients by hand and steps its optimizer: 3 steps, then a
final barrier. Prints its own truth, per rank: `truth: op,step` for every call it made, the
step being the training step the call was issued in (None after the last optimizer step).
The first step's broadcast is step 1's although nothing told it from start-up when it was
issued: the second step's repeating it before its forward does.

    torchrun --nproc-per-node 2 tests/jobs/prestep_job.py
    torchrun --nproc-per-node 4 tests/jobs/prestep_job.py --subgroups

With `--subgroups`, each pair of ranks ({0, 1}, {2, 3}) broadcasts in a group of its own,
from its lowest rank; making the groups is start-up's (gloo's new_group calls no collective
of c10d's, so it adds no call)."""

import argparse
import sys

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subgroups", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    group, src = None, 0
    if args.subgroups:
        pairs = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
        group, src = pairs[rank // 2], rank - rank % 2
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    truth = []
    for step in (1, 2, 3):
        seed = torch.zeros(1024)
        dist.broadcast(seed, src=src, group=group)
        truth.append(("broadcast", step))  # issued in step `step`, before its forward
        loss = model(torch.randn(8, 16)).sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            truth.append(("all_reduce", step))
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    truth.append(("barrier", None))
    for op, step in truth:  # one write a line: the ranks share the pipe
        sys.stdout.write(f"truth: {rank} {op},{step}\n")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
