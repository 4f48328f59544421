"""The names a traced call carries: commbench's op names where the call maps to one, and
dtype names with their element sizes, from the spellings of torch, PARAM and Chakra."""

from __future__ import annotations

import re

from commbench.ops import P2P, derived, traced
from commbench.results.names import DTYPES

MAX_WORLD = 1 << 20
"""The most ranks a trace holds or a replay plays (`--world`): here, a leaf, so that the
replay's options declare it without importing the trace reader."""

_SHOWN = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
)
"""The order a trace's messages have always listed the traced ops in (names only: each is
declared by its op's `commbench.ops.OpSpec.traced`); an op declared since follows them."""


@derived
def trace_ops() -> tuple[str, ...]:
    """What a call's `op` may be: every traced name of an op (`commbench.ops.traced`: a
    traced send and its recv are two calls), and `other` for a call that maps to none of
    them (its original name is kept beside it)."""
    names = traced()
    return (*(n for n in _SHOWN if n in names), *(n for n in names if n not in _SHOWN), "other")


P2P_OPS = P2P


def shard(op: str) -> str:
    """'in' for a traced op whose input is one rank's shard of the whole buffer S, 'out'
    for one whose output is, '' otherwise (`commbench.ops.OpSpec.shard`)."""
    found = traced().get(op)
    return "" if found is None else found[0].shard


def no_data(op: str) -> bool:
    """A traced op that moves no data (a barrier: `commbench.ops.OpSpec.latency_only`)."""
    found = traced().get(op)
    return found is not None and found[0].latency_only


@derived
def _op_of() -> dict[str, str]:
    """Every spelling of each traced op (`commbench.ops.Traced.spellings`), to its name."""
    return {alias: name for name, (_, t) in traced().items() for alias in t.spellings}


_LETTERS = re.compile(r"[^a-z]")


def canonical_op(name: str) -> str:
    """commbench's op for an original name (`nccl:all_reduce`, `_allgather_base`,
    `alltoallv`, `nccl:send 0->1`), `other` when it names none."""
    text = name.strip().lower()
    text = text.rpartition(":")[2]  # the backend prefix of a profiling name
    text = text.split(" ", 1)[0]  # `send 0->1`: the peers
    return _op_of().get(_LETTERS.sub("", text), "other")


ELEMENT_BYTES: dict[str, int] = {
    **DTYPES,
    "int16": 2,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
"""Every dtype a call may name (commbench's `--dtype` names and the others torch sends), and
its element size; `""` is a call without data (a barrier), `unknown` one whose producer did
not say."""

_DTYPE_OF = {
    # torch's ScalarType names (c10::toString), as the Flight Recorder writes them
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int": "int32",
    "long": "int64",
    "short": "int16",
    "char": "int8",
    "byte": "uint8",
    "bool": "bool",
    "complexfloat": "complex64",
    "complexdouble": "complex128",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    # PARAM's dtype names (comms_utils `dtypeMap`) not above
    "float32": "float32",
    "float16": "float16",
    "float64": "float64",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
    # C++ spellings in a Chakra node's input types (`Tensor(c10::Half)`, `Tensor(long int)`)
    "c10::half": "float16",
    "c10::bfloat16": "bfloat16",
    "long int": "int64",
    "unsigned char": "uint8",
    "signed char": "int8",
}


def canonical_dtype(name: str) -> str:
    """The dtype name for a producer's spelling (`Float`, `half`, `c10::BFloat16`),
    `unknown` when it is none of them."""
    text = name.strip().lower()
    if text.startswith("torch."):
        text = text[len("torch.") :]
    return _DTYPE_OF.get(text, text if text in ELEMENT_BYTES else "unknown")
