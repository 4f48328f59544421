"""The ground truth a test job prints of its own collectives, one JSON line per call:

    truth: {"rank": 0, "step": 1, "op": "all_reduce", "bytes": 4096, "out_bytes": 4096,
            "dtype": "float32", "group": [0, 1], "peer": null, "async": null}

computed from what the job itself knows (the tensors it passes, the documented behaviour of
the torch API it calls), never from commbench: a job imports nothing of commbench. Jobs
import this file by path (torchrun puts the script's directory first on sys.path).

- `step`: the training step the call was issued in, 1-based, counted by the job's own
  optimizer steps (the calls after step k-1's `optimizer.step()` up to step k's are step k);
  null for start-up calls before the first step and for calls after the last step.
- `op`: commbench's names (all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,
  reduce, gather, scatter, barrier, send, recv).
- `bytes`, `out_bytes`: this rank's input and output bytes, as a trace counts them: the
  input again for an in-place op (all_reduce, broadcast, reduce), nothing for a barrier,
  a recv's input is nothing and its output the buffer received into, the input of a
  scatter off its root and the output of a gather off its root are nothing.
- `dtype`: torch's name (`float32`, `bfloat16`, `int64`, `uint8`), "" for a barrier.
- `group`: the global ranks of the call's group, sorted.
- `peer`: the root of a rooted op, the other end of a send or recv (a global rank), or null.
- `async`: whether the job asked for the call with async_op=True, where it did; null where
  the job does not say (a library's call).
- `in_splits`, `out_splits`: an uneven all_to_all's splits, in elements; null otherwise.
- `batch`: for a send or recv the job issued with `dist.batch_isend_irecv`, which of the
  rank's batches (from 0); left out where the job does not say.

Each line is written with one write and flushed: the ranks share the pipe, and a line
shorter than the pipe's buffer is never cut by another rank's.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def ranks(group: dist.ProcessGroup | None = None) -> list[int]:
    """The sorted global ranks of `group` (the world by default)."""
    if group is None:
        return list(range(dist.get_world_size()))
    return sorted(dist.get_process_group_ranks(group))


def say(
    op: str,
    step: int | None,
    *,
    in_bytes: int,
    dtype: str,
    out_bytes: int | None = None,
    group: list[int] | None = None,
    peer: int | None = None,
    async_op: bool | None = None,
    in_splits: list[int] | None = None,
    out_splits: list[int] | None = None,
    batch: int | None = None,
) -> None:
    """Print one call's truth (`out_bytes` defaults to `in_bytes`: an in-place op)."""
    line = {
        "rank": dist.get_rank(),
        "step": step,
        "op": op,
        "bytes": in_bytes,
        "out_bytes": in_bytes if out_bytes is None else out_bytes,
        "dtype": dtype,
        "group": ranks() if group is None else group,
        "peer": peer,
        "async": async_op,
        "in_splits": in_splits,
        "out_splits": out_splits,
        **({"batch": batch} if batch is not None else {}),
    }
    sys.stdout.write("truth: " + json.dumps(line, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def say_tensor(
    op: str,
    step: int | None,
    t: torch.Tensor,
    *,
    out_bytes: int | None = None,
    group: list[int] | None = None,
    peer: int | None = None,
    async_op: bool | None = None,
    batch: int | None = None,
) -> None:
    """`say` for a call whose input is the one tensor `t`."""
    say(
        op,
        step,
        in_bytes=nbytes(t),
        dtype=dtype_name(t.dtype),
        out_bytes=out_bytes,
        group=group,
        peer=peer,
        async_op=async_op,
        batch=batch,
    )


def log(text: str) -> None:
    """A line of the job's own output, in one write like the truth's: `print` writes the
    text and its newline apart when Python runs unbuffered (PYTHONUNBUFFERED), and another
    rank's truth line may land between them."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def say_barrier(step: int | None, group: list[int] | None = None) -> None:
    say("barrier", step, in_bytes=0, dtype="", group=group)
