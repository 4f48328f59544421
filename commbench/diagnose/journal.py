"""What a diagnosis journals into events.jsonl and reads back, in the words both sides use.

The workers write one line per test (`RecordedTest`); the launcher replays them to reach its
verdict (`run.conclude`), and a later diagnosis reads them as its baseline (`expectations`).
The stages' names are those lines' `stage` (and an expectations file's keys, and the
heatmaps' file names). A failed round's roll call (`launch.protocol.RollCallView`) records
the peers that gloo's error names, by `PEER_ADDRESS`, which the launcher reads again in the
failure text of its ranks.

At the bottom of the package: it imports no other room of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from commbench.fields import (
    Fields,
    anything,
    integer_in,
    list_of,
    number,
    one_of,
    pick,
)

INTRA = "intra-node"
GPU_PAIRS = "gpu-pairs"
INTER = "inter-node"
STAGE_NAMES = (INTRA, GPU_PAIRS, INTER)
"""In the order a diagnosis runs them: inside every node at once, GPU pairs, across nodes."""

TEST_EVENT = "diagnose"
"""The `type` of a test's line in events.jsonl."""

PEER_ADDRESS = re.compile(r"\[(\d{1,3}(?:\.\d{1,3}){3})\]")
"""A peer's address in gloo's errors: "Connection reset by peer [10.0.0.4]:46312"."""

_MAX_RANK = 1 << 40
_MAX_ITEMS = 1 << 20
_rank = integer_in(0, _MAX_RANK)


def event_type(event: Mapping[str, Any], where: str) -> Any:
    """A journal line's `type` (None where it has none): which record to read it as."""
    return Fields(event, where).opt("type", anything)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedTest:
    """One test, as its line of events.jsonl: which stage and round it ran in, its probe and
    filler units, the ranks it ran on and its bus bandwidth per timed iteration."""

    stage: str
    round: int
    probe: tuple[int, ...]
    fillers: tuple[int, ...]
    ranks: tuple[int, ...]
    samples_gbps: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": TEST_EVENT,
            **pick(self, "stage", "round"),
            "probe": list(self.probe),
            "fillers": list(self.fillers),
            "ranks": list(self.ranks),
            "samples_gbps": list(self.samples_gbps),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> RecordedTest:
        """From a parsed line whose `type` is TEST_EVENT; UserError naming the field that
        does not read."""
        f = Fields(data, where)
        units = list_of(_rank, max_items=_MAX_ITEMS)
        return cls(
            stage=f.req("stage", one_of(STAGE_NAMES)),
            round=f.req("round", integer_in(0, _MAX_ITEMS)),
            probe=tuple(f.req("probe", units)),
            fillers=tuple(f.req("fillers", units)),
            ranks=tuple(f.opt("ranks", units) or ()),
            samples_gbps=tuple(f.req("samples_gbps", list_of(number, max_items=_MAX_ITEMS))),
        )

    @classmethod
    def from_event(cls, event: Mapping[str, Any], where: str) -> RecordedTest | None:
        """The test a journal line holds; None for a line of another type."""
        if event_type(event, where) != TEST_EVENT:
            return None
        return cls.from_dict(event, where)
