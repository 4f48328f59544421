"""A module whose forward calls functional collectives, compiled with torch.compile
(eager backend): an all_reduce of the hidden state and an all_gather_into_tensor of it, under no_grad, then a training step outside the compiled
region.

    torchrun --nproc-per-node 2 tests/jobs/hostile_compiled_funcol_job.py
"""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
import truth


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        h = funcol.all_reduce(self.a(x), "sum", dist.group.WORLD)
        g = funcol.all_gather_tensor(h, 0, dist.group.WORLD)
        return g.sum()


def main() -> None:
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    net = Net()
    fwd = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for step in range(1, 4):
        x = torch.randn(2, 8)
        with torch.no_grad():
            fwd(x)
        truth.say("all_reduce", step, in_bytes=64, dtype="float32")
        truth.say("all_gather", step, in_bytes=64, out_bytes=64 * world, dtype="float32")
        loss = net.a(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
