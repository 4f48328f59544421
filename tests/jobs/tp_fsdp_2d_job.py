"""2-D parallel, as a user writes it (torch's FSDP2 + TP recipe): a DeviceMesh of 4 ranks
`init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))`, tensor parallel within "tp"
(a 2-layer MLP: ColwiseParallel, then RowwiseParallel, after a replicated input projection),
then FSDP2 over "dp" (`fully_shard` on each of the MLP's linears, then on the root, which
holds the projection). 3 steps of SGD (foreach=False) on gloo. Ranks 2d + t: the "tp" groups
are {0, 1} and {2, 3}, the "dp" groups {0, 2} and {1, 3}; the two ranks of a "tp" group feed
the same batch, the "dp" replicas different ones. Prints its own truth (tests/jobs/truth.py):

start-up, `parallelize_module` over the rank's "tp" group distributes fc1 and fc2 from the
group's first rank (`src_data_rank=0`: global rank 0 or 2): fc1.weight Shard(0), fc1.bias
Shard(0), fc2.weight Shard(1) a scatter each, fc2.bias Replicate a broadcast.
`fully_shard` makes no collectives.

each step (FSDP2's order, as in fsdp2_job.py, over the rank's "dp" group, on the TP-local
tensors: each parameter's local TP shard is sharded again on dim 0, padded to a multiple of
2; "TP" collectives over the "tp" group, of [BATCH, DIM] float32 activations):
  forward: the root's all_gather (the projection), fc1's, fc2's; fc2's output Partial ->
  Replicate: a TP all_reduce.
  backward: fc2's output is the root's output too, and its pre-backward hook was registered
  first (fc2's forward ends before the root's): fc2 all-gathers and prefetches the group
  before it in the post-forward order, fc1; the root's pre-backward has nothing to do (the
  root keeps its parameters after forward; fc2 is gathered). fc2's post-backward
  reduce-scatters it. fc1's input gradient, Partial, back to the forward's Replicate: a TP
  all_reduce (its `from_local`'s backward, which runs before FSDP's post-backward hook on
  fc1's input: the FSDP pre-forward hook was prepended to TP's), then fc1's reduce_scatter.
  The root's input is the data: its reduce_scatter runs in the backward's final callback.
  The optimizer steps each rank's shards: nothing.

    torchrun --nproc-per-node 4 tests/jobs/tp_fsdp_2d_job.py [--steps 3]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import truth
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

BATCH, DIM, HIDDEN = 8, 32, 64
F32 = 4
DP, TP = 2, 2


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(DIM, DIM)
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.proj(x))))


def fsdp_bytes(*local_shapes: tuple[int, ...]) -> int:
    """One dp rank's padded shard of a group whose parameters' TP-local shapes are given."""
    total = 0
    for shape in local_shapes:
        rows = -(-shape[0] // DP)
        rest = 1
        for d in shape[1:]:
            rest *= d
        total += rows * rest
    return total * F32


ROOT = fsdp_bytes((DIM, DIM), (DIM,))  # proj: plain tensors
FC1 = fsdp_bytes((HIDDEN // TP, DIM), (HIDDEN // TP,))  # Shard(0) over tp
FC2 = fsdp_bytes((DIM, HIDDEN // TP), (DIM,))  # weight Shard(1), bias Replicate


def start_up_truth(rank: int, tp_group: list[int]) -> None:
    root = tp_group[0]
    for numel in (HIDDEN * DIM, HIDDEN, DIM * HIDDEN):  # fc1.weight, fc1.bias, fc2.weight
        whole = numel * F32
        truth.say("scatter", None, in_bytes=whole if rank == root else 0, dtype="float32",
                  out_bytes=whole // TP, group=tp_group, peer=root)  # fmt: skip
    truth.say("broadcast", None, in_bytes=DIM * F32, dtype="float32", group=tp_group,
              peer=root)  # fmt: skip


def step_truth(step: int, dp_group: list[int], tp_group: list[int]) -> None:
    def gather(shard: int) -> None:
        truth.say("all_gather", step, in_bytes=shard, out_bytes=shard * DP, dtype="float32",
                  group=dp_group)  # fmt: skip

    def scatter(shard: int) -> None:
        truth.say("reduce_scatter", step, in_bytes=shard * DP, out_bytes=shard,
                  dtype="float32", group=dp_group)  # fmt: skip

    def tp_reduce() -> None:
        truth.say("all_reduce", step, in_bytes=BATCH * DIM * F32, dtype="float32",
                  group=tp_group)  # fmt: skip

    gather(ROOT)  # forward
    gather(FC1)
    gather(FC2)
    tp_reduce()  # fc2's output
    gather(FC2)  # backward: fc2's pre-backward, then its prefetch of fc1
    gather(FC1)
    scatter(FC2)
    tp_reduce()  # fc1's input gradient
    scatter(FC1)
    scatter(ROOT)  # the final callback


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if dist.get_world_size() != DP * TP:
        raise SystemExit(f"tp_fsdp_2d_job: needs {DP * TP} ranks")
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"))
    dp, tp = rank // TP, rank % TP
    tp_group = [dp * TP + t for t in range(TP)]
    dp_group = [d * TP + tp for d in range(DP)]
    model = MLP()
    parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    start_up_truth(rank, tp_group)
    fully_shard(model.fc1, mesh=mesh["dp"])
    fully_shard(model.fc2, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step * 31 + dp)  # one batch per tp group
        loss = model(torch.randn(BATCH, DIM, generator=data)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step_truth(step, dp_group, tp_group)
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"tp_fsdp_2d_job: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
