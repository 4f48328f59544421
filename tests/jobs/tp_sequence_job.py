"""Tensor parallel with sequence parallel, as a user writes it (the Megatron-style block of
torch's tensor-parallel tutorial): a LayerNorm under `SequenceParallel`, then an MLP with
`ColwiseParallel(input_layouts=Shard(1))` and `RowwiseParallel(output_layouts=Shard(1))`,
over a 1-D DeviceMesh of every rank, 3 steps of SGD (foreach=False) on gloo, 2 ranks. Each
rank feeds its own half of the sequence; activations are [BATCH, SEQ, DIM] float32. Prints
its own truth (tests/jobs/truth.py), derived from the plan:

start-up, `parallelize_module` in the plan's order: `SequenceParallel` makes the norm's
parameters Replicate DTensors with `from_local` (no communication: its docstring assumes the
ones initialisation); `ColwiseParallel` and `RowwiseParallel` distribute theirs from rank 0
(`src_data_rank=0`): fc1.weight Shard(0), fc1.bias Shard(0), fc2.weight Shard(1): a scatter
each (rank 0's input the whole tensor, every rank's output its chunk); fc2.bias Replicate:
a broadcast.

each step:
  forward: fc1's input, the norm's output sharded on the sequence (Shard(1)), is
  redistributed to Replicate: an all_gather of [BATCH, SEQ/2, DIM] into [BATCH, SEQ, DIM];
  fc2's output, Partial (each rank's matmul a partial sum), to Shard(1): a reduce_scatter of
  [BATCH, SEQ, DIM] into [BATCH, SEQ/2, DIM].
  backward, the other way: the gradient of fc2's output, Shard(1), to Replicate (the
  forward's Partial is taken as Replicate in the backward): an all_gather; the gradient of
  fc1's input, Partial, to its forward layout Shard(1): a reduce_scatter. The norm's input
  is the data: no gradient.
  optimizer: the norm's weight and bias gradients are Partial (each rank's half of the
  sequence sums into them), their parameters Replicate: SGD's `param.add_(grad)` reduces
  each, an all_reduce of [DIM] float32, weight then bias. The other gradients keep their
  parameters' placements: nothing.

`--two-optimizers`: one SGD for the matrices, stepped first, one for the rest (the norm's
parameters and the biases), stepped second (as with Muon beside AdamW): the all_reduces are
the second's, in the same training step.

`--broadcast-data`: rank 0 loads each step's batch and broadcasts it (Megatron's
`broadcast_data`): its shape first, an int64 [3], then the batch, [BATCH, seq, DIM]
float32, whose sequence length varies from step to step (SEQ, then 1.5 x SEQ, in turn);
each rank keeps its half. Both broadcasts are the step's, before its forward, the first
step's included.

    torchrun --nproc-per-node 2 tests/jobs/tp_sequence_job.py [--steps 3] [--two-optimizers]
        [--broadcast-data]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import truth
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

BATCH, SEQ, DIM, HIDDEN = 4, 8, 16, 32
F32 = 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.norm(x))))


def start_up_truth(rank: int, world: int) -> None:
    for numel in (HIDDEN * DIM, HIDDEN, DIM * HIDDEN):  # fc1.weight, fc1.bias, fc2.weight
        whole = numel * F32
        truth.say("scatter", None, in_bytes=whole if rank == 0 else 0, dtype="float32",
                  out_bytes=whole // world, peer=0)  # fmt: skip
    truth.say("broadcast", None, in_bytes=DIM * F32, dtype="float32", peer=0)  # fc2.bias


def seq_len(step: int, varied: bool) -> int:
    """The step's sequence length: SEQ, or with `--broadcast-data` SEQ and 1.5 x SEQ in turn
    (packed batches of varying length)."""
    return SEQ * 3 // 2 if varied and step % 2 == 0 else SEQ


def load(step: int, rank: int, world: int, broadcast: bool) -> torch.Tensor:
    """This rank's half of the step's sequence: its own, or with `broadcast` rank 0's batch,
    its shape broadcast first (int64 [3]), then the batch ([BATCH, seq, DIM] float32)."""
    if not broadcast:
        data = torch.Generator().manual_seed(step * 17 + rank)
        return torch.randn(BATCH, SEQ // world, DIM, generator=data)
    shape = torch.tensor([BATCH, seq_len(step, True), DIM] if rank == 0 else [0, 0, 0])
    dist.broadcast(shape, src=0)
    truth.say_tensor("broadcast", step, shape, peer=0, async_op=False)
    if rank == 0:
        batch = torch.randn(*shape.tolist(), generator=torch.Generator().manual_seed(step))
    else:
        batch = torch.empty(*shape.tolist())
    dist.broadcast(batch, src=0)
    truth.say_tensor("broadcast", step, batch, peer=0, async_op=False)
    return batch.chunk(world, dim=1)[rank]


def step_truth(step: int, world: int, seq: int) -> None:
    whole = BATCH * seq * DIM * F32
    part = whole // world

    def gather() -> None:
        truth.say("all_gather", step, in_bytes=part, out_bytes=whole, dtype="float32")

    def scatter() -> None:
        truth.say("reduce_scatter", step, in_bytes=whole, out_bytes=part, dtype="float32")

    gather()  # forward: fc1's input
    scatter()  # forward: fc2's output
    gather()  # backward: fc2's output gradient
    scatter()  # backward: fc1's input gradient
    for _ in ("weight", "bias"):  # the optimizer: the norm's Partial gradients
        truth.say("all_reduce", step, in_bytes=DIM * F32, dtype="float32")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--two-optimizers", action="store_true")
    parser.add_argument("--broadcast-data", action="store_true")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    plan = {
        "norm": SequenceParallel(),
        "fc1": ColwiseParallel(input_layouts=Shard(1)),
        "fc2": RowwiseParallel(output_layouts=Shard(1)),
    }
    model = parallelize_module(Block(), mesh, plan)
    start_up_truth(rank, world)
    if args.two_optimizers:  # Muon-style: one for the matrices, one for the rest, in turn
        matrices = [p for p in model.parameters() if p.ndim == 2]
        rest = [p for p in model.parameters() if p.ndim != 2]
        optimizers = [torch.optim.SGD(ps, lr=0.01, foreach=False) for ps in (matrices, rest)]
    else:
        optimizers = [torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)]
    for step in range(1, args.steps + 1):
        x = load(step, rank, world, args.broadcast_data)
        loss = model(x).square().mean()
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
        step_truth(step, world, seq_len(step, args.broadcast_data))
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"tp_sequence_job: {args.steps} steps, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
