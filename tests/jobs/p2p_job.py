"""Two ranks passing a tensor from rank 0 to rank 1 with send and recv, then all-reducing it,
twice: for the tests that `commbench record` captures point-to-point calls and `commbench
replay` replays them."""

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    t = torch.ones(1024)
    for _ in range(2):
        if dist.get_rank() == 0:
            dist.send(t, 1)
        else:
            dist.recv(t, 0)
        dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
