"""Gathers over the world whose memory is bounded in every process, at 131,072 ranks.

torch's object collectives size every process's buffers by the world: `all_gather_object`
gives every rank every rank's object, and `gather_object` sizes the root's buffer as the
world times the largest object, though only one rank a node sends anything (issue 45: 131,072
padded slots on rank 0). Here only the ranks that have something send it, into buffers of at
most CHUNK bytes, one reduction each, so a process holds a chunk at a time besides what it
keeps. Every rank calls each function at the same place, as any world collective."""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from commbench.launch.ranks import RankTable, fingerprint, kind_of

CHUNK = 4 << 20
"""Bytes of one reduction's buffer (a single larger message gets a buffer of its own)."""


def _chunks(lengths: Sequence[int], limit: int) -> list[range]:
    """Consecutive senders whose messages together fit `limit` bytes (one at least)."""
    chunks, start, total = [], 0, 0
    for i, n in enumerate(lengths):
        if i > start and total + n > limit:
            chunks.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(lengths):
        chunks.append(range(start, len(lengths)))
    return chunks


def gather_sparse(
    own: bytes | None,
    senders: Sequence[int],
    rank: int,
    device: torch.device,
    *,
    dst: int | None = 0,
    limit: int = CHUNK,
) -> list[bytes] | None:
    """The messages of `senders` (global ranks, each with one `own`; every other rank
    passes None) in their order, on rank `dst` (None: on every rank); None elsewhere.

    One sum of a length per sender, then a sum of the messages laid side by side in
    buffers of at most `limit` bytes: a rank holds its chunk at a time, the receiver the
    messages too, and nothing grows with the ranks that send nothing."""
    index = {r: i for i, r in enumerate(senders)}
    lengths = torch.zeros(len(senders), dtype=torch.int64, device=device)
    if rank in index:
        lengths[index[rank]] = len(own or b"")
    dist.all_reduce(lengths)
    sizes = lengths.tolist()
    receives = dst is None or rank == dst
    got: list[bytes] = []
    for chunk in _chunks(sizes, limit):
        offsets = [0]
        for i in chunk:
            offsets.append(offsets[-1] + sizes[i])
        buf = torch.zeros(offsets[-1], dtype=torch.uint8, device=device)
        at = index.get(rank)
        if at is not None and at in chunk and own:
            start = offsets[at - chunk.start]
            buf[start : start + len(own)] = torch.frombuffer(bytearray(own), dtype=torch.uint8)
        if dst is None:
            dist.all_reduce(buf)
        else:
            dist.reduce(buf, dst=dst)
        if receives:
            data = bytes(buf.cpu().untyped_storage())  # torch's own bytes: no numpy
            got += [data[offsets[j] : offsets[j + 1]] for j in range(len(chunk))]
        del buf
    return got if receives else None


def gather_ranks(record: dict[str, Any], world: int, device: torch.device) -> RankTable:
    """Every rank's record (`ranks.rank_record`), as a `RankTable` on every rank: a world x 4
    integer sum (node, local rank, pid and the fingerprint of its strings, each rank filling
    its own row), then each distinct kind's strings once, from its first rank."""
    rank = record["rank"]
    kind = kind_of(record)
    rows = torch.zeros((world, 4), dtype=torch.int64, device=device)
    mine = [record["node"], record["local_rank"], record["pid"], fingerprint(kind)]
    rows[rank] = torch.tensor(mine, dtype=torch.int64)
    dist.all_reduce(rows)
    columns = read_rows(rows.cpu())
    del rows
    first = columns.senders[columns.kind[rank]]
    own = json.dumps(kind).encode() if first == rank else None
    messages = gather_sparse(own, columns.senders, rank, device, dst=None)
    assert messages is not None  # every rank receives
    return columns.table(messages)


@dataclass(slots=True)
class Columns:
    """The summed rows read into columns: what a rank keeps of them."""

    node: array[int]
    local_rank: array[int]
    pid: array[int]
    kind: array[int]
    """Each rank's kind: the index of its fingerprint among the distinct ones."""
    senders: list[int]
    """Each kind's first rank, which sends its strings."""

    def table(self, messages: list[bytes]) -> RankTable:
        """The table, given each kind's strings (in the senders' order)."""
        kinds = [tuple(json.loads(m)) for m in messages]
        return RankTable(self.node, self.local_rank, self.pid, self.kind, kinds)


def read_rows(rows: torch.Tensor) -> Columns:
    """The world x 4 rows (node, local rank, pid, fingerprint) as columns, read a column at
    a time: the Python ints of one column at most besides the arrays."""
    node, local_rank, pid, prints = (array("q", rows[:, c].tolist()) for c in range(4))
    first: dict[int, int] = {}  # fingerprint -> its first rank
    for r, p in enumerate(prints):
        first.setdefault(p, r)
    index = {p: k for k, p in enumerate(first)}
    kind = array("q", (index[p] for p in prints))
    return Columns(node, local_rank, pid, kind, list(first.values()))
