"""DDP's gradient buckets for a bucket cap (pure Python): what `replay --rebucket` measures.

DDP all-reduces gradients in buckets, one all_reduce per bucket, issued as each bucket's
gradients are ready during the backward of a step that syncs (none in a micro-step under
`no_sync()`: gradient accumulation all-reduces once per optimizer step, at its last
micro-step, which is the trace's step). Its buckets come from
`compute_bucket_assignment_by_size` (torch/csrc/distributed/c10d/reducer.hpp), which takes
the parameters in an order and a list of limits:

- one open bucket per dtype (and device: one device here), so dtypes never share a bucket;
- each parameter joins its dtype's open bucket; once that bucket holds at least the current
  limit it is closed, and that dtype's limit moves on to the next of the list (the last
  repeats): a parameter larger than the limit closes its bucket at once, alone if the
  bucket was empty;
- the buckets still open at the end follow, in the order they were opened (torch leaves
  that order to a hash map; one dtype, the usual case, has one).

The limits are `[first, cap]` (torch/nn/parallel/distributed.py, `_BucketCapacityConfig`):
`cap` is `bucket_cap_mb`, and `first` is 1 MiB (`_DEFAULT_FIRST_BUCKET_BYTES`) only when the
job leaves `bucket_cap_mb` out; a `bucket_cap_mb` given, the cap the advisor tells a job to
give, is the first bucket's limit too (torch 2.13; earlier releases, which passed
`_DEFAULT_FIRST_BUCKET_BYTES` to the reducer whatever the cap, kept a 1 MiB first bucket).
The order depends on `find_unused_parameters` (`Reducer`):

- **without it**, DDP's first step all-reduces one bucket of everything, and the reducer
  then rebuilds its buckets once (`Reducer::rebuild_buckets`) in the order the gradients
  became ready, which for a model used in definition order is the reverse of `parameters()`
  (the comment on DDP's own `reversed(...)` says so): the buckets of every later step, the
  steady state the advisor times;
- **with it**, the reducer never rebuilds (`should_rebuild_buckets` is false): the buckets are
  the constructor's, assigned over the parameters in definition order, sorted by their first
  parameter and then reversed (the last-defined parameters' bucket goes first), every step
  the same; and each syncing step also all-reduces the local-used map, one int32 per
  parameter, after the buckets (to find the parameters no rank used). A trace shows it:
  `Reducer.of` reads it there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commbench.errors import UserError
from commbench.traces.names import ELEMENT_BYTES
from commbench.traces.records import Parameter, Trace

FIRST_BUCKET_BYTES = 1024 * 1024
"""torch.distributed's `_DEFAULT_FIRST_BUCKET_BYTES` (c10d's `kDefaultFirstBucketBytes`): the
first bucket's limit when a job leaves `bucket_cap_mb` out. Copied: commbench imports no
private torch module, and none at all outside its workers."""
MIB = 1024 * 1024
"""DDP's `bucket_cap_mb` is in MiB: `bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)`."""
USED_MAP_DTYPE = "int32"
"""The local-used map's dtype: one element per parameter (reducer.hpp, `local_used_map_`)."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """One all_reduce DDP issues per step."""

    dtype: str
    nbytes: int
    params: tuple[int, ...]
    """The indices (in the manifest's parameter list) of its parameters, in the order added."""
    limit: int
    """The limit it was filled to: the first bucket's of its dtype, else the cap."""


def assign_buckets(
    parameters: Sequence[Parameter],
    cap_bytes: int,
    *,
    find_unused: bool = False,
    first_bytes: int | None = None,
) -> list[Bucket]:
    """DDP's buckets of `parameters` (in `parameters()` order) under a cap of `cap_bytes`, in
    the order they are all-reduced; the first bucket of each dtype limited to `first_bytes`
    (the cap when None: a job that gives `bucket_cap_mb`). See the module."""
    if cap_bytes < 1:
        raise UserError(f"a bucket cap must be at least 1 byte, got {cap_bytes}")
    limits = (cap_bytes if first_bytes is None else first_bytes, cap_bytes)
    order = range(len(parameters)) if find_unused else reversed(range(len(parameters)))
    out: list[Bucket] = []
    open_: dict[str, tuple[list[int], int]] = {}
    stage: dict[str, int] = {}
    for index in order:
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
    if find_unused:  # the constructor's: sorted by their first parameter, then reversed
        out.sort(key=lambda b: min(b.params), reverse=True)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Reducer:
    """The recorded job's DDP, as far as its all-reduces per step go: its parameters (what
    its optimizer stepped, in order) and whether it found unused parameters."""

    parameters: tuple[Parameter, ...]
    find_unused: bool = False
    """`find_unused_parameters=True`: buckets in definition order, never rebuilt, and the
    local-used map all-reduced at each syncing step (see the module)."""

    @classmethod
    def of(cls, trace: Trace) -> Reducer:
        """The reducer of the job `trace` recorded. find_unused_parameters shows as an int32
        all_reduce, over every rank, of one element per parameter, in a step (the lowest
        rank's calls are read: every rank issues it)."""
        parameters = trace.manifest.parameters
        lowest = min(trace.calls, default=None)
        count = len(parameters)
        found = (
            count > 0
            and lowest is not None
            and any(
                c.op == "all_reduce"
                and c.step is not None
                and c.dtype == USED_MAP_DTYPE
                and c.count == count
                and (not c.group.ranks or len(c.group.ranks) == trace.world_size)
                for c in trace.calls[lowest]
            )
        )
        return cls(parameters=parameters, find_unused=found)

    def buckets(self, cap_bytes: int) -> list[Bucket]:
        """DDP's buckets at `cap_bytes` (`bucket_cap_mb` given), in the order they go."""
        return assign_buckets(self.parameters, cap_bytes, find_unused=self.find_unused)

    def reductions(self, cap_bytes: int) -> list[tuple[str, int]]:
        """(dtype, bytes) of each all-reduce a syncing step issues at `cap_bytes`, in order:
        the buckets, then the local-used map when DDP finds unused parameters."""
        out = [(b.dtype, b.nbytes) for b in self.buckets(cap_bytes)]
        if self.find_unused:
            out.append((USED_MAP_DTYPE, ELEMENT_BYTES[USED_MAP_DTYPE] * len(self.parameters)))
        return out

    def payload(self) -> dict[str, object]:
        return {
            "parameters": [p.payload() for p in self.parameters],
            "find_unused": self.find_unused,
        }


def cap_mb(cap_bytes: int) -> float:
    """The `bucket_cap_mb` that gives `cap_bytes`."""
    return cap_bytes / MIB
