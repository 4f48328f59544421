"""Tensor parallel with DTensor, as a user writes it: a replicated input projection, then a
2-layer MLP split over a 1-D DeviceMesh of every rank with `parallelize_module`
(ColwiseParallel on the first linear, RowwiseParallel on the second), 3 steps of SGD on
gloo. Prints its own truth (tests/jobs/truth.py), derived from the TP plan:

start-up, `parallelize_module` distributes each parameter from rank 0 (`src_data_rank=0`,
the default of every ParallelStyle): `distribute_tensor` scatters a Shard placement
(`mesh_scatter`: rank 0 passes the whole tensor, split in equal contiguous chunks, every
rank receives its chunk) and broadcasts a Replicate one, in `named_parameters` order of each
module, the plan's modules in the plan's order:
  fc1.weight Shard(0) scatter, fc1.bias Shard(0) scatter, fc2.weight Shard(1) scatter,
  fc2.bias Replicate broadcast.

each step, two all_reduces of the activations [BATCH, DIM] float32 over the mesh:
  forward: RowwiseParallel's output is Partial (each rank's matmul holds a partial sum) and
  its output layout Replicate: redistribute Partial -> Replicate, an all_reduce;
  backward: the gradient of ColwiseParallel's input, whose forward layout was Replicate, is
  Partial (grad_input = grad_out[:, shard] @ weight[shard, :] sums over the ranks' shards):
  `DTensor.from_local`'s backward redistributes it to Replicate, an all_reduce. (It exists
  because the input requires grad: the replicated projection before the MLP.) The other
  gradients need none: the gradient of RowwiseParallel's output is Replicate (a Partial
  forward layout is normalized to Replicate in the backward), and every parameter's
  gradient keeps its parameter's placement. The optimizer steps each rank's shards: none.

    torchrun --nproc-per-node 2 tests/jobs/tp_dtensor_job.py [--steps 3]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import truth
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

BATCH, DIM, HIDDEN = 8, 32, 64
F32 = 4


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(DIM, DIM)  # replicated: its output requires grad
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.proj(x))))


def start_up_truth(rank: int, world: int) -> None:
    """The parameters distributed from rank 0: a scatter's input is the whole tensor at its
    root and nothing elsewhere, its output one rank's chunk."""
    for numel in (HIDDEN * DIM, HIDDEN, DIM * HIDDEN):  # fc1.weight, fc1.bias, fc2.weight
        whole = numel * F32
        truth.say("scatter", None, in_bytes=whole if rank == 0 else 0, dtype="float32",
                  out_bytes=whole // world, peer=0)  # fmt: skip
    truth.say("broadcast", None, in_bytes=DIM * F32, dtype="float32", peer=0)  # fc2.bias


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    model = parallelize_module(MLP(), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    start_up_truth(rank, world)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step)  # the same batch on every rank
        x = torch.randn(BATCH, DIM, generator=data)
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        activations = BATCH * DIM * F32
        truth.say("all_reduce", step, in_bytes=activations, dtype="float32")  # fc2's output
        truth.say("all_reduce", step, in_bytes=activations, dtype="float32")  # fc1's input grad
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"tp_dtensor_job: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
