"""A job that trains a step, then damages the directory it is told is its trace directory, and
exits with the status it is given: for the tests of `commbench record` when a job breaks its
own trace (issue 33, D1). One process, world size 1, a file rendezvous.

    damaging_job.py TRACE_DIR {remove,file,manifest-dir,chmod,none} [--exit N]
"""

import argparse
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist


def damage(trace: str, how: str) -> None:
    if how == "remove":
        shutil.rmtree(trace)
    elif how == "file":
        shutil.rmtree(trace)
        with open(trace, "w") as fh:
            fh.write("not a trace\n")
    elif how == "manifest-dir":
        manifest = os.path.join(trace, "manifest.json")
        os.remove(manifest)
        os.mkdir(manifest)
    elif how == "chmod":
        os.chmod(trace, 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("how", choices=["remove", "file", "manifest-dir", "chmod", "none"])
    parser.add_argument("--exit", type=int, default=0)
    args = parser.parse_args()
    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.ones(4, 16)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
    damage(args.trace, args.how)
    print("damaged", flush=True)
    dist.destroy_process_group()
    sys.exit(args.exit)


if __name__ == "__main__":
    main()
