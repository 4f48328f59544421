"""What a replay's rank 0 journals beside its rows (`events.jsonl`): the sequence's step
times and each bucket cap's, typed both ways (the worker writes them, the launcher's side
reads them back); a line of another type is not one of these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from commbench.fields import Fields, integer_in, list_of, number_in, pick

SEQUENCE = "replay-sequence"
REBUCKET = "replay-rebucket"
_MAX = 1 << 20
_seconds = list_of(number_in(0, 1e9), max_items=_MAX)


@dataclass(frozen=True, slots=True)
class SequenceTimes:
    """Per replayed step, first issue to last completion, the maximum over ranks: its median
    over the timed passes (`step_s`), and every pass (`passes_s`, a list of steps each)."""

    step_s: tuple[float, ...]
    passes_s: tuple[tuple[float, ...], ...] = ()
    span_s: tuple[float, ...] = ()
    """Per step, its start to its last completion (gaps included), the median over passes."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": SEQUENCE,
            "step_s": list(self.step_s),
            "passes_s": [list(p) for p in self.passes_s],
            "span_s": list(self.span_s),
        }

    @classmethod
    def from_fields(cls, f: Fields) -> SequenceTimes:
        passes = f.opt("passes_s", list_of(_seconds, max_items=1024)) or []
        return cls(
            step_s=tuple(f.req("step_s", _seconds)),
            passes_s=tuple(map(tuple, passes)),
            span_s=tuple(f.opt("span_s", _seconds) or ()),
        )


@dataclass(frozen=True, slots=True)
class CapTimes:
    """One bucket cap: its buckets' all-reduces per repeat, the maximum over ranks."""

    cap_bytes: int
    buckets: int
    samples_s: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": REBUCKET,
            **pick(self, "cap_bytes", "buckets"),
            "samples_s": list(self.samples_s),
        }

    @classmethod
    def from_fields(cls, f: Fields) -> CapTimes:
        return cls(
            cap_bytes=f.req("cap_bytes", integer_in(1, 1 << 50)),
            buckets=f.req("buckets", integer_in(0, _MAX)),
            samples_s=tuple(f.req("samples_s", _seconds)),
        )


_READERS: dict[str, Callable[[Fields], SequenceTimes | CapTimes]] = {
    SEQUENCE: SequenceTimes.from_fields,
    REBUCKET: CapTimes.from_fields,
}


def read_event(event: dict[str, Any], where: str) -> SequenceTimes | CapTimes | None:
    """The replay event a journal line holds, by its `type`; None for a line of another
    type (the rows, a heartbeat), which is not the replay's to read."""
    kind = event.get("type")
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    return None if reader is None else reader(Fields(event, where))
