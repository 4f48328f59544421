"""The watchdog's rule for how long silence may last before a run is declared hung, and
what a rank's heartbeat says of how it ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.launch.protocol import (
    LAUNCHER_GONE_EXIT,
    STARTUP_TIMEOUT,
    Heartbeat,
    heartbeat_path,
)
from commbench.launch.watchdog import Watch


def _beat(run_dir: Path, rank: int, point: int, phase: str) -> None:
    path = heartbeat_path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": rank, "pid": 1, "point": point, "phase": phase}))


def test_start_up_gets_the_start_up_allowance_then_the_timeout_applies(tmp_path: Path) -> None:
    watch = Watch(tmp_path, [])
    watch.poll(lambda row: None)
    assert not watch.started
    assert watch.allowance(4) == STARTUP_TIMEOUT  # nobody reported in yet
    _beat(tmp_path, 0, -1, "init")
    _beat(tmp_path, 1, -1, "init")
    watch.poll(lambda row: None)
    assert watch.allowance(4) == STARTUP_TIMEOUT  # process group still coming up
    _beat(tmp_path, 1, 0, "warmup")
    watch.poll(lambda row: None)
    assert watch.started
    assert watch.allowance(4) == 4


def test_a_timeout_longer_than_start_up_is_kept(tmp_path: Path) -> None:
    watch = Watch(tmp_path, [])
    assert watch.allowance(STARTUP_TIMEOUT + 100) == STARTUP_TIMEOUT + 100


def test_processes_are_found_by_their_run_marker(tmp_path: Path) -> None:
    """Workers that outlive torchrun (re-parented to init) are found by their environment."""
    import os
    import subprocess
    import sys

    from commbench.launch import procs

    env = {**os.environ, "COMMBENCH_RUN_DIR": str(tmp_path)}
    marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = procs.marked("COMMBENCH_RUN_DIR", str(tmp_path))
        assert marked.pid in found and plain.pid not in found
        assert procs.marked("COMMBENCH_RUN_DIR", str(tmp_path / "other")) == set()
    finally:
        for p in (marked, plain):
            p.kill()
            p.wait()


def test_a_crash_from_a_lost_peer_names_the_silent_rank_on_the_other_node(tmp_path: Path) -> None:
    """The other node's watchdog may stop its stuck rank before ours fires: our ranks then
    only report a reset connection, and the rank that went silent is the cause to name."""
    import os
    import time

    from commbench.launch.watchdog import describe_crash

    path = heartbeat_path(tmp_path, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "rank": 0,
                "local_rank": 0,
                "pid": 1,
                "point": 3,
                "phase": "timed",
                "host": "n0",
                "error": "RuntimeError: Connection reset by peer",
            }
        )
    )
    remote = heartbeat_path(tmp_path, 1)
    remote.write_text(
        json.dumps(
            {"rank": 1, "pid": 7, "point": 3, "phase": "timed", "host": "n1", "remote": True}
        )
    )
    stale = time.time() - 6
    os.utime(remote, (stale, stale))
    watch = Watch(tmp_path, [])
    watch.poll(lambda row: None)
    failure, culprits = describe_crash(watch, 1, timeout=5)
    assert culprits[0] == 1
    assert failure.startswith("worker failure: rank 1 (host n1) stopped responding")
    assert "rank 0 (host n0, exit 1) RuntimeError: Connection reset by peer" in failure
    # with the remote rank still fresh, our rank's error is all there is to say
    os.utime(remote)
    watch.poll(lambda row: None)
    failure, culprits = describe_crash(watch, 1, timeout=5)
    assert culprits == [0] and "rank 1" not in failure


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_a_rank_that_dies_after_its_launcher_names_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its peer noticed the dead launcher first and left; this rank only saw the reset."""
    monkeypatch.setattr(Heartbeat, "_run", lambda self: None)  # the thread would _exit us
    dead = _dead_pid()
    hb = Heartbeat(heartbeat_path(tmp_path, 1), rank=1, host="h", launcher_pid=dead)
    hb.stop(error="RuntimeError: Connection reset by peer")
    error = json.loads(heartbeat_path(tmp_path, 1).read_text())["error"]
    assert error.startswith(f"its launcher (pid {dead}) is gone")
    assert "Connection reset by peer" in error


def test_a_rank_that_fails_under_a_live_launcher_keeps_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Heartbeat, "_run", lambda self: None)
    hb = Heartbeat(heartbeat_path(tmp_path, 0), rank=0, host="h", launcher_pid=os.getpid())
    hb.stop(error="RuntimeError: Connection reset by peer")
    assert json.loads(heartbeat_path(tmp_path, 0).read_text())["error"] == (
        "RuntimeError: Connection reset by peer"
    )


_TERMINATED_RANK = """
import os, signal, sys, time
from pathlib import Path
from commbench.launch.protocol import Heartbeat
Heartbeat._run = lambda self: None  # only the SIGTERM path is under test
hb = Heartbeat(Path(sys.argv[1]), rank=1, host="h", launcher_pid=int(sys.argv[2]))
hb.record_termination()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
"""


@pytest.mark.parametrize("launcher_alive", [False, True])
def test_a_rank_stopped_by_sigterm_names_a_vanished_launcher(
    tmp_path: Path, launcher_alive: bool
) -> None:
    """torchrun's agent SIGTERMs the ranks left when one exits; with the launcher gone that
    is the cause to record. Otherwise SIGTERM must kill the rank as it always did."""
    launcher = os.getpid() if launcher_alive else _dead_pid()
    path = heartbeat_path(tmp_path, 1)
    child = subprocess.run(
        [sys.executable, "-c", _TERMINATED_RANK, str(path), str(launcher)], timeout=60
    )
    if launcher_alive:
        assert child.returncode == -signal.SIGTERM and not path.exists()
    else:
        assert child.returncode == LAUNCHER_GONE_EXIT
        error = json.loads(path.read_text())["error"]
        assert error == f"its launcher (pid {launcher}) is gone (then: stopped by SIGTERM)"
