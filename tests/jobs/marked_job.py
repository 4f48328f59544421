"""A job without nn.Module or optimizer that marks its steps itself with
`commbench.record.step()`: three steps of two all_reduces each, then a barrier."""

import torch
import torch.distributed as dist

import commbench.record


def main() -> None:
    dist.init_process_group("gloo")
    t = torch.ones(256)
    for _ in range(3):
        dist.all_reduce(t)
        dist.all_reduce(t)
        commbench.record.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
