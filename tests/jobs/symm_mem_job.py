"""Calls a symmetric-memory operator (`torch.ops.symm_mem.one_shot_all_reduce`, async-TP's and
torchtitan's fast all-reduce) three times per rank beside one c10d all_reduce. Prints its
truth: `truth: <rank> symm_mem::one_shot_all_reduce <calls>`.

On gloo and the CPU by default: there the operator has no kernel and raises; the call still
went through the dispatcher, as it does on a GPU. `--device cuda` runs it on NCCL, one GPU per
rank (torchrun's LOCAL_RANK), for `make gpu-check` (tests/test_record_gpu.py): the operator
then really runs, on a buffer of symmetric memory made as torch documents it
(`torch.distributed._symmetric_memory.empty` and `rendezvous` over the default group), and
its result is checked (each element the world's sum of ones).

    torchrun --nproc-per-node 2 tests/jobs/symm_mem_job.py [--device cuda]
"""

import argparse
import contextlib
import os
import sys

import torch
import torch.distributed as dist

CALLS = 3


def on_cpu() -> int:
    dist.init_process_group("gloo")
    calls = 0
    for _ in range(CALLS):
        # no CPU kernel: it raises, and was made all the same
        with contextlib.suppress(NotImplementedError, RuntimeError):
            torch.ops.symm_mem.one_shot_all_reduce(torch.ones(64), "sum", "0")
        calls += 1
    dist.all_reduce(torch.ones(64))
    return calls


def on_cuda() -> int:
    import torch.distributed._symmetric_memory as symm_mem

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    group = dist.group.WORLD
    assert group is not None
    buffer = symm_mem.empty(64, device=device)
    buffer.fill_(1.0)
    symm_mem.rendezvous(buffer, group.group_name)
    calls = 0
    for _ in range(CALLS):
        out = torch.ops.symm_mem.one_shot_all_reduce(buffer, "sum", group.group_name)
        calls += 1
    torch.cuda.synchronize()
    expected = float(dist.get_world_size())
    if not bool((out == expected).all()):
        raise SystemExit(f"one_shot_all_reduce: expected {expected} everywhere, got {out}")
    dist.all_reduce(torch.ones(64, device=device))
    torch.cuda.synchronize()
    return calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    calls = on_cuda() if args.device == "cuda" else on_cpu()
    sys.stdout.write(f"truth: {dist.get_rank()} symm_mem::one_shot_all_reduce {calls}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
