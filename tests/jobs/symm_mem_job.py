"""Calls a symmetric-memory operator (`torch.ops.symm_mem.one_shot_all_reduce`, async-TP's and
torchtitan's fast all-reduce) three times per rank beside one c10d all_reduce. On this CPU-only
machine the operator has no kernel and raises; the call still went through the dispatcher, as
it does on a GPU. Prints its truth: `truth: <rank> symm_mem::one_shot_all_reduce <calls>`."""

import contextlib
import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    calls = 0
    for _ in range(3):
        # no CPU kernel: it raises, and was made all the same
        with contextlib.suppress(NotImplementedError, RuntimeError):
            torch.ops.symm_mem.one_shot_all_reduce(torch.ones(64), "sum", "0")
        calls += 1
    dist.all_reduce(torch.ones(64))
    sys.stdout.write(f"truth: {dist.get_rank()} symm_mem::one_shot_all_reduce {calls}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
