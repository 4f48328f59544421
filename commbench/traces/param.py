"""PARAM's basic comms trace (facebookresearch/param, `train/comms/pt`): one JSON list per
rank (`<rank>.json` in a directory, as its replay reads them), an object per operation.

Read as PARAM's own parser reads it (`commsTraceParser._parseBasicTraceComms`, written by
`comms_utils.commsArgs.toDict`): `comms` the op (named as `paramToCommName` does), `in_msg_size`
and `out_msg_size` element counts of `dtype`, `pg_id` the group and `global_ranks` its ranks,
`world_size`, `root`, `src_rank`/`dst_rank` of a send or recv, `startTime_ns`. Objects with
`compute` instead of `comms` are computation and are skipped; so are `wait` (the wait on an
earlier request, not a call) and `init` (the creation of a group). PARAM's trace says nothing
of steps, completion times or async: those stay empty.

A send's or recv's ends are `src_rank` and `dst_rank`, global ranks, which PARAM's parser
requires of every point-to-point entry; the end that is not the file's own rank is the peer.
PARAM's own writer (`toDict`) leaves both out: the peer is then the other member of a group
of two (`global_ranks`), or the other rank of a trace of two, and where it cannot be told the
trace is refused.
"""

from __future__ import annotations

from typing import Any

from commbench.errors import UserError, quoted
from commbench.fields import Fields, Value, anything, integer_in, line, list_of
from commbench.traces.checks import lone_peer
from commbench.traces.names import ELEMENT_BYTES, MAX_WORLD, canonical_dtype, canonical_op
from commbench.traces.records import MAX_BYTES, MAX_CALLS, Call, Group

FORMAT = "param"
TITLE = 'PARAM basic comms trace (a JSON list of {"comms": ...} objects)'
_SKIPPED = ("wait", "init")
_NO_DATA = ("wait", "barrier", "init", "batch_isend_irecv")  # PARAM reads no sizes for these
_RANK = integer_in(0, MAX_WORLD - 1)
_COUNT = integer_in(0, MAX_BYTES)


def detect(doc: Any) -> bool:
    """A JSON list whose objects name `comms` (or `compute`)."""
    return (
        isinstance(doc, list)
        and bool(doc)
        and all(isinstance(item, dict) for item in doc[:100])
        and any("comms" in item for item in doc[:100])
    )


def read(doc: Any, rank: int, where: str, *, world_size: int = 0) -> list[Call]:
    """Rank `rank`'s calls from the parsed trace `doc`; `world_size` (the number of ranks
    read) tells a send's peer where the entry does not."""
    if not isinstance(doc, list):
        raise UserError(f"{where}: a PARAM trace is a JSON list")
    if len(doc) > MAX_CALLS:
        raise UserError(f"{where}: more than {MAX_CALLS} entries: too many to read")
    calls: list[Call] = []
    group_seq: dict[str, int] = {}
    for i, item in enumerate(doc):
        f = Value(item, f"{where}: [{i}]").obj()
        if f.opt("comms", anything) is None:
            continue  # compute, which a comms replay does not run
        call = _call(f, rank, len(calls), group_seq, world_size)
        if call is not None:
            calls.append(call)
    return calls


def _call(f: Fields, rank: int, seq: int, group_seq: dict[str, int], world: int) -> Call | None:
    name = f.req("comms", line)
    lowered = name.lower()
    if lowered in _SKIPPED:
        return None
    op = canonical_op(name)
    dtype = ""
    in_count = out_count = 0
    if lowered not in _NO_DATA:
        in_count = f.req("in_msg_size", _COUNT)
        out_count = f.req("out_msg_size", _COUNT)
        dtype = canonical_dtype(f.req("dtype", line))
        if dtype not in ELEMENT_BYTES:
            raise UserError(
                f"{f.at('dtype')}: {quoted(f.data['dtype'])} is not a dtype PARAM sends"
            )
    size = ELEMENT_BYTES.get(dtype, 0)
    pg = f.opt("pg_id", integer_in(0, MAX_WORLD))
    group_name = str(pg if pg is not None else 0)
    ranks = tuple(f.opt("global_ranks", list_of(_RANK, max_items=MAX_WORLD)) or ())
    peer = _peer(f, op, rank, ranks, world) if op in ("send", "recv") else f.opt("root", _RANK)
    seq_in_group = None
    if op not in ("send", "recv"):
        seq_in_group = group_seq.get(group_name, 0)
        group_seq[group_name] = seq_in_group + 1
    return Call(
        rank=rank,
        seq=seq,
        op=op,
        name=name,
        in_bytes=in_count * size,
        out_bytes=out_count * size,
        dtype=dtype,
        count=in_count,
        group=Group(name=group_name, ranks=ranks),
        issued_ns=f.opt("startTime_ns", integer_in(0, (1 << 63) - 1)) or 0,
        group_seq=seq_in_group,
        peer=peer,
    )


_ENDS = {"send": ("src_rank", "dst_rank"), "recv": ("dst_rank", "src_rank")}
"""Per op, the field naming its own end and the one naming the other end."""


def _peer(f: Fields, op: str, rank: int, ranks: tuple[int, ...], world: int) -> int:
    """The other end of a send or recv entry (see the module)."""
    own_key, other_key = _ENDS[op]
    own = f.opt(own_key, _RANK)
    if own is not None and own != rank:
        raise UserError(f"{f.at(own_key)}: a {op} from rank {own} in rank {rank}'s trace")
    peer = f.opt(other_key, _RANK)
    if peer is None:
        peer = lone_peer(rank, ranks, world)
    if peer is None:
        group = f"a group of {len(ranks)}" if ranks else f"a trace of {world}"
        raise UserError(
            f"{f.at(other_key)}: missing, in {group} ranks: which rank the {op} "
            f"{'went to' if op == 'send' else 'came from'} cannot be told"
        )
    return peer
