"""DDP with `find_unused_parameters=True`, a branch unused on some steps, and gradient
accumulation: 2 micro-steps per optimizer step, the first under `no_sync()`. 2 ranks on gloo,
STEPS optimizer steps, then a final barrier. Nothing of commbench in it.

Prints its own truth, per rank, from the model's parameter sizes and DDP's documented
bucketing (torch 2.13's torch/nn/parallel/distributed.py and reducer.hpp), never from a
trace: `truth: RANK all_reduce DTYPE BYTES STEP` for each all-reduce a step issues, in
order, then the barrier.

- `no_sync()` leaves a micro-step's gradients in place: only the syncing micro-step's
  backward all-reduces, once per optimizer step.
- With find_unused_parameters the buckets are assigned once, by the constructor, and never
  rebuilt (`Reducer::should_rebuild_buckets` is false for it): the parameters in definition
  order, a bucket closed once it holds at least its limit (`_compute_bucket_assignment_by_size`
  with the limits `[bucket_bytes_cap]`: an explicit `bucket_cap_mb` is also the first
  bucket's limit, `_BucketCapacityConfig`), the buckets sorted by their first parameter,
  then reversed: the all-reduces go last-defined first, whatever the branch does (a bucket
  of unused parameters is all-reduced too).
- Each syncing backward also all-reduces the local-used map, one int32 per parameter, to
  find the parameters no rank used (it is issued after the buckets, at the backward's end).

    torchrun --nproc-per-node 2 tests/jobs/ddp_unused_job.py [--bucket-cap-mb 2]
    python tests/jobs/ddp_unused_job.py --buckets 1,2,4     # DDP's own buckets, per cap

`--buckets` (one process, no torchrun) builds a DDP of the model at each cap, with and
without find_unused_parameters, and prints the buckets DDP itself all-reduces at its second
step, as a comm hook sees them: `buckets: FIND_UNUSED CAP_MB SIZE,SIZE,...`, in order.
"""

import argparse
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

WIDTH = 512
STEPS = 3
MICRO_STEPS = 2
MIB = 1024 * 1024


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(3)])
        self.branch = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, 16)

    def forward(self, x: torch.Tensor, use_branch: bool) -> torch.Tensor:
        x = self.trunk(x)
        if use_branch:
            x = torch.relu(self.branch(x))
        return self.head(x)


def buckets(model: nn.Module, cap_bytes: int) -> list[int]:
    """DDP's buckets of `model` with find_unused_parameters and an explicit cap, in the
    order they are all-reduced (see the module)."""
    sizes, open_bytes = [], 0
    for p in model.parameters():  # one dtype: one open bucket
        open_bytes += p.numel() * p.element_size()
        if open_bytes >= cap_bytes:
            sizes.append(open_bytes)
            open_bytes = 0
    if open_bytes:
        sizes.append(open_bytes)
    return sizes[::-1]


def truth(model: nn.Module, cap_bytes: int, rank: int) -> list[str]:
    count = sum(1 for _ in model.parameters())
    lines = []
    for step in range(1, STEPS + 1):
        lines += [f"all_reduce float32 {b} {step}" for b in buckets(model, cap_bytes)]
        lines.append(f"all_reduce int32 {4 * count} {step}")  # the local-used map
    lines.append("barrier - 0 None")
    return [f"truth: {rank} {line}\n" for line in lines]


def train(cap_mb: float) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    ddp = DistributedDataParallel(model, bucket_cap_mb=cap_mb, find_unused_parameters=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(1, STEPS + 1):
        for micro in range(MICRO_STEPS):
            use_branch = step % 2 == 1  # unused on even steps, on every rank alike
            x = torch.randn(8, WIDTH)
            if micro < MICRO_STEPS - 1:
                with ddp.no_sync():
                    ddp(x, use_branch).square().mean().backward()
            else:
                ddp(x, use_branch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    for line in truth(model, int(cap_mb * MIB), rank):  # one write a line: ranks share it
        sys.stdout.write(line)
        sys.stdout.flush()
    dist.destroy_process_group()


def report_buckets(caps_mb: list[float]) -> None:
    """DDP's own buckets of the model at each cap, with and without find_unused_parameters,
    as its comm hook sees them (`register_comm_hook`: one call per bucket, in the order they
    go) at its second step, when a reducer that rebuilds has rebuilt."""
    store = tempfile.mkdtemp()
    dist.init_process_group("gloo", init_method=f"file://{store}/rendezvous", rank=0, world_size=1)

    def seen(sizes: list[int], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        sizes.append(bucket.buffer().numel() * bucket.buffer().element_size())
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(bucket.buffer())  # one rank: its sum is its own
        return done

    for find_unused in (True, False):
        for cap in caps_mb:
            ddp = DistributedDataParallel(
                Net(), bucket_cap_mb=cap, find_unused_parameters=find_unused
            )
            sizes: list[int] = []
            ddp.register_comm_hook(sizes, seen)
            for _ in range(2):
                sizes.clear()
                ddp(torch.randn(8, WIDTH), True).square().mean().backward()
            print(f"buckets: {find_unused} {cap:g} {','.join(map(str, sizes))}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bucket-cap-mb", type=float, default=2.0)
    parser.add_argument("--buckets", help="caps in MB, comma-separated: print DDP's buckets")
    args = parser.parse_args()
    if args.buckets:
        report_buckets([float(c) for c in args.buckets.split(",")])
    else:
        train(args.bucket_cap_mb)


if __name__ == "__main__":
    main()
