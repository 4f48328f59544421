"""One rank of a run's `context.ranks`, typed: what its worker reported of itself.

The context keeps each rank's object as the worker wrote it (a newer commbench may add keys,
and `RunContext` keeps the ones it does not know), so the list stays dicts on disk and in
`RunContext`; a reader that needs a rank's host, node or device reads it through
`RankEntry.read`, once, and then its attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEntry:
    """The fields of one rank's entry that readers use; None where the entry does not say."""

    rank: int | None = None
    local_rank: int | None = None
    node: int | None = None
    """torchrun's group rank: the node the rank ran on."""
    host: str | None = None
    address: str | None = None
    """Where the node's ranks are reached (what a peer's error names)."""
    device: str | None = None
    """`cuda:N` or `cpu`."""
    device_name: str | None = None
    pci_bus_id: str | None = None
    pid: int | None = None
    """The process (an nccl-tests import names each process by it)."""

    @classmethod
    def read(cls, item: Any) -> RankEntry:
        """The entry's fields of the right type; a field of another type is left out rather
        than trusted (run.json's are checked when it is read, but a summary is also drawn
        from what the workers just reported), and an item that is not an object says
        nothing."""
        if not isinstance(item, Mapping):
            return cls()
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = item.get(f.name)
            if f.name in _INTEGERS:
                if isinstance(value, int) and not isinstance(value, bool):
                    values[f.name] = value
            elif isinstance(value, str):
                values[f.name] = value
        return cls(**values)


_INTEGERS = ("rank", "local_rank", "node", "pid")
