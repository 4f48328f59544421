"""The launcher itself failing: killed outright, unable to write, interrupted twice, its
torchrun agent wedged, a suite terminated. Real launches with gloo on CPU; nothing here
asserts a timing beyond generous bounds on how soon things stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_integration_collectives import SWEEP, _pid, _running, _wait_for_rows, commbench
from typer.testing import CliRunner

from commbench.cli import app
from commbench.collectives import ops, pattern
from commbench.collectives.registry import collective
from commbench.launch import procs
from commbench.results.runs import load_run

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
    deadline = time.monotonic() + 60
    while not load_run(run_dir).rows:  # journalled, and written by the launcher too
        assert time.monotonic() < deadline, "the launcher never wrote the journalled row"
        time.sleep(0.05)
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
    # run.json still says "running": every reader must see the launcher is gone
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    why = f"its launcher (pid {proc.pid}) is gone"
    assert load_run(run_dir).record.status == "interrupted"
    cli = CliRunner()
    report = cli.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0 and f"interrupted: {why}" in report.stdout
    compared = cli.invoke(app, ["compare", str(run_dir), str(run_dir)])
    assert compared.exit_code == 1
    assert compared.stdout.splitlines()[-1].startswith(f"FAIL: the new run was interrupted ({why})")
    # the readers wrote nothing; plot writes into the run (RUN_DIR/plots), and ends it there
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    plotted = cli.invoke(app, ["plot", str(run_dir), "--formats", "svg"])
    assert plotted.exit_code == 0
    assert f"commbench: warning: {run_dir} was interrupted ({why})" in plotted.stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted" and record["failure"] == why
    assert any("commbench plot (pid " in w for w in record["warnings"]), record["warnings"]
    assert not list(run_dir.rglob(".*.tmp"))  # nothing half-written left behind


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
    assert run.record.status == "interrupted" and len(run.rows) >= 1


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
    assert run.record.status == "complete" and len(run.rows) == 7
    assert "did not exit" in run.record.note
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
    assert proc.returncode == 143, err  # SIGTERM's code, 128 + 15
    (suite_dir,) = (tmp_path / "s").iterdir()
    record = json.loads((suite_dir / "suite.json").read_text())
    assert record["status"] == "interrupted"
    assert all(e["status"] != "running" for e in record["entries"])


def test_checking_a_large_buffer_shows_as_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs with no collective in flight for seconds at 1 GiB: every chunk of it
    must reach the heartbeat, or the watchdog calls a slow CPU a hang."""
    import torch

    calls = []
    monkeypatch.setattr(pattern, "CHUNK", 1000)
    monkeypatch.setattr(pattern, "progress", lambda: calls.append(1))
    group = ops.Group(handle=None, ranks=[0], rank=0)
    entry = collective("all_reduce")
    bufs = entry.buffers(10_000, torch.float32, torch.device("cpu"), group, False)
    assert entry.check(bufs, lambda: None, group, "sum")
    assert len(calls) >= 10


# -- stop signals over the whole command ---------------------------------------------------


def _descendant(parent: int, proc_file: str, *needles: bytes, limit: float = 120) -> int:
    """The first descendant of `parent` whose /proc/<pid>/<proc_file> (cmdline, environ)
    holds every one of `needles` as an entry, as soon as there is one."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for pid in procs.descendants(parent):
            try:
                entries = Path(f"/proc/{pid}/{proc_file}").read_bytes().split(b"\0")
            except OSError:
                continue
            if all(n in entries for n in needles):
                return pid
        time.sleep(0.01)
    raise AssertionError(f"no process with {needles} appeared")


def _stopped(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while procs.state(pid) not in ("T", "t"):
        assert time.monotonic() < deadline, f"{pid} did not stop"
        time.sleep(0.01)


def test_sigterm_while_the_backend_is_probed_ends_like_ctrl_c(tmp_path: Path) -> None:
    """The probe runs before the launch's own handler: SIGTERM then must not kill the
    launcher outright (-15, no message) and orphan the probe; it exits 143 with its line."""
    env = {**os.environ, "COMMBENCH_CACHE_DIR": str(tmp_path / "cache")}  # no cache: it probes
    proc = commbench("collectives", *SWEEP, "-o", "out", env=env)
    probe = _descendant(proc.pid, "cmdline", b"commbench.launch.probe")
    _stopped(probe)  # held in the probe: the signal cannot land before or after it
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if procs.alive(probe):
            os.kill(probe, signal.SIGKILL)
    assert proc.returncode == 143, err  # SIGTERM's code, 128 + 15
    assert err.splitlines() == ["commbench: interrupted"]
    assert not _running(probe)
    assert not (tmp_path / "out").exists()  # interrupted before the run directory


def _figures(run_dir: Path) -> int:
    from commbench.report.figures import all_figures
    from commbench.results.runs import load_run as load_any

    return len(all_figures([load_any(run_dir)]))


def _stopped_while_plotting(proc: subprocess.Popen, run: Path, plots: Path) -> bool:
    """SIGSTOP `proc` between the first and the last file of the figures of `run` it draws
    into `plots` (PNG and SVG); False (and `proc` let go) when it finished first."""
    deadline = time.monotonic() + 120
    while not (plots.is_dir() and any(plots.iterdir())):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no figure appeared"
        time.sleep(0.005)
    _stopped(proc.pid)
    if len(list(plots.iterdir())) < 2 * _figures(run):
        return True
    os.kill(proc.pid, signal.SIGCONT)
    proc.communicate(timeout=60)
    return False


def _terminate_stopped(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err  # SIGTERM's code, 128 + 15
    assert "Traceback" not in err
    return err


def test_sigterm_while_plots_are_drawn_ends_like_ctrl_c(tmp_path: Path) -> None:
    args = ["--ops", "all_reduce,broadcast,all_gather", "--sizes", "1K,4K", "--iters", "5"]
    for attempt in range(3):  # a loaded machine may let the plots finish before the test looks
        out = tmp_path / f"out{attempt}"
        proc = commbench("collectives", *args, "--device", "cpu", "--nproc", "2", "-o", out.name)
        run_dir = _wait_for_rows(out, 0, proc)
        if _stopped_while_plotting(proc, run_dir, run_dir / "plots"):
            break
    else:
        pytest.fail("the plots were always drawn before the test could stop the command")
    err = _terminate_stopped(proc)
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert lines == [
        "commbench: error: interrupted while plotting; every point was measured and is in "
        f"{out.name}/{run_dir.name}"
    ], err
    assert load_run(run_dir).record.status == "complete"
    assert not procs.marked("COMMBENCH_RUN_DIR", str(run_dir.resolve()))


def test_sigterm_while_plot_draws_ends_like_ctrl_c(tmp_path: Path) -> None:
    run = Path(__file__).parent / "fixtures" / "runs" / "h100x8-golden"
    for attempt in range(3):
        plots = tmp_path / f"plots{attempt}"
        proc = commbench("plot", str(run), "-o", plots.name)
        if _stopped_while_plotting(proc, run, plots):
            break
    else:
        pytest.fail("the plots were always drawn before the test could stop the command")
    assert _terminate_stopped(proc).splitlines() == ["commbench: interrupted"]


# -- which rank stopped the run ------------------------------------------------------------


def _worker_of_rank(launcher: int, rank: int) -> int:
    """The pid of the worker torchrun started for `rank`, as soon as it exists."""
    return _descendant(launcher, "environ", f"RANK={rank}".encode(), f"LOCAL_RANK={rank}".encode())


def test_a_worker_stopped_during_start_up_is_named(tmp_path: Path) -> None:
    """Stopped while importing torch, it has no heartbeat: /proc still knows its rank."""
    proc = commbench("collectives", *SWEEP, "--timeout", "4", "-o", "out")
    victim = _worker_of_rank(proc.pid, 1)
    _stopped(victim)
    try:
        (run_dir,) = (tmp_path / "out").iterdir()
        assert not (run_dir / "ranks" / "rank1.json").exists()  # stopped before its heartbeat
        # the start-up allowance (120 s) is for slow start-ups, not for stopped processes
        _, err = proc.communicate(timeout=100)
    finally:
        if procs.alive(victim):
            os.kill(victim, signal.SIGKILL)
    assert proc.returncode == 1, err
    assert f"rank 1 (host {socket.gethostname()}, pid {victim}) is stopped (SIGSTOP or a " in err
    assert "during start-up, before its first heartbeat" in err
    assert "backend or network hang" not in err
    run = load_run(run_dir)
    assert run.record.status == "failed" and run.record.failed_ranks[0] == 1
    assert not _running(victim)


def test_sigterm_to_one_worker_names_it_not_its_peer(tmp_path: Path) -> None:
    """torchrun SIGTERMs the survivors: only those are consequences, not the rank someone
    else signalled first."""
    proc = commbench("collectives", *SWEEP, "-o", "out")
    run_dir = _wait_for_rows(tmp_path / "out", 1, proc)
    os.kill(_pid(run_dir, 1), signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("commbench: error:")]
    cause, *others = line.removeprefix("commbench: error: worker failure: ").split("; ")
    assert cause.startswith("rank 1 (") and "killed by SIGTERM (not sent by torchrun)" in cause
    assert all(part.startswith("rank 0 (") and "a consequence" in part for part in others), line
    run = load_run(run_dir)
    assert run.record.failed_ranks[0] == 1


# -- the run directory deleted under a run -------------------------------------------------


@pytest.mark.parametrize("what", ["run directory", "its parent"])
def test_a_deleted_run_directory_stops_the_run_with_one_line(tmp_path: Path, what: str) -> None:
    import shutil

    proc = commbench("collectives", *SWEEP, "--timeout", "60", "-o", "out")
    run_dir = _wait_for_rows(tmp_path / "out", 1, proc)
    workers = [_pid(run_dir, 0), _pid(run_dir, 1)]
    doomed = run_dir if what == "run directory" else tmp_path / "out"
    while doomed.exists():  # as `rm -rf`, racing the run's writers: again until it is gone
        shutil.rmtree(doomed, ignore_errors=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert err.splitlines()[-1] == (
        f"commbench: error: stopped the run: the run directory out/{run_dir.name} "
        "was deleted or replaced"
    ), err
    assert "Traceback" not in err
    assert not any(_running(p) for p in workers)
    assert not run_dir.exists()  # nothing written into it again
