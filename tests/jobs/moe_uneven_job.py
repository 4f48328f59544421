"""A mixture-of-experts step on every rank, the way expert parallelism routes tokens: a
seeded router sends each token to one rank's expert, so each step's all_to_all splits are
uneven and change from step to step. For the tests that `commbench record` keeps each
all_to_all's splits and `commbench replay` issues exactly those.

Each step: the router's forward (a module: it opens the step), an all_to_all of the token
counts (even, one int64 per rank), the dispatch (`all_to_all_single` with the counts as
splits), the expert, the combine (the splits the other way), the optimizer's step. Every
all_to_all prints its own ground truth, in elements:

    truth: <rank> all_to_all,<step>,<in_splits>,<out_splits>     (splits joined by '-')
"""

import argparse
import sys

import torch
import torch.distributed as dist

TOKENS = 48
HIDDEN = 8


def exchange(out, inp, out_splits, in_splits, step: int, per_row: int) -> None:
    """`all_to_all_single` with row splits, and its truth line in elements."""
    dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    rank = dist.get_rank()
    ins = "-".join(str(s * per_row) for s in in_splits)
    outs = "-".join(str(s * per_row) for s in out_splits)
    # one write per line: the ranks share the terminal, and print's newline is a write of its own
    sys.stdout.write(f"truth: {rank} all_to_all,{step},{ins},{outs}\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same router and experts on every rank
    router = torch.nn.Linear(HIDDEN, world)
    expert = torch.nn.Linear(HIDDEN, HIDDEN)
    optimizer = torch.optim.SGD([*router.parameters(), *expert.parameters()], lr=0.01)
    for step in range(1, args.steps + 1):
        tokens = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(TOKENS, HIDDEN, generator=tokens) + 0.5 * step
        with torch.no_grad():
            dest = router(x).argmax(dim=1)  # each token's expert: one rank's
        order = dest.argsort(stable=True)
        send_counts = torch.bincount(dest, minlength=world)
        recv_counts = torch.empty_like(send_counts)
        exchange(recv_counts, send_counts, [1] * world, [1] * world, step, 1)
        in_splits, out_splits = send_counts.tolist(), recv_counts.tolist()
        routed = torch.empty(sum(out_splits), HIDDEN)
        exchange(routed, x[order].contiguous(), out_splits, in_splits, step, HIDDEN)
        y = expert(routed)
        back = torch.empty(TOKENS, HIDDEN)
        exchange(back, y.detach(), in_splits, out_splits, step, HIDDEN)
        loss = y.square().mean() + back.sum() * 0
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
