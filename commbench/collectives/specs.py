"""What each collective is, independent of torch: its bus-bandwidth factor, how its size
splits across ranks, whether it reduces.

Conventions follow nccl-tests (doc/PERFORMANCE.md): S is the per-rank buffer in bytes (for
all_gather / gather the whole gathered buffer, for reduce_scatter / scatter / all_to_all
the whole buffer before the split), algbw = S / t, busbw = algbw x factor(n). busbw is what
makes numbers at different world sizes comparable to the hardware's link bandwidth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from commbench.errors import UserError


@dataclass(frozen=True, slots=True)
class OpSpec:
    name: str
    busbw_factor: Callable[[int], float] | None
    """n -> busbw / algbw; None for latency-only ops (barrier)."""
    split: bool
    """True when S is split into n chunks, so the element count must divide by n."""
    reduces: bool
    """True when the op applies --reduce-op (and so depends on dtype x reduce-op support)."""
    in_place: str
    """How --in-place applies: 'always' (torch's op is in-place by nature), 'optional', 'never'."""
    rooted: bool = False
    """True for ops with a root rank (the first rank of the group)."""


def _allreduce(n: int) -> float:
    return 2 * (n - 1) / n


def _split(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            name="all_reduce", busbw_factor=_allreduce, split=False, reduces=True, in_place="always"
        ),
        OpSpec(
            name="all_gather", busbw_factor=_split, split=True, reduces=False, in_place="optional"
        ),
        OpSpec(
            name="reduce_scatter",
            busbw_factor=_split,
            split=True,
            reduces=True,
            in_place="optional",
        ),
        OpSpec(name="all_to_all", busbw_factor=_split, split=True, reduces=False, in_place="never"),
        OpSpec(
            name="broadcast",
            busbw_factor=_one,
            split=False,
            reduces=False,
            in_place="always",
            rooted=True,
        ),
        OpSpec(
            name="reduce",
            busbw_factor=_one,
            split=False,
            reduces=True,
            in_place="always",
            rooted=True,
        ),
        OpSpec(
            name="gather",
            busbw_factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            rooted=True,
        ),
        OpSpec(
            name="scatter",
            busbw_factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            rooted=True,
        ),
        OpSpec(name="sendrecv", busbw_factor=_one, split=False, reduces=False, in_place="never"),
        OpSpec(name="barrier", busbw_factor=None, split=False, reduces=False, in_place="never"),
    )
}

DTYPES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
}
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


def parse_ops(text: str) -> list[str]:
    """`all_reduce,all_gather` or `all` -> op names, in registry order for `all`."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UserError("no ops given")
    if names == ["all"]:
        return list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise UserError(f"unknown op {unknown[0]!r}; choose from: {', '.join(OPS)}")
    return list(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class SizePlan:
    """The buffer an op really uses for a requested size."""

    requested_bytes: int
    size_bytes: int
    count: int
    """Elements in S."""
    note: str


def plan_size(op: str, requested_bytes: int, dtype: str, world_size: int) -> SizePlan:
    """Round a requested size to what `op` can move: whole elements, divisible by n if split.

    Sizes round down (never measure more than asked), except that a size too small for the
    world size rounds up to one element per rank. Any change is stated in `note`.
    """
    spec = OPS[op]
    elem = DTYPES[dtype]
    unit = world_size if spec.split else 1
    count = (requested_bytes // elem) // unit * unit
    note = ""
    if count < unit:
        count = unit
    size = count * elem
    if op == "barrier":
        return SizePlan(requested_bytes=0, size_bytes=0, count=0, note="")
    if size != requested_bytes:
        why = (
            f"a multiple of {elem * unit} B ({elem} B x {unit} ranks)"
            if unit > 1
            else f"whole {dtype} elements"
        )
        note = f"rounded from {requested_bytes} B to {why}"
    return SizePlan(requested_bytes=requested_bytes, size_bytes=size, count=count, note=note)


def busbw_factor(op: str, world_size: int) -> float | None:
    factor = OPS[op].busbw_factor
    return None if factor is None else factor(world_size)
