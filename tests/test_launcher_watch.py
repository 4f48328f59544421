"""The watchdog's rule for how long silence may last before a run is declared hung."""

from __future__ import annotations

import json
from pathlib import Path

from commbench.launch.launcher import _Watch
from commbench.launch.protocol import STARTUP_TIMEOUT, heartbeat_path


def _beat(run_dir: Path, rank: int, point: int, phase: str) -> None:
    path = heartbeat_path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": rank, "pid": 1, "point": point, "phase": phase}))


def test_start_up_gets_the_start_up_allowance_then_the_timeout_applies(tmp_path: Path) -> None:
    watch = _Watch(tmp_path, [])
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
    watch = _Watch(tmp_path, [])
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
