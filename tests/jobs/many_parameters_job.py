"""A job whose optimizer steps many small parameters (100,000 by default): for the test that
`commbench record` writes a trace of them that `commbench replay --rebucket` then reads
(issue 33, F1). One process, world size 1, a file rendezvous; the gradients are all-reduced
as one flat tensor, as a DDP bucket would be.

    many_parameters_job.py [--parameters N] [--steps S]
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parameters", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    weights = torch.nn.ParameterList(
        torch.nn.Parameter(torch.ones(1 + i % 4)) for i in range(args.parameters)
    )
    optimizer = torch.optim.SGD(weights.parameters(), lr=0.1)
    for _ in range(args.steps):
        for p in weights:
            p.grad = torch.ones_like(p)
        flat = torch.cat([p.grad for p in weights])
        dist.all_reduce(flat)
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
