"""PyTorch's Flight Recorder dump in its JSON form (torch/csrc/distributed/c10d:
`FlightRecorder<EventType>::dump_json` in FlightRecorderDetail.hpp, its keys in
FlightRecorder.hpp; version "2.x"): one object per rank,

    {"version": "2.10", "comm_lib_version": ..., "pg_config": {"<group>": {"name", "desc",
     "ranks": "[0,1]"}}, "pg_status": {...}, "entries": [ ... ]}

and each entry `profiling_name` (`nccl:all_reduce`), `process_group` ([name, desc]),
`collective_seq_id`, `p2p_seq_id`, `op_id`, `is_p2p`, `input_sizes` / `output_sizes` (one list
of dimensions per tensor), `input_dtypes` / `output_dtypes` (torch's ScalarType names),
`time_created_ns`, `time_discovered_completed_ns` (0 when not seen complete), `state`.

The recorder is a ring buffer (TORCH_FR_BUFFER_SIZE entries), so a dump holds a job's last
calls, and ranks may hold different windows: calls are matched across ranks by their group's
`collective_seq_id`. Its pickled form (the file TORCH_FR_DUMP_TEMP_FILE names on a timeout)
is refused, never unpickled: `PICKLE_ADVICE` says how to get the JSON.

A send's or recv's peer is in its profiling name, as ProcessGroupNCCL writes it
(`nccl:send 0->1`, `nccl:recv 1<-0`: the rank's own group rank, then its peer's), mapped to
global ranks through the group's `pg_config` ranks; where a name holds none, the peer is the
other member of a group of two, or the other rank of a trace of two, else the trace is refused.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from commbench.errors import UserError, quoted
from commbench.fields import Fields, anything, boolean, integer_in, line, list_of
from commbench.traces.checks import lone_peer
from commbench.traces.names import ELEMENT_BYTES, MAX_WORLD, canonical_dtype, canonical_op
from commbench.traces.records import MAX_BYTES, MAX_CALLS, Call, Group

FORMAT = "flight-recorder"
TITLE = 'PyTorch Flight Recorder JSON dump ({"version": "2.x", "entries": ...})'
MAJOR = 2
PICKLE_ADVICE = (
    "commbench reads the Flight Recorder's JSON dump: in the job, write the string "
    "torch._C._distributed_c10d._dump_nccl_trace_json() returns (NCCL; "
    "_dump_fr_trace_json() on other backends) to a file per rank"
)
_NS = integer_in(0, (1 << 63) - 1)
_DIM = integer_in(0, MAX_BYTES)
_RANKS = re.compile(r"^\[\s*([0-9]{1,8}(\s*,\s*[0-9]{1,8})*)?\s*\]$")
_P2P_ENDS = re.compile(r"([0-9]{1,8})\s*(?:->|<-)\s*([0-9]{1,8})\s*$")
"""The ends in a send's or recv's profiling name: `0->1`, `1<-0` (own group rank first)."""


def detect(doc: Any) -> bool:
    """An object with a string `version` and `entries` or `pg_config`."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("version"), str)
        and ("entries" in doc or "pg_config" in doc)
    )


def groups(doc: Any, where: str) -> dict[str, tuple[int, ...]]:
    """The dump's `pg_config`: group name -> its global ranks."""
    f = Fields(doc, f"{where}:")
    config = f.sub("pg_config")
    if config is None:
        return {}
    out = {}
    for key in list(config.data)[:MAX_WORLD]:
        pg = config.sub(str(key))
        if pg is None:
            continue
        out[str(key)] = _ranks(pg.req("ranks", anything), pg.at("ranks"))
    return out


def _ranks(value: Any, where: str) -> tuple[int, ...]:
    """`"[0,1,2]"` (how the dump writes them, `ranks_str`) or a list."""
    if isinstance(value, list):
        return tuple(list_of(integer_in(0, MAX_WORLD - 1), max_items=MAX_WORLD)(value, where))
    text = line(value, where)
    if len(text) > 16 * MAX_WORLD or not _RANKS.match(text.strip()):
        raise UserError(f"{where}: {quoted(text)} is not a list of ranks")
    ranks = tuple(int(r) for r in re.findall(r"[0-9]+", text))
    if any(r >= MAX_WORLD for r in ranks):
        raise UserError(f"{where}: a rank of {MAX_WORLD} or more")
    return ranks


def read(doc: Any, rank: int, where: str, *, world_size: int = 0) -> list[Call]:
    """Rank `rank`'s calls from the parsed dump `doc`; `world_size` (the number of ranks
    read) tells a send's peer where its name does not."""
    f = Fields(doc, f"{where}:")
    version = f.req("version", line)
    major = version.split(".", 1)[0]
    if not major.isdigit() or int(major) != MAJOR:
        newer = major.isdigit() and int(major) > MAJOR
        raise UserError(
            f"{where}: Flight Recorder dump version {quoted(version)} is "
            f"{'newer than' if newer else 'not'} the {MAJOR}.x commbench reads"
        )
    members = groups(doc, where)
    items = f.items("entries", required=False, max_items=MAX_CALLS)
    entries = [item.obj() for item in items]
    # A coalesced launch records each op with the launch's collective_seq_id: those ops
    # cannot be matched across ranks by it, so they carry none.
    shared = Counter(
        (_group(e)[0], e.req("collective_seq_id", _NS)) for e in entries if not _is_p2p(e)
    )
    calls: list[Call] = []
    for e in entries:
        name, _desc = _group(e)
        seq_id = e.req("collective_seq_id", _NS)
        p2p = _is_p2p(e)
        in_bytes, in_count, in_dtype = _tensors(e, "input")
        out_bytes, _, out_dtype = _tensors(e, "output")
        completed = e.opt("time_discovered_completed_ns", _NS)
        profiling_name = e.req("profiling_name", line)
        op = canonical_op(profiling_name)
        ranks = members.get(name, ())
        peer = None
        if op in ("send", "recv"):
            peer = _peer(e, op, profiling_name, rank, ranks, world_size)
        calls.append(
            Call(
                rank=rank,
                seq=len(calls),
                op=op,
                name=profiling_name,
                in_bytes=in_bytes,
                out_bytes=out_bytes,
                dtype=in_dtype or out_dtype,
                count=in_count,
                group=Group(name=name, ranks=ranks),
                issued_ns=e.opt("time_created_ns", _NS) or 0,
                completed_ns=completed or None,  # the JSON dump writes 0 for "not seen"
                group_seq=None if p2p or shared[(name, seq_id)] > 1 else seq_id,
                peer=peer,
            )
        )
    return calls


def _peer(
    e: Fields, op: str, profiling_name: str, rank: int, ranks: tuple[int, ...], world: int
) -> int:
    """The global rank at the other end of a send or recv entry (see the module)."""
    where = e.at("profiling_name")
    match = _P2P_ENDS.search(profiling_name)
    if match is None:
        peer = lone_peer(rank, ranks, world)
        if peer is None:
            example = "0->1" if op == "send" else "0<-1"
            raise UserError(
                f"{where}: {quoted(profiling_name)} does not name the {op}'s peer (as "
                f"`nccl:{op} {example}` does), in a group of more than two ranks: which rank "
                "it is cannot be told"
            )
        return peer
    own, other = int(match.group(1)), int(match.group(2))
    if ranks and max(own, other) >= len(ranks):
        raise UserError(f"{where}: {quoted(profiling_name)} names a rank its group has not")
    if (ranks[own] if ranks else own) != rank:
        raise UserError(f"{where}: {quoted(profiling_name)} is not a {op} of rank {rank}")
    return ranks[other] if ranks else other


def _is_p2p(e: Fields) -> bool:
    return bool(e.opt("is_p2p", boolean))


def _group(e: Fields) -> tuple[str, str]:
    pg = e.req("process_group", list_of(line, max_items=2))
    if len(pg) != 2:
        raise UserError(f"{e.at('process_group')}: expected [name, description]")
    return pg[0], pg[1]


def _tensors(e: Fields, side: str) -> tuple[int, int, str]:
    """(bytes, elements, dtype) of the entry's input or output tensors."""
    shapes = e.opt(f"{side}_sizes", list_of(list_of(_DIM, max_items=64), max_items=1 << 16)) or []
    dtypes = e.opt(f"{side}_dtypes", list_of(line, max_items=1 << 16)) or []
    if len(dtypes) != len(shapes):
        raise UserError(f"{e.at(side + '_dtypes')}: {len(dtypes)} dtypes for {len(shapes)} tensors")
    total = elements = 0
    names = []
    for i, (shape, spelled) in enumerate(zip(shapes, dtypes, strict=True)):
        dtype = canonical_dtype(spelled)
        if dtype not in ELEMENT_BYTES:
            raise UserError(f"{e.at(side + '_dtypes')}[{i}]: {quoted(spelled)} is not a dtype")
        count = math.prod(shape)
        elements += count
        total += count * ELEMENT_BYTES[dtype]
        names.append(dtype)
    if total > MAX_BYTES:
        raise UserError(f"{e.at(side + '_sizes')}: more than {MAX_BYTES} bytes")
    return total, elements, names[0] if names else ""
