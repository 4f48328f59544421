"""A job that communicates, says `ready` on stdout, then communicates until stopped: for the
tests that stop `commbench record` while its job runs. World size from torchrun's
environment, or 1 (a plain `python slow_job.py`, with a file rendezvous)."""

import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist


def main() -> None:
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        store = os.path.join(tempfile.mkdtemp(), "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    t = torch.ones(1024)
    for _ in range(5):
        dist.all_reduce(t)
    sys.stdout.write("ready\n")  # one write: the ranks' lines may still interleave
    sys.stdout.flush()
    while True:
        dist.all_reduce(t)
        time.sleep(0.05)
    sys.exit(0)


if __name__ == "__main__":
    main()
