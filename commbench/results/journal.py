"""A run's journal, `events.jsonl`, read back: rank 0 appends one JSON object per line
(`launch.protocol.Journal`: the run's context, one row per measured point, health, the end);
the launcher tails it while the run runs, and a reader recovers from it, in memory, the points
of a run whose launcher died (`results.lifecycle.recover`; `settle` writes them). Here, below
both, so that a reader of results never imports the launcher."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.fields import Fields, anything

ROW_EVENT = "row"
"""The journal event of one measured point: {"type": "row", "row": <a ResultRow's dict>}."""
_WHERE = "events.jsonl"


def event_type(event: Mapping[str, Any]) -> Any:
    """A journal line's `type` (None where it has none): which record to read it as."""
    return Fields(event, _WHERE).opt("type", anything)


@dataclass(frozen=True, slots=True)
class RowEvent:
    """One measured point as rank 0 journals it: {"type": "row", "point": <index>, "row":
    <a ResultRow's dict>, "failed_ranks": [...]}."""

    row: Any
    """The row as written, for `ResultRow.from_dict` to check (a reader decides what a row
    that does not validate means: the end of the journal, or an error)."""
    failed_ranks: list[int]
    """Ranks whose result check failed at this point."""

    @classmethod
    def read(cls, event: Mapping[str, Any]) -> RowEvent | None:
        """The row event in `event`; None when it is another event."""
        if event_type(event) != ROW_EVENT:
            return None
        f = Fields(event, _WHERE)
        failed = f.opt("failed_ranks", anything)
        return cls(
            row=f.opt("row", anything),
            failed_ranks=[r for r in failed if isinstance(r, int)]
            if isinstance(failed, list)
            else [],
        )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class JournalReader:
    """Reads the complete lines appended since the last call.

    A line the writer has not finished is kept for the next call; once every process that
    could write has exited, `read(final=True)` also takes an unterminated last line that is
    a whole event (its writer was killed between the object and its newline). A line that
    is not JSON (cut short by a kill, then glued to the next) is skipped and counted in
    `torn`, never a reason to stop reading."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.torn = 0

    def read(self, *, final: bool = False) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            data = b""
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if final and self._partial.strip():
            lines.append(self._partial)
            self._partial = b""
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                event = None
            if isinstance(event, dict):
                events.append(event)
            else:
                self.torn += 1
        return events
