"""The workers' rank list, kept compact: what grows with the ranks is a few integer columns,
what grows with the nodes is the strings.

Every rank's record names its host, node, local rank, pid, address, device and device name.
Held as one dict a rank, the list of 131,072 ranks (16,384 nodes x 8) took 55 MB in every
worker and a 24.7 MB context line in the journal (issue 45). Here the integers are columns
(`array`: 8 bytes a rank), and the strings a rank shares with others (host, address, device
name; a device that is `cuda:<local rank>` shares its form) are one `kind` each, stored once.
Read as a sequence, the table gives each rank's dict as the workers made it, in global rank
order, so whoever read the list of dicts reads this alike.

The journal's context line carries the compact form (`to_compact`, `rank_table`); whoever
reads the line (`context_ranks`) gets the dicts again, so run.json is written as before.
Torch-free: the launcher reads it."""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from commbench.errors import UserError

COMPACT_KEY = "rank_table"
"""The context line's key for the compact form (a line of an older commbench has `ranks`)."""
RUN_FIELDS = ("node", "local_rank", "kind")
"""The columns stored as runs: they repeat or count up within a node."""
DEVICE_FORM = "cuda:{local_rank}"
"""A kind's device where each rank's device is its local rank's GPU."""


def rank_record(
    *,
    rank: int,
    local_rank: int,
    host: str,
    node: int,
    pid: int,
    address: str | None,
    device: str,
    device_name: str,
) -> dict[str, Any]:
    """One rank's record, its keys in the order run.json's `context.ranks` has them."""
    return {
        "rank": rank,
        "local_rank": local_rank,
        "host": host,
        "node": node,
        "pid": pid,
        "address": address,
        "device": device,
        "device_name": device_name,
    }


def kind_of(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """The strings of a rank's record that others may share: (host, address, device form,
    device name)."""
    device = record["device"]
    if device == DEVICE_FORM.format(local_rank=record["local_rank"]):
        device = DEVICE_FORM
    return (record["host"], record["address"], device, record["device_name"])


def fingerprint(kind: tuple[Any, ...]) -> int:
    """A kind as a number below 2**62, that a sum of one per rank cannot overflow: the
    ranks find which of them share a kind by these, and send each kind's strings once."""
    digest = hashlib.blake2b(json.dumps(kind).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


def _runs(values: Sequence[int]) -> list[list[int]]:
    """`values` as arithmetic runs `[start, step, count]`."""
    runs: list[list[int]] = []
    i, n = 0, len(values)
    while i < n:
        step = values[i + 1] - values[i] if i + 1 < n else 0
        j = i + 1
        while j < n and values[j] - values[j - 1] == step:
            j += 1
        runs.append([values[i], step, j - i])
        i = j
    return runs


def _expand(runs: Any, where: str, world: int) -> array[int]:
    """The column `runs` stand for, of `world` ranks: a run past them is refused before it is
    expanded (a line that claims a count of 10^12 must not take the launcher's memory)."""
    out = array("q")
    if not isinstance(runs, list):
        raise UserError(f"{where}: not a list of runs")
    for run in runs:
        match run:
            case [int(start), int(step), int(count)] if 0 < count <= world - len(out):
                out.extend(range(start, start + step * count, step) if step else [start] * count)
            case [int(), int(), int(count)] if count > 0:
                raise UserError(f"{where}: runs past the world's {world} ranks")
            case _:
                raise UserError(f"{where}: {run!r} is not a run [start, step, count]")
    return out


class RankTable(Sequence[dict[str, Any]]):
    """Every rank's record in global rank order, as columns and kinds (see the module)."""

    def __init__(
        self,
        node: array[int],
        local_rank: array[int],
        pid: array[int],
        kind: array[int],
        kinds: list[tuple[Any, ...]],
    ) -> None:
        if not len(node) == len(local_rank) == len(pid) == len(kind):
            raise ValueError("RankTable: columns of different lengths")
        self.node, self.local_rank, self.pid, self.kind = node, local_rank, pid, kind
        self.kinds = kinds

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]]) -> RankTable:
        """The table of records in global rank order (`rank_record`'s)."""
        kinds: dict[tuple[Any, ...], int] = {}
        kind = array("q", (kinds.setdefault(kind_of(r), len(kinds)) for r in records))
        return cls(
            array("q", (r["node"] for r in records)),
            array("q", (r["local_rank"] for r in records)),
            array("q", (r["pid"] for r in records)),
            kind,
            list(kinds),
        )

    def __len__(self) -> int:
        return len(self.node)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        host, address, device, device_name = self.kinds[self.kind[i]]
        local_rank = self.local_rank[i]
        return rank_record(
            rank=i,
            local_rank=local_rank,
            host=host,
            node=self.node[i],
            pid=self.pid[i],
            address=address,
            device=device.format(local_rank=local_rank) if device == DEVICE_FORM else device,
            device_name=device_name,
        )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    @property
    def nnodes(self) -> int:
        return len(set(self.node))

    def to_compact(self) -> dict[str, Any]:
        """The journal's form: the run columns as `[start, step, count]` runs, pids as they
        are, the kinds once each."""
        compact: dict[str, Any] = {"world": len(self)}
        for name in RUN_FIELDS:
            compact[name] = _runs(getattr(self, name))
        compact["pid"] = list(self.pid)
        compact["kinds"] = [list(k) for k in self.kinds]
        return compact

    @classmethod
    def from_compact(cls, data: Any, where: str = COMPACT_KEY) -> RankTable:
        """The table `to_compact` wrote; UserError naming what does not read."""
        match data:
            case {"world": int(world), "pid": list(pids), "kinds": list(kinds)}:
                pass
            case _:
                raise UserError(f"{where}: not a rank table (world, pid, kinds)")
        columns = {name: _expand(data.get(name), f"{where}.{name}", world) for name in RUN_FIELDS}
        if not all(isinstance(p, int) for p in pids):
            raise UserError(f"{where}.pid: not a list of integers")
        table_kinds = [tuple(k) for k in kinds if isinstance(k, list) and len(k) == 4]
        if len(table_kinds) != len(kinds):
            raise UserError(f"{where}.kinds: each kind is [host, address, device, device_name]")
        if any(not 0 <= k < len(kinds) for k in columns["kind"]):
            raise UserError(f"{where}.kind: a rank's kind is not among the kinds")
        try:
            return cls(
                columns["node"],
                columns["local_rank"],
                array("q", pids),
                columns["kind"],
                table_kinds,
            )
        except ValueError:
            raise UserError(f"{where}: columns of different lengths (world {world})") from None


def context_ranks(context: Mapping[str, Any]) -> dict[str, Any]:
    """The journal's context line as its readers take it: with `ranks`, the list of every
    rank's record, whether the line holds the compact table or (an older commbench's) the
    list itself."""
    if COMPACT_KEY not in context:
        return dict(context)
    read = {k: v for k, v in context.items() if k != COMPACT_KEY}
    read["ranks"] = list(RankTable.from_compact(context[COMPACT_KEY]))
    return read
