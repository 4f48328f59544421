"""Real torchrun launches with gloo on CPU: every op's result, the files, failures.

These are the slow tests (a launch costs a few seconds on a 2-core machine); they use tiny
iteration counts. Nothing here asserts a timing.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commbench.collectives.specs import OPS
from commbench.launch.launcher import run_collectives
from commbench.results.runs import load_run
from tests.factories import collectives_settings

pytestmark = pytest.mark.integration

FAST = ["--iters", "5", "--warmup", "1", "--device", "cpu"]


def commbench(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "commbench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def only_run_dir(parent: Path) -> Path:
    runs = [p for p in parent.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_world_2_every_op_checks_and_writes_files(tmp_path: Path) -> None:
    proc = commbench("collectives", "--nproc", "2", "--sizes", "1000,64K", *FAST, "-o", "out")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    run_dir = only_run_dir(tmp_path / "out")
    run = load_run(run_dir)
    assert run.record.status == "complete"
    points = (len(OPS) - 1) * 2 + 1  # two sizes of every op but the barrier, which has none
    assert run.record.points_total == run.record.points_done == points
    assert {r.op for r in run.rows} == set(OPS)
    for row in run.rows:
        assert row.world_size == 2
        assert row.check == ("n/a" if row.op == "barrier" else "ok"), row
        assert row.stats.n == 5 and len(row.samples_us) == 5 and row.time_us > 0
        # each rank's own times; the headline samples are their per-iteration maximum
        assert row.ranks is not None and row.ranks.ranks == [0, 1], row
        assert max(row.ranks.median_us) <= row.time_us * (1 + 1e-12)
        # the host's pace beside the samples: on CPU the loop holds them, so it issued at
        # most one op per mean sample (of the slowest rank's own, at or below the maximum)
        assert row.issue_ops_per_s is not None and row.issue_ops_per_s > 0, row
        assert row.issue_ops_per_s <= 1e6 / min(row.ranks.median_us) * 2, row
        # torch's all_reduce/broadcast/reduce write into their input: nccl-tests' in-place
        assert row.in_place == (row.op in ("all_reduce", "broadcast", "reduce")), row
    ctx = run.context
    assert ctx.backend == "gloo" and ctx.world_size == 2 and ctx.torch
    assert ctx.device_names == ["cpu"] and len(ctx.ranks) == 2
    assert "OMP_NUM_THREADS" in ctx.env
    with open(run_dir / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == points and {
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "p95_us",
        "stddev_us",
        "cv",
        "issue_ops_per_s",
    } <= set(rows[0])
    assert all(float(r["issue_ops_per_s"]) > 0 for r in rows)
    assert "# all_gather  float32  2 ranks" in out and "busbw_GB/s" in out
    assert "# Using devices" in out and "# Bus bandwidth: peak" in out


def test_world_4_integer_max_rounds_uneven_sizes(tmp_path: Path) -> None:
    settings = collectives_settings(
        ops=list(OPS),
        sizes=[4, 1024],
        nproc=4,
        backend="gloo",
        device="cpu",
        dtype="int32",
        reduce_op="max",
        iters=3,
        warmup=1,
    )
    outcome = run_collectives(settings, tmp_path)
    assert outcome.status == "complete", outcome.failure
    assert not outcome.checks_failed
    gathers = [r for r in outcome.rows if r.op == "all_gather"]
    # 4 B is one int32: too small for 4 ranks, rounded up to one element each, and said so
    assert gathers[0].count == 4 and gathers[0].size_bytes == 16 and "rounded" in gathers[0].note
    assert gathers[1].size_bytes == 1024 and gathers[1].note == ""
    assert all(r.world_size == 4 for r in outcome.rows)


def test_subgroup_ranks_time_a_pair_inside_a_bigger_job(tmp_path: Path) -> None:
    settings = collectives_settings(
        ops=["all_reduce", "sendrecv", "broadcast", "all_gather"],
        sizes=[4096],
        nproc=4,
        backend="gloo",
        device="cpu",
        ranks=[1, 3],
        iters=3,
        warmup=1,
        in_place=True,
    )
    outcome = run_collectives(settings, tmp_path)
    assert outcome.status == "complete", outcome.failure
    assert [r.check for r in outcome.rows] == ["ok"] * 4
    assert all(r.world_size == 2 for r in outcome.rows)
    # rank 0 is no member: it records the members' times, and none of its own
    assert all(r.ranks is not None and r.ranks.ranks == [1, 3] for r in outcome.rows)
    ag = next(r for r in outcome.rows if r.op == "all_gather")
    assert ag.in_place and ag.busbw_gbps == pytest.approx(ag.algbw_gbps * 0.5)


def _wait_for_rows(run_parent: Path, rows: int, proc: subprocess.Popen, limit: float = 120) -> Path:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        runs = [p for p in run_parent.glob("*") if p.is_dir()] if run_parent.exists() else []
        if runs and (runs[0] / "events.jsonl").exists():
            lines = (runs[0] / "events.jsonl").read_text().splitlines()
            if sum('"type": "row"' in ln for ln in lines) >= rows:
                return runs[0]
        time.sleep(0.1)
    raise AssertionError("the run did not produce rows in time")


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init, which CI may not run)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pid(run_dir: Path, rank: int) -> int:
    return int(json.loads((run_dir / "ranks" / f"rank{rank}.json").read_text())["pid"])


SWEEP = [
    "--ops",
    "all_reduce",
    "--sizes",
    "1K-16M",
    "--iters",
    "100",  # the tests stop the run after a row or two: a long tail keeps it from finishing first
    "--warmup",
    "1",
    "--device",
    "cpu",
    "--nproc",
    "2",
]


def test_a_killed_worker_ends_the_run_and_keeps_the_rows(tmp_path: Path) -> None:
    proc = commbench("collectives", *SWEEP, "-o", "out")
    run_dir = _wait_for_rows(tmp_path / "out", 2, proc)
    victim = _pid(run_dir, 1)
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - killed < 30
    assert proc.returncode == 1
    assert "rank 1" in err and "SIGKILL" in err and "Traceback" not in err
    run = load_run(run_dir)
    assert run.record.status == "failed" and 1 in run.record.failed_ranks
    assert len(run.rows) >= 2 and all(r.check == "ok" for r in run.rows)


def test_a_stopped_worker_is_named_and_stopped_within_the_timeout(tmp_path: Path) -> None:
    proc = commbench("collectives", *SWEEP, "--timeout", "4", "-o", "out")
    run_dir = _wait_for_rows(tmp_path / "out", 2, proc)
    victim = _pid(run_dir, 1)
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        os.kill(victim, signal.SIGCONT) if proc.returncode is None else None
    assert time.monotonic() - stopped < 4 + 15
    assert proc.returncode == 1
    assert "rank 1" in err and "is stopped" in err and "no progress for 4 s" in err
    run = load_run(run_dir)
    assert run.record.status == "failed" and run.record.failed_ranks[0] == 1
    assert len(run.rows) >= 2
    time.sleep(0.5)
    assert not _running(victim)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_everything_and_keeps_what_was_measured(
    tmp_path: Path, sig: int
) -> None:
    proc = commbench("collectives", *SWEEP, "-o", "out")
    run_dir = _wait_for_rows(tmp_path / "out", 1, proc)
    workers = [_pid(run_dir, 0), _pid(run_dir, 1)]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err  # 130 for Ctrl-C, 143 for SIGTERM
    run = load_run(run_dir)
    assert run.record.status == "interrupted" and len(run.rows) >= 1
    time.sleep(0.5)
    assert not any(_running(p) for p in workers)


def test_two_runs_at_once_both_succeed(tmp_path: Path) -> None:
    args = ["collectives", "--ops", "all_reduce,broadcast", "--sizes", "1K", *FAST, "--nproc", "2"]
    a, b = commbench(*args, "-o", "a"), commbench(*args, "-o", "b")
    (_, err_a), (_, err_b) = a.communicate(timeout=180), b.communicate(timeout=180)
    assert (a.returncode, b.returncode) == (0, 0), err_a + err_b


def test_a_busy_default_port_does_not_break_a_run(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("127.0.0.1", 29500))  # torch.distributed's default MASTER_PORT
        except OSError:
            pytest.skip("port 29500 is already taken by something else")
        busy.listen()
        proc = commbench(
            "collectives",
            "--ops",
            "all_reduce",
            "--sizes",
            "1K",
            *FAST,
            "--nproc",
            "2",
            "-o",
            "out",
        )
        _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
