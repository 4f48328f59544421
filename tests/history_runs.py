"""Run directories for the history's tests, built on tests/factories.py: a run of a machine at
a time, as fast as asked, with the software and settings asked (everything else a plausible
2-rank gloo CPU run)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from tests.factories import make_row, write_run

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SIZES = (1024, 1 << 20)


def started(hour: int) -> str:
    """A run's start time, `hour` hours after START, as run.json writes it."""
    return (START + timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%S%z")


def history_run(
    parent: Path,
    name: str,
    *,
    hour: int,
    speed: float = 1.0,
    host: str = "vm",
    status: str = "complete",
    failure: str | None = None,
    kind: str = "collectives",
    torch: str = "2.13.0+cpu",
    env: Mapping[str, str] | None = None,
    commit: str | None = None,
    sizes: Sequence[int] = SIZES,
    noise: float = 0.01,
    check: str = "ok",
    world: int = 2,
    context: Mapping[str, Any] | None = None,
) -> Path:
    """A run directory `parent/name` started `hour` hours after START whose points run at
    `speed` (busbw x speed), each run's medians off by up to `noise` (seeded by `name`)."""
    rng = random.Random(name)
    rows = []
    for size in sizes:
        base = (10.0 + size / 1e3) / speed * (1 + noise * (2 * rng.random() - 1))
        samples = [base * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]
        rows.append(make_row(size, samples, world_size=world, check=check))
    record: dict[str, Any] = {
        "kind": kind,
        "run_id": name,
        "status": status,
        "context": {
            "host": host,
            "hosts": [host],
            "started_at": started(hour),
            "world_size": world,
            "backend": "gloo",
            "device": "cpu",
            "device_names": ["cpu"],
            "torch": torch,
            "commbench": "0.1.0",
            "cwd_git_commit": commit,
            "env": dict(env or {}),
            **(context or {}),
        },
    }
    if failure is not None:
        record["failure"] = failure
    return write_run(parent / name, rows, record)
