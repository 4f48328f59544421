"""Tensor parallel with a vocabulary-parallel loss, as torchtitan writes it: a replicated
projection, then an output head under `ColwiseParallel(output_layouts=Shard(-1),
use_local_output=False)` whose logits stay sharded over the vocabulary, and the cross
entropy computed on them under `loss_parallel()`, over a 1-D DeviceMesh of every rank, 3
steps of SGD (foreach=False) on gloo, 2 ranks. Prints its own truth (tests/jobs/truth.py),
derived from the plan and torch 2.13's distributed/tensor/parallel/loss.py:

start-up, `parallelize_module` distributes the head from rank 0: weight Shard(0), bias
Shard(0), a scatter each.

each step:
  forward: the head's input, Replicate, needs nothing. `cross_entropy` on logits sharded
  over the classes is `log_softmax` then `nll_loss`, each with its collectives inserted:
  `_log_softmax` all-reduces the rows' local maxima (MAX), then their local sums of
  exponentials (SUM), each [BATCH, 1] float32; `_nll_loss_forward` gathers each row's
  target logit where its rank holds it (`_MaskPartial`) and all-reduces them, [BATCH, 1]
  float32. The mean over the batch is local (Replicate).
  backward: `_nll_loss_and_log_softmax_backward` is local; the gradient of the head's
  input, Partial (the shards' sum), back to its forward layout Replicate: an all_reduce of
  [BATCH, DIM] float32 (the input requires grad: the projection before it).
  optimizer: the head's gradients keep its Shard(0): nothing.

    torchrun --nproc-per-node 2 tests/jobs/tp_loss_parallel_job.py [--steps 3]
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import truth
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module

BATCH, DIM, VOCAB = 8, 32, 64
F32 = 4


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.proj(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    plan = {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    model = parallelize_module(Model(), mesh, plan)
    for numel in (VOCAB * DIM, VOCAB):  # head.weight, head.bias: Shard(0) from rank 0
        whole = numel * F32
        truth.say("scatter", None, in_bytes=whole if rank == 0 else 0, dtype="float32",
                  out_bytes=whole // world, peer=0)  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step)  # the same batch on every rank
        x = torch.randn(BATCH, DIM, generator=data)
        labels = torch.randint(0, VOCAB, (BATCH,), generator=data)
        with loss_parallel():
            loss = F.cross_entropy(model(x), labels)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        for _ in ("max", "sum of exponentials", "target logits"):
            truth.say("all_reduce", step, in_bytes=BATCH * F32, dtype="float32")
        truth.say("all_reduce", step, in_bytes=BATCH * DIM * F32, dtype="float32")
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"tp_loss_parallel_job: {args.steps} steps, loss {loss.to_local().item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
