"""Two ranks, one all_reduce left in flight while the next is issued (async_op=True, its
peer late by half a second), then two that are waited each before the next, then one
issued with async_op=True and waited at once: for the test that `commbench record` tells
the calls a rank asked for or left in flight from those it waited for."""

import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        time.sleep(0.5)  # rank 0's first all_reduce cannot complete before rank 1 joins it
    work = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    dist.all_reduce(torch.ones(4))
    work.wait()
    dist.all_reduce(torch.ones(4))
    dist.all_reduce(torch.ones(4))
    dist.all_reduce(torch.ones(4), async_op=True).wait()  # asked for, never overlapped
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
