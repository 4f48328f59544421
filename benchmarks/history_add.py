"""How long does adding one run to a long history take? (issue 42: under a second for a series
of 10,000 runs.)

A SQLite history is built with `--runs` runs of one machine, each of `--points` points (one
series per point), their busbw stepping down 20% halfway so that each series holds a change
point (the incremental update starts after it); the runs go in `--batch` at a time, as CI
would never add them, only to build it fast. Then `--repeat` more runs are added one at a time,
each timed with a monotonic clock around what `commbench history add` does in-process: open
the history, add the run (its points, its series' change points updated: `changes.update`),
commit, close: the median and the worst. Loading the run directory is not in it (the same
for any history), nor importing numpy, scipy and ruptures (done while building); `--cli` also
times `commbench history add RUN_DIR` as a process, which pays for both.

    python benchmarks/history_add.py                      # 10,000 runs of 1 point
    python benchmarks/history_add.py --points 20          # a run of 20 points: 20 series
    python benchmarks/history_add.py --db /tmp/h.db --cli
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from commbench.history.store import History
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus
from commbench.results.runs import Run
from commbench.results.schema import ResultRow

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def make_run(i: int, points: int, speed: float, rng: random.Random) -> Run:
    """Run number `i` of the bench machine, at `speed` (busbw x speed, 2% run-to-run noise)."""
    rows = []
    for p in range(points):
        size = 1024 << p
        median = (20.0 + size / 2e3) / speed * math.exp(rng.gauss(0, 0.02))
        rows.append(
            ResultRow.measured(
                samples_us=[median * f for f in (0.97, 0.99, 1.0, 1.01, 1.03)],
                size_bytes=size,
                busbw_factor=1.0,
                op="all_reduce",
                dtype="float32",
                reduce_op="sum",
                world_size=2,
                count=size // 4,
                check="ok",
            )
        )
    at = (START + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%S%z")
    context = RunContext(
        host="bench",
        hosts=["bench"],
        started_at=at,
        world_size=2,
        backend="gloo",
        device="cpu",
        device_names=["cpu"],
        torch="2.13.0+cpu",
    )
    record = RunRecord(
        kind=RunKind.COLLECTIVES,
        status=RunStatus.COMPLETE,
        run_id=f"bench-{i:06d}",
        context=context,
    )
    return Run(path=Path(f"/bench/run-{i:06d}"), record=record, rows=rows)


def build(db: Path, runs: int, points: int, batch: int, rng: random.Random) -> float:
    """The history of `runs` runs; the seconds it took."""
    start = time.monotonic()
    for first in range(0, runs, batch):
        made = [
            make_run(i, points, 1.0 if i < runs // 2 else 0.8, rng)
            for i in range(first, min(runs, first + batch))
        ]
        with History.open(db, write=True) as history:
            history.add([(run, None, None) for run in made])
    return time.monotonic() - start


def time_add(db: Path, run: Run) -> tuple[float, int]:
    """Seconds to add `run` to the history at `db` (open, add, commit, close); the change
    points of its series afterwards."""
    start = time.monotonic()
    with History.open(db, write=True) as history:
        added = history.add([(run, None, None)])
    took = time.monotonic() - start
    assert added.runs[0].added
    with History.open(db) as history:
        found = len(history.changes())
    return took, found


def time_cli(db: Path, run_dir: Path) -> float:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "commbench", "history", "add", str(run_dir), "--db", str(db)],
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return took


def write_run_dir(parent: Path, run: Run) -> Path:
    from commbench.results.store import RunDir, write_results

    path = parent / run.path.name
    path.mkdir(parents=True)
    RunDir(path).write_record(run.record)
    write_results(path, run.rows)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000, help="runs in the history")
    parser.add_argument("--points", type=int, default=1, help="points (series) per run")
    parser.add_argument("--batch", type=int, default=1_000, help="runs per add while building")
    parser.add_argument("--repeat", type=int, default=11, help="runs added one by one, timed")
    parser.add_argument("--db", type=Path, default=None, help="where (default: a temp dir)")
    parser.add_argument("--cli", action="store_true", help="also time the command, a process")
    args = parser.parse_args()
    rng = random.Random(42)
    with tempfile.TemporaryDirectory() as scratch:
        db = args.db or Path(scratch) / "history.db"
        if db.exists():
            raise SystemExit(f"{db} exists: give a new path")
        built = build(db, args.runs, args.points, args.batch, rng)
        print(
            f"built {args.runs} runs x {args.points} points in {built:.1f} s ({db.stat().st_size / 1e6:.1f} MB)"
        )
        times = []
        for k in range(args.repeat):
            took, found = time_add(db, make_run(args.runs + k, args.points, 0.8, rng))
            times.append(took)
        print(
            f"add 1 run ({args.points} points) to series of {args.runs}+ runs: median "
            f"{statistics.median(times) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms over "
            f"{len(times)} adds; {found} change points stored"
        )
        if args.cli:
            run_dir = write_run_dir(
                Path(scratch) / "runs", make_run(args.runs + args.repeat, args.points, 0.8, rng)
            )
            print(f"commbench history add RUN_DIR (a process): {time_cli(db, run_dir):.2f} s")


if __name__ == "__main__":
    main()
