"""FSDP2 (`fully_shard`) as users configure it beyond the defaults, 2 ranks on gloo, 3 steps
of SGD, then a final barrier. The model: a root with parameters of its own (an input
projection and an output head, 5 rows: not divisible by 2) around two blocks, each block a
`Linear`, a ReLU, a `Linear` and a `LayerNorm`. Options:

- `--nested`: `fully_shard` on each block's two linears, then on each block (its own group:
  the norm), then on the root; without it, on each block (its three modules in one group),
  then on the root.
- `--mixed`: every `fully_shard` with `MixedPrecisionPolicy(param_dtype=bfloat16,
  reduce_dtype=float32)`: all-gathers in bfloat16, reduce-scatters in float32.
- `--accumulate N`: N microbatches a step, `set_requires_gradient_sync(False)` before each but
  the last, `True` before the last: no reduce-scatter but in the last.
- `--keep`: `reshard_after_forward=False` on block 0 (and, nested, on its second linear).
- `--reduce-scatter-each` (with `--hsdp --accumulate N`): `set_requires_all_reduce(False)`
  on the microbatches but the last instead (FSDP2's way to accumulate with HSDP): each
  microbatch reduce-scatters, only the last all-reduces (the sum of the microbatches'
  reduce-scatter outputs, the same shard).
- `--clip`: `torch.nn.utils.clip_grad_norm_` of the parameters before each optimizer step,
  as torchtitan's loop does: the gradients are DTensors sharded on dim 0, so each one's
  norm (`_foreach_norm`) is a partial norm; `_get_total_norm` stacks them, a [N] tensor of
  partial norms (N parameters), whose `vector_norm` needs them whole: one all_reduce of N
  float32 over the group the gradients are sharded on.
- `--hsdp`: on 4 ranks, every `fully_shard` over a 2-D mesh `("replicate", "shard")` of
  (2, 2): HSDP. The "shard" groups are {0, 1} and {2, 3}, the "replicate" ones {0, 2} and
  {1, 3}; all-gathers and reduce-scatters go over the rank's "shard" group, and each
  reduce-scatter is followed by an all_reduce of its output (one rank's shard, in the reduce
  dtype) over the rank's "replicate" group (`foreach_reduce`).

Prints its own truth (tests/jobs/truth.py), simulating FSDP2's documented algorithm on the
module structure (torch 2.13's _fsdp_state.py, _fsdp_param_group.py):

- each group's parameters are sharded on dim 0, padded to a multiple of the world size; its
  all_gather's input is the concatenation of its padded shards (in the param dtype), its
  output the world's; its reduce_scatter's input the padded unsharded gradients (in the
  reduce dtype), its output one rank's shard.
- forward: each group all-gathers as its module's forward begins (the root's first, then in
  module order: a block before its linears), if it is sharded. When its module's forward
  ends, a group reshards unless `reshard_after_forward` is False for it (the root's default),
  and is appended to the post-forward order.
- backward: when the gradient of a module's output arrives (its pre-backward), its group
  all-gathers if sharded, then prefetches (all-gathers if sharded) the group before it in the
  post-forward order. When the gradient of its input is computed (its post-backward), it
  reduce-scatters if gradient sync is on, then reshards. The root's input (the data) needs no
  gradient: its post-backward runs in the final callback of the backward, after every other.
  For the nested model the order is: pre root, pre block1, pre fc2, post fc2, pre fc1,
  post fc1, post block1, then the same for block 0, then post root.
- `fully_shard` and the optimizer's step (on the shards) make no collectives.

    torchrun --nproc-per-node 2 tests/jobs/fsdp2_variants_job.py [--nested] [--mixed]
        [--accumulate N] [--keep] [--clip] [--hsdp] [--reduce-scatter-each]
"""

import argparse
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import truth
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

IN, DIM, HIDDEN, OUT = 16, 32, 48, 5
BATCH = 8
SIZE = {torch.float32: 4, torch.bfloat16: 2}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)
        self.norm = nn.LayerNorm(DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc2(torch.relu(self.fc1(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN, DIM)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(DIM, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@dataclass
class Group:
    """An FSDP parameter group as the simulation tracks it."""

    name: str
    params: list[nn.Parameter]
    reshard_after_forward: bool
    children: list["Group"] = field(default_factory=list)
    sharded: bool = True

    def shard_numel(self, world: int) -> int:
        return sum(-(-p.shape[0] // world) * (p.numel() // p.shape[0]) for p in self.params)


def own_params(module: nn.Module, exclude: list[nn.Module]) -> list[nn.Parameter]:
    """`module`'s parameters that no module of `exclude` (sharded apart) holds, in
    `named_parameters` order."""
    apart = {id(p) for m in exclude for p in m.parameters()}
    return [p for p in module.parameters() if id(p) not in apart]


def shard(model: Net, nested: bool, mixed: bool, keep: bool, mesh: DeviceMesh | None) -> Group:
    """Apply fully_shard as the options say; the root's group and its tree."""
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs: dict[str, Any] = {"mp_policy": mp} if mixed else {}
    if mesh is not None:
        kwargs["mesh"] = mesh
    block_groups = []
    for b, block in enumerate(model.blocks):
        children = []
        if nested:
            for name in ("fc1", "fc2"):
                layer = getattr(block, name)
                kept = keep and b == 0 and name == "fc2"
                fully_shard(layer, **kwargs, **({"reshard_after_forward": False} if kept else {}))
                children.append(Group(f"blocks.{b}.{name}", list(layer.parameters()), not kept))
        kept = keep and b == 0
        params = own_params(block, [block.fc1, block.fc2] if nested else [])
        fully_shard(block, **kwargs, **({"reshard_after_forward": False} if kept else {}))
        block_groups.append(Group(f"blocks.{b}", params, not kept, children))
    params = own_params(model, list(model.blocks))
    fully_shard(model, **kwargs)
    return Group("root", params, False, block_groups)


class Simulation:
    """FSDP2's collectives for one forward and backward (the module docstring)."""

    def __init__(
        self, root: Group, shard_group: list[int], replicate_group: list[int] | None, mixed: bool
    ) -> None:
        self.root, self.world = root, len(shard_group)
        self.shard_group, self.replicate_group = shard_group, replicate_group
        self.gather_dtype = torch.bfloat16 if mixed else torch.float32
        self.reduce_dtype = torch.float32

    def all_gather(self, group: Group, step: int) -> None:
        if not group.sharded:
            return
        group.sharded = False
        shard = group.shard_numel(self.world) * SIZE[self.gather_dtype]
        truth.say("all_gather", step, in_bytes=shard, out_bytes=shard * self.world,
                  dtype=truth.dtype_name(self.gather_dtype), group=self.shard_group)  # fmt: skip

    def reduce_scatter(self, group: Group, step: int, sync: bool, all_reduce: bool) -> None:
        if sync:
            shard = group.shard_numel(self.world) * SIZE[self.reduce_dtype]
            dtype = truth.dtype_name(self.reduce_dtype)
            truth.say("reduce_scatter", step, in_bytes=shard * self.world, out_bytes=shard,
                      dtype=dtype, group=self.shard_group)  # fmt: skip
            if self.replicate_group is not None and all_reduce:
                truth.say("all_reduce", step, in_bytes=shard, dtype=dtype,
                          group=self.replicate_group)  # fmt: skip
        group.sharded = True  # reshard_after_backward

    def microbatch(self, step: int, sync: bool, all_reduce: bool = True) -> None:
        order: list[Group] = []  # the post-forward order

        def forward(group: Group) -> None:
            self.all_gather(group, step)
            for child in group.children:
                forward(child)
            if group.reshard_after_forward:
                group.sharded = True
            order.append(group)

        def pre_backward(group: Group) -> None:
            self.all_gather(group, step)
            at = order.index(group)
            if at > 0:
                self.all_gather(order[at - 1], step)

        def backward(group: Group) -> None:  # a block or a linear: its input needs grad
            pre_backward(group)
            for child in reversed(group.children):
                backward(child)
            self.reduce_scatter(group, step, sync, all_reduce)

        forward(self.root)
        pre_backward(self.root)
        for child in reversed(self.root.children):
            backward(child)
        self.reduce_scatter(self.root, step, sync, all_reduce)  # the final callback


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--nested", action="store_true")
    parser.add_argument("--mixed", action="store_true")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--hsdp", action="store_true")
    parser.add_argument("--clip", action="store_true")
    parser.add_argument("--reduce-scatter-each", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Net()
    mesh, shard_group, replicate_group = None, list(range(world)), None
    if args.hsdp:
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
        width = world // 2
        shard_group = [rank // width * width + i for i in range(width)]
        replicate_group = [r * width + rank % width for r in range(2)]
    root = shard(model, args.nested, args.mixed, args.keep, mesh)
    simulation = Simulation(root, shard_group, replicate_group, args.mixed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(1, args.steps + 1):
        for micro in range(args.accumulate):
            last = micro == args.accumulate - 1
            if args.reduce_scatter_each:  # HSDP: reduce-scatter each, all-reduce the last
                model.set_requires_all_reduce(last)
            else:
                model.set_requires_gradient_sync(last)
            data = torch.Generator().manual_seed(step * 131 + micro * 7 + rank)
            loss = model(torch.randn(BATCH, IN, generator=data)).float().square().mean()
            loss.backward()
            sync = last or args.reduce_scatter_each
            simulation.microbatch(step, sync, all_reduce=last)
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            norms = len(list(model.parameters())) * 4
            truth.say("all_reduce", step, in_bytes=norms, dtype="float32", group=shard_group)
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"fsdp2_variants_job: {vars(args)}, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
