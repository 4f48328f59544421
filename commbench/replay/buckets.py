"""DDP's gradient buckets for a bucket cap (pure Python): what `replay --rebucket` measures.

DDP all-reduces gradients in buckets, one all_reduce per bucket, issued as each bucket's
gradients are ready during the backward. After the first iteration it rebuilds its buckets
(`Reducer::rebuild_buckets` in torch/csrc/distributed/c10d/reducer.cpp) in the order the
gradients became ready, which for a model used in definition order is the reverse of
`parameters()` (the comment on DDP's own `reversed(...)` in torch/nn/parallel/distributed.py
says so). The assignment is `compute_bucket_assignment_by_size` with the limits
`[first_bucket_bytes, bucket_bytes_cap]`:

- one open bucket per dtype (and device: one device here), so dtypes never share a bucket;
- each parameter joins its dtype's open bucket; once that bucket holds at least the current
  limit it is closed, and that dtype's limit moves on from the first to the cap: the first
  bucket is capped at 1 MiB, every later one at `bucket_cap_mb`;
- a parameter larger than the limit therefore closes its bucket at once: alone, if the
  bucket was empty;
- the buckets still open at the end follow, in the order they were opened (torch leaves
  that order to a hash map; one dtype, the usual case, has one).

This is the steady state, the buckets of every step after the first (DDP's first iteration,
with `find_unused_parameters=False`, uses one bucket of everything).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commbench.errors import UserError
from commbench.traces.names import ELEMENT_BYTES
from commbench.traces.trace import Parameter

FIRST_BUCKET_BYTES = 1024 * 1024
"""torch.distributed's `_DEFAULT_FIRST_BUCKET_BYTES` (c10d's `kDefaultFirstBucketBytes`),
copied: commbench imports no private torch module, and none at all outside its workers."""
MIB = 1024 * 1024
"""DDP's `bucket_cap_mb` is in MiB: `bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)`."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """One all_reduce DDP issues per step."""

    dtype: str
    nbytes: int
    params: tuple[int, ...]
    """The indices (in the manifest's parameter list) of its parameters, in the order added."""
    limit: int
    """The limit it was filled to: FIRST_BUCKET_BYTES for each dtype's first, else the cap."""


def assign_buckets(
    parameters: Sequence[Parameter], cap_bytes: int, first_bytes: int = FIRST_BUCKET_BYTES
) -> list[Bucket]:
    """DDP's buckets of `parameters` (in `parameters()` order) under a cap of `cap_bytes`
    (see the module)."""
    if cap_bytes < 1:
        raise UserError(f"a bucket cap must be at least 1 byte, got {cap_bytes}")
    limits = (first_bytes, cap_bytes)
    out: list[Bucket] = []
    open_: dict[str, tuple[list[int], int]] = {}
    stage: dict[str, int] = {}
    for index in reversed(range(len(parameters))):
        p = parameters[index]
        members, size = open_.get(p.dtype, ([], 0))
        members.append(index)
        size += p.numel * ELEMENT_BYTES.get(p.dtype, 4)
        limit = limits[stage.get(p.dtype, 0)]
        if size >= limit:
            out.append(Bucket(dtype=p.dtype, nbytes=size, params=tuple(members), limit=limit))
            open_.pop(p.dtype, None)
            stage[p.dtype] = 1
        else:
            open_[p.dtype] = (members, size)
    for dtype, (members, size) in open_.items():
        limit = limits[stage.get(dtype, 0)]
        out.append(Bucket(dtype=dtype, nbytes=size, params=tuple(members), limit=limit))
    return out


def cap_mb(cap_bytes: int) -> float:
    """The `bucket_cap_mb` that gives `cap_bytes`."""
    return cap_bytes / MIB
