"""The launcher itself failing: killed outright, unable to write, interrupted twice, its
torchrun agent wedged, a suite terminated. Real launches with gloo on CPU; nothing here
asserts a timing beyond generous bounds on how soon things stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_integration_collectives import SWEEP, _pid, _running, _wait_for_rows, commbench

from commbench.collectives import ops
from commbench.launch import procs
from commbench.results.store import load_run

pytestmark = pytest.mark.integration


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_running(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _agent(worker_pid: int) -> int:
    stat = Path(f"/proc/{worker_pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_workers_stop_themselves_when_the_launcher_is_killed(tmp_path: Path) -> None:
    """SIGKILL leaves no launcher to stop them: they must not measure on for nobody."""
    proc = commbench("collectives", *SWEEP, "-o", "out", start_new_session=True)
    run_dir = _wait_for_rows(tmp_path / "out", 1, proc)
    workers = [_pid(run_dir, 0), _pid(run_dir, 1)]
    agent = _agent(workers[0])
    proc.kill()
    proc.wait()
    try:
        assert _gone_within(workers, 20), "workers outlived their launcher"
        assert _gone_within([agent], 30), "torchrun outlived its workers"
    finally:
        procs.stop_all({p for p in [*workers, agent] if procs.alive(p)}, grace=1.0)
    # the first rank to notice names the launcher; a peer may be stopped by torchrun's agent
    # (SIGTERM, no record) or die of the reset connection, which it then blames on the launcher
    errors = [
        json.loads((run_dir / "ranks" / f"rank{r}.json").read_text())["error"] for r in (0, 1)
    ]
    gone = [e for e in errors if e.startswith("its launcher (pid ") and "is gone" in e]
    assert gone, errors
    assert all(e in gone or e == "" for e in errors), errors


def test_results_that_cannot_be_written_stop_the_run_with_exit_1(tmp_path: Path) -> None:
    proc = commbench("collectives", *SWEEP, "-o", "out")
    run_dir = _wait_for_rows(tmp_path / "out", 1, proc)
    workers = [_pid(run_dir, 0), _pid(run_dir, 1)]
    # the next atomic write of results.json fails; the launcher may be writing it right now
    # (its own temporary file is there for the fsync): wait for that write to end
    blocker = run_dir / f".results.json.{proc.pid}.tmp"
    deadline = time.monotonic() + 10
    while True:
        try:
            blocker.mkdir()
            break
        except FileExistsError:
            assert time.monotonic() < deadline, "the launcher's temporary file never went"
            time.sleep(0.001)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "stopped the run: cannot write" in err and "Traceback" not in err
    assert not any(_running(p) for p in workers)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "failed" and "cannot write" in run["failure"]


def test_a_second_ctrl_c_still_leaves_a_finished_record(tmp_path: Path) -> None:
    proc = commbench("collectives", *SWEEP, "-o", "out")
    run_dir = _wait_for_rows(tmp_path / "out", 1, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    run = load_run(run_dir)
    assert run.meta["status"] == "interrupted" and len(run.rows) >= 1


def test_a_wedged_torchrun_does_not_fail_a_whole_run(tmp_path: Path) -> None:
    """All rows in, workers gone, the agent stopped: the measurement is whole."""
    args = ["--ops", "all_reduce", "--sizes", "1K-64K", "--iters", "20", "--device", "cpu"]
    proc = commbench("collectives", *args, "--timeout", "60", "-o", "out")
    # the journal exists once the process group is up (the agent's store is no longer needed):
    # stopping the agent then leaves the whole sweep, not its last ~0.5 s, to outrun the test
    run_dir = _wait_for_rows(tmp_path / "out", 0, proc)
    agent = _agent(_pid(run_dir, 0))
    os.kill(agent, signal.SIGSTOP)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if procs.alive(agent):
            os.kill(agent, signal.SIGCONT)
    assert proc.returncode == 0, err
    run = load_run(run_dir)
    assert run.meta["status"] == "complete" and len(run.rows) == 7
    assert "did not exit" in run.meta["note"]
    assert not _running(agent)


def test_sigterm_ends_a_suite_like_ctrl_c(tmp_path: Path) -> None:
    suite = tmp_path / "tiny.yaml"
    suite.write_text(
        "name: tiny\ncollectives:\n  ops: [all_reduce]\n  sizes: 1K-16M\n  dtypes: [float32, bfloat16]\n  iters: 20\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "commbench", "run", str(suite), "-o", "s", "--no-plot"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "s").glob("*/*/events.jsonl")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (suite_dir,) = (tmp_path / "s").iterdir()
    record = json.loads((suite_dir / "suite.json").read_text())
    assert record["status"] == "interrupted"
    assert all(e["status"] != "running" for e in record["entries"])


def test_checking_a_large_buffer_shows_as_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs with no collective in flight for seconds at 1 GiB: every chunk of it
    must reach the heartbeat, or the watchdog calls a slow CPU a hang."""
    import torch

    calls = []
    monkeypatch.setattr(ops, "_CHUNK", 1000)
    monkeypatch.setattr(ops, "progress", lambda: calls.append(1))
    group = ops.Group(handle=None, ranks=[0], rank=0)
    bufs = ops.make_buffers("all_reduce", 10_000, torch.float32, torch.device("cpu"), group, False)
    assert ops.check("all_reduce", bufs, lambda: None, group, "sum")
    assert len(calls) >= 10
