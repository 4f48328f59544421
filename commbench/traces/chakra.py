"""A Chakra execution trace in JSON form (mlcommons/chakra): what `chakra_jsonizer`
(src/jsonizer/jsonizer.py) writes from a rank's `.et` file, the `GlobalMetadata` and then
every `Node`, each as protobuf's JSON mapping (`MessageToJson`) of schema/protobuf/et_def.proto,
one object after another:

    {"attr": [{"name": "schema", "stringVal": "1.0.2-chakra.0.0.4"}, ...]}
    {"id": "42", "name": "nccl:all_reduce", "type": "COMM_COLL_NODE", "durationMicros": "9",
     "inputs": {"values": ..., "shapes": "[[262144]]", "types": "['Tensor(float)']"},
     "attr": [{"name": "comm_type", "int64Val": "0"}, {"name": "comm_size",
     "int64Val": "1048576"}, {"name": "pg_name", "stringVal": "0"}, ...]}

(a JSON list of the same objects is read too). The communication nodes are
COMM_COLL_NODE, with `comm_type` (the `CollectiveCommType` enum) and `comm_size` (the bytes of
its input tensors, `PyTorchNode.comm_size`), and COMM_SEND_NODE / COMM_RECV_NODE; the converter
(src/converter/pytorch_converter.py) adds `pg_name` when the op had one. Chakra keeps no group
ranks, no issue times and no step markers, and its nodes are a dependency graph rather than an
issue order: groups count as the whole world, and calls are not matched across ranks.

A send's or recv's other end is its `comm_dst` / `comm_src` attribute (global ranks, as the
feeder, src/feeder/et_feeder_node.cpp, reads them and ASTRA-sim sends to them); the node's own
end, when given, must be the rank whose file holds it. The PyTorch converter writes neither
(its SendRecv nodes carry `comm_size` and `pg_name` only): in a trace of two ranks the other
end can only be the other rank; in a larger one it cannot be told, and the trace is refused.
"""

from __future__ import annotations

import re
from typing import Any

from commbench.errors import UserError
from commbench.fields import Conv, Fields, Value, integer_in, kind, line
from commbench.ops import derived, traced
from commbench.traces.checks import lone_peer
from commbench.traces.names import ELEMENT_BYTES, MAX_WORLD, canonical_dtype
from commbench.traces.records import MAX_BYTES, MAX_CALLS, Call, Group

FORMAT = "chakra"
TITLE = "Chakra execution trace as JSON (chakra_jsonizer's output)"
NODE_TYPES = (
    "INVALID_NODE",
    "METADATA_NODE",
    "MEM_LOAD_NODE",
    "MEM_STORE_NODE",
    "COMP_NODE",
    "COMM_SEND_NODE",
    "COMM_RECV_NODE",
    "COMM_COLL_NODE",
)
_TENSOR_TYPE = re.compile(r"Tensor\(([^)]{1,40})\)")
_INT64 = integer_in(0, MAX_BYTES)
_INTEGER_VALUES = (
    "int32Val",
    "int64Val",
    "uint32Val",
    "uint64Val",
    "sint32Val",
    "sint64Val",
    "fixed32Val",
    "fixed64Val",
    "sfixed32Val",
    "sfixed64Val",
)
"""The members of `AttributeProto`'s value that hold an integer, as protobuf's JSON names them."""


@derived
def comm_types() -> dict[int, str]:
    """commbench's op for each `CollectiveCommType` value (`commbench.ops.Traced.chakra`)."""
    return {value: name for name, (_, t) in traced().items() for value in t.chakra}


_PEER_ATTRS = {"send": ("comm_src", "comm_dst"), "recv": ("comm_dst", "comm_src")}
"""Per op, the attribute naming its own end and the one naming the other end."""


def detect(docs: list[Any]) -> bool:
    """A sequence of objects: a GlobalMetadata (`attr` naming `schema`) or Chakra nodes."""
    if not docs or not all(isinstance(d, dict) for d in docs[:100]):
        return False
    first = docs[0]
    if isinstance(first.get("attr"), list) and "id" not in first and "entries" not in first:
        return True
    return any(d.get("type") in NODE_TYPES for d in docs[:100])


def _int64(value: Any, where: str, convert: Conv[int] = _INT64) -> int:
    """protobuf's JSON writes 64-bit integers as strings (of ASCII digits: `'²'.isdigit()`)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)
    return convert(value, where)


def _attr_int(attr: Fields, convert: Conv[int] = _INT64) -> int:
    """An attribute's integer, whichever integer member holds it (protobuf's JSON leaves a
    member at its default, 0, out)."""
    for key in _INTEGER_VALUES:
        if key in attr.data:
            return attr.req(key, lambda value, where: _int64(value, where, convert))
    return 0


def _attrs(f: Fields) -> dict[str, Fields]:
    """The node's attributes by name, each read at `attr[<name>]` (messages name it)."""
    out = {}
    for item in f.items("attr", required=False, max_items=4096):
        name = item.obj().req("name", line)
        out[name] = Fields(item.data, f"{f.at('attr')}[{name}]")
    return out


def read(docs: list[Any], rank: int, where: str, *, world_size: int = 0) -> list[Call]:
    """Rank `rank`'s communication calls from the jsonizer's objects `docs`; `world_size`
    (the number of ranks read) sizes the output of ops that gather or scatter."""
    if len(docs) > MAX_CALLS:
        raise UserError(f"{where}: more than {MAX_CALLS} nodes: too many to read")
    calls: list[Call] = []
    for i, doc in enumerate(docs):
        f = Value(doc, f"{where}: object {i + 1}").obj()
        node_type = f.opt("type", line)
        if node_type not in ("COMM_COLL_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE"):
            continue
        calls.append(_call(f, node_type, rank, len(calls), world_size))
    return calls


def _call(f: Fields, node_type: str, rank: int, seq: int, world: int) -> Call:
    attrs = _attrs(f)
    peer = None
    if node_type == "COMM_COLL_NODE":
        comm = attrs.get("comm_type")
        if comm is None:
            raise UserError(f"{f.at('attr')}: a collective node without comm_type")
        index = _attr_int(comm)
        op = comm_types().get(index, "")
        if not op:
            raise UserError(f"{comm.where}: {index} is not a CollectiveCommType")
    else:
        op = "send" if node_type == "COMM_SEND_NODE" else "recv"
        peer = _peer(f, attrs, op, rank, world)
    size_attr = attrs.get("comm_size")
    size = 0 if size_attr is None else _attr_int(size_attr)
    pg = attrs.get("pg_name")
    group = pg.req("stringVal", line) if pg is not None else "0"
    dtype = _dtype(f)
    elem = ELEMENT_BYTES.get(dtype, 0)
    n = max(world, 1)
    out = {"all_gather": size * n, "gather": size * n, "reduce_scatter": size // n}
    return Call(
        rank=rank,
        seq=seq,
        op=op,
        name=f.opt("name", line) or op,
        in_bytes=size,
        out_bytes=out.get(op, size),
        dtype=dtype if size else "",
        count=size // elem if elem else 0,
        group=Group(name=group, ranks=()),
        issued_ns=_int64(f.data["startTimeMicros"], f.at("startTimeMicros")) * 1000
        if "startTimeMicros" in f.data
        else 0,
        peer=peer,
    )


def _peer(f: Fields, attrs: dict[str, Fields], op: str, rank: int, world: int) -> int:
    """The other end of a send or recv node (see the module)."""
    own_name, other_name = _PEER_ATTRS[op]
    rank_in = integer_in(0, MAX_WORLD - 1)
    own = attrs.get(own_name)
    if own is not None and (mine := _attr_int(own, rank_in)) != rank:
        raise UserError(
            f"{own.where}: a {op} whose {own_name} is rank {mine}, in rank {rank}'s file"
        )
    other = attrs.get(other_name)
    if other is not None:
        return _attr_int(other, rank_in)
    peer = lone_peer(rank, (), world)
    if peer is None:
        raise UserError(
            f"{f.at('attr')}: a {op} node without {other_name}, in a trace of {world} ranks: "
            f"which rank it {'went to' if op == 'send' else 'came from'} cannot be told "
            f"(Chakra names it in the node's {other_name} attribute)"
        )
    return peer


def _dtype(f: Fields) -> str:
    """The dtype of the node's first input tensor (`inputs.types` is the Python text of a
    list: `['Tensor(float)', 'Int']`); `unknown` without one."""
    inputs = f.sub("inputs")
    if inputs is None:
        return "unknown"
    types = inputs.data.get("types")
    if not isinstance(types, str):
        if types is not None:
            raise UserError(f"{inputs.at('types')}: expected a string, got {kind(types)}")
        return "unknown"
    match = _TENSOR_TYPE.search(types[:4096])
    return canonical_dtype(match.group(1)) if match else "unknown"
