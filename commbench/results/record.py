"""What a run is: its status (and, next, the typed run record every run kind shares)."""

from __future__ import annotations

from enum import Enum


class RunStatus(str, Enum):  # str: compares equal to, and is written as, its value
    """Where a run (or a suite entry) stands; written to run.json and suite.json as its value.

    A reader takes "running" with care: a launcher killed outright leaves it behind
    (`results.store.recognise_status`)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"

    def __str__(self) -> str:  # f"{status}" is the word, as with StrEnum (3.11+)
        return self.value
