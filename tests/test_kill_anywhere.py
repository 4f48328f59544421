"""A SIGKILL of any process of a run, at a random moment while the rows come in, never loses
a point that rank 0 journaled: every row of events.jsonl is in results.json and results.csv,
and run.json is final and says what happened (after the launcher's own death, once
`commbench settle` has ended the run). Real launches with gloo on CPU, repeated with the kill placed at
random; nothing here asserts a timing."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.launch import procs
from commbench.processes import RUN_MARKER

pytestmark = pytest.mark.integration

TRIES = 20
SWEEP = [
    "collectives",
    "--device",
    "cpu",
    "--nproc",
    "2",
    "--ops",
    "all_reduce",
    "--sizes",
    "1K-64K",
    "--iters",
    "3",
    "--warmup",
    "1",
    "--timeout",
    "30",
    "--no-plot",
]
TARGETS = ("agent", "rank0", "rank1", "launcher")
AT_ONCE = 2
"""Tries run two at a time: each spends most of its life starting up and winding down."""


def _journal_rows(run_dir: Path) -> list[tuple[str, int]]:
    """The points in events.jsonl: every line that parses and is a row, the last one too
    (a writer killed between the object and its newline left a whole event)."""
    out = []
    for line in (run_dir / "events.jsonl").read_bytes().split(b"\n"):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short by the kill: no point was journaled there
        if event.get("type") == "row":
            out.append((event["row"]["op"], int(event["row"]["size_bytes"])))
    return out


def _beat_pid(run_dir: Path, rank: int) -> int | None:
    try:
        return int(json.loads((run_dir / "ranks" / f"rank{rank}.json").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _victim(target: str, proc: subprocess.Popen, run_dir: Path) -> int | None:
    if target == "launcher":
        return proc.pid
    worker = _beat_pid(run_dir, 1 if target == "rank1" else 0)
    if worker is None:
        return None
    return _parent(worker) if target == "agent" else worker


def _wait(pred, seconds: float, step: float = 0.005) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


def _one_try(parent: Path, rng: random.Random, target: str) -> str:
    out = parent / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "commbench", *SWEEP, "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stray: set[int] = set()
    try:
        assert _wait(lambda: out.exists() and any(out.iterdir()), 60), proc.communicate()
        run_dir = next(out.iterdir())
        events = run_dir / "events.jsonl"
        assert _wait(lambda: events.exists() and events.stat().st_size > 0, 90), "no journal"
        # the rows follow the context line within a few hundred milliseconds
        time.sleep(rng.uniform(0.0, 0.25))
        victim = _victim(target, proc, run_dir)
        stray = {p for p in (_beat_pid(run_dir, 0), _beat_pid(run_dir, 1)) if p}
        if victim is not None:
            stray.add(victim)
            with contextlib.suppress(ProcessLookupError):  # it ended on its own
                os.kill(victim, signal.SIGKILL)
        proc.communicate(timeout=90)
        if target == "launcher":
            # the workers stop themselves once their launcher is gone; then `settle` ends
            # the run (a reader would take it so, writing nothing). Every process of the run, found by its marker (a rank whose heartbeat
            # was not yet written when the launcher died is not in `stray`)
            marker = str(run_dir.resolve())

            def run_over() -> bool:
                return not any(procs.alive(p) for p in stray) and not procs.marked(
                    RUN_MARKER, marker
                )

            assert _wait(run_over, 30, 0.1)
            settled = CliRunner().invoke(app, ["settle", str(run_dir)])
            assert settled.exit_code == 0, settled.output
    finally:
        procs.stop_all({p for p in [proc.pid, *stray] if procs.alive(p)}, grace=1.0)
    journaled = _journal_rows(run_dir)
    stored = json.loads((run_dir / "results.json").read_text())["rows"]
    in_json = [(r["op"], int(r["size_bytes"])) for r in stored]
    with open(run_dir / "results.csv", newline="") as fh:
        in_csv = [(r["op"], int(r["size_bytes"])) for r in csv.DictReader(fh)]
    record = json.loads((run_dir / "run.json").read_text())
    what = (
        f"{target} killed, {len(journaled)} point(s) journaled: "
        f"{record.get('status')} ({record.get('failure')})"
    )
    assert set(journaled) <= set(in_json), f"{what}: journaled {journaled}, results.json {in_json}"
    assert set(journaled) <= set(in_csv), f"{what}: journaled {journaled}, results.csv {in_csv}"
    assert record["status"] != "running", what
    assert record["points_done"] == len(in_json), what
    if record["status"] != "complete":
        assert record["failure"], what
    assert not list(run_dir.rglob(".*.tmp")), what
    return what


def test_a_kill_of_any_process_at_any_moment_loses_no_journaled_point(tmp_path: Path) -> None:
    seed = int(os.environ.get("COMMBENCH_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    plan = [(i, TARGETS[i % len(TARGETS)], random.Random(rng.random())) for i in range(TRIES)]
    with ThreadPoolExecutor(AT_ONCE) as pool:
        seen = list(pool.map(lambda t: _one_try(tmp_path / f"try{t[0]}", t[2], t[1]), plan))
    print(f"seed {seed}:", *seen, sep="\n  ")
