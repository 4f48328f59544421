"""A record left "running" by a launcher that is dead reads as interrupted, run.json and
suite.json alike (issue 24, A3): its pid gone on this host, or, on another host, nothing
written in its directory for longer than its timeout. `report` and `compare` then say
interrupted, never running."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from commbench.cli import app
from commbench.processes import ProcessId
from commbench.results.record import Entry, RunStatus, SuiteRecord
from commbench.results.runs import load_run, load_suite
from commbench.results.store import SuiteDir

RUNS = Path(__file__).parent / "fixtures" / "runs"
ELSEWHERE = ProcessId(pid=7, host="elsewhere.invalid", boot_id="b00t", start_ticks=1)
NAMES = ("collectives-float32", "strategies-float32")


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def _gone() -> ProcessId:
    """A process of this host that has exited."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from commbench.processes import ProcessId; "
            "print(json.dumps(ProcessId.of().to_dict()))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    return ProcessId(**json.loads(done.stdout))


def _age(path: Path, seconds: float) -> None:
    """Make everything under `path` (itself included) last changed `seconds` ago."""
    then = time.time() - seconds
    for p in [*path.rglob("*"), path]:
        os.utime(p, (then, then), follow_symlinks=False)


def _running_run(path: Path, launcher: ProcessId, timeout: float | None = None) -> Path:
    """A copy of a finished run, its run.json saying "running", written by `launcher`."""
    shutil.copytree(RUNS / "cpu-gloo-b", path)
    record = json.loads((path / "run.json").read_text())
    record.update(status="running", failure=None, launcher=launcher.to_dict())
    if timeout is not None:
        record["settings"]["timeout"] = timeout
    (path / "run.json").write_text(json.dumps(record))
    return path


def _suite(
    path: Path, source: str, status: RunStatus, launcher: ProcessId | None, **config: Any
) -> Path:
    """A suite of two entries: the first complete, the second `status` (run.json alike)."""
    path.mkdir()
    shutil.copytree(RUNS / source, path / "r1")
    if status is RunStatus.RUNNING:
        assert launcher is not None
        _running_run(path / "r2", launcher)
    else:
        shutil.copytree(RUNS / source, path / "r2")
    entries = [
        Entry(name=NAMES[0], section="collectives", path="r1", status=RunStatus.COMPLETE),
        Entry(name=NAMES[1], section="collectives", path="r2", status=status),
    ]
    record = SuiteRecord(name="s", status=status, entries=entries, config=config)
    record.launcher = launcher
    SuiteDir(path).write_record(record)
    return path


# -- run.json ----------------------------------------------------------------------------------


def test_a_run_on_another_host_silent_past_its_timeout_is_interrupted(tmp_path: Path) -> None:
    run_dir = _running_run(tmp_path / "run", ELSEWHERE)
    assert load_run(run_dir).record.status == "running", "just written: it may well run"
    _age(run_dir, 3600)
    record = load_run(run_dir).record
    assert record.status == "interrupted" and record.recorded_status == "running"
    assert "pid 7" in record.failure and "elsewhere.invalid" in record.failure
    assert "longer than its timeout (300 s)" in record.failure
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"  # untouched


def test_a_heartbeat_keeps_a_silent_record_running(tmp_path: Path) -> None:
    """The ranks rewrite ranks/rank<N>.json twice a second while the record stays as it was."""
    run_dir = _running_run(tmp_path / "run", ELSEWHERE)
    _age(run_dir, 3600)
    (run_dir / "ranks").mkdir()
    (run_dir / "ranks" / "rank0.json").write_text("{}")
    assert load_run(run_dir).record.status == "running"


def test_the_run_s_own_timeout_is_the_limit(tmp_path: Path) -> None:
    run_dir = _running_run(tmp_path / "run", ELSEWHERE, timeout=7200)
    _age(run_dir, 3600)
    assert load_run(run_dir).record.status == "running"
    _age(run_dir, 7200 + 61)
    assert load_run(run_dir).record.status == "interrupted"


# -- suite.json --------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_suite_whose_launcher_is_gone_reads_as_interrupted(tmp_path: Path) -> None:
    gone = _gone()
    suite = load_suite(_suite(tmp_path / "s", "cpu-gloo-b", RunStatus.RUNNING, gone))
    assert suite.status == "interrupted"
    assert suite.record.failure == f"its launcher (pid {gone.pid}) is gone"
    assert [e.status for e in suite.entries] == ["complete", "interrupted"]


def test_a_suite_on_another_host_silent_past_its_timeout_is_interrupted(tmp_path: Path) -> None:
    path = _suite(tmp_path / "s", "cpu-gloo-b", RunStatus.RUNNING, ELSEWHERE)
    assert load_suite(path).status == "running"
    _age(path, 3600)
    suite = load_suite(path)
    assert suite.status == "interrupted" and "longer than its timeout" in suite.record.failure
    assert [e.status for e in suite.entries] == ["complete", "interrupted"]


def test_a_suite_s_running_entry_keeps_it_running(tmp_path: Path) -> None:
    """suite.json is rewritten between entries only: a long entry's heartbeats are the
    suite's sign of life."""
    path = _suite(tmp_path / "s", "cpu-gloo-b", RunStatus.RUNNING, ELSEWHERE)
    _age(path, 3600)
    (path / "r2" / "ranks").mkdir()
    assert load_suite(path).status == "running"


def test_a_suite_s_limit_is_its_longest_timeout(tmp_path: Path) -> None:
    timing = {"timing": {"timeout": 7200.0}}
    path = _suite(tmp_path / "s", "cpu-gloo-b", RunStatus.RUNNING, ELSEWHERE, collectives=timing)
    _age(path, 3600)
    assert load_suite(path).status == "running"


@pytest.mark.integration
@pytest.mark.parametrize("launcher", ["gone", "elsewhere"])
def test_report_and_compare_say_interrupted_never_running(tmp_path: Path, launcher: str) -> None:
    writer = _gone() if launcher == "gone" else ELSEWHERE
    base = _suite(tmp_path / "base", "cpu-gloo-a", RunStatus.COMPLETE, None)
    new = _suite(tmp_path / "new", "cpu-gloo-b", RunStatus.RUNNING, writer)
    _age(new, 3600)

    report = cli("report", new, "--images", "none")
    assert report.exit_code == 0, report.stderr
    assert "interrupted" in report.stdout
    assert "running" not in report.stdout and "has not finished" not in report.stdout

    compare = cli("compare", base, new, "-f", "md")
    assert compare.exit_code == 1, (compare.stdout, compare.stderr)
    said = compare.stdout + compare.stderr
    assert "the new run was interrupted" in said
    assert "running" not in said and "has not finished" not in said


def test_a_suite_gone_between_entries_says_so(tmp_path: Path) -> None:
    """Its launcher died after the first entry: the second never ran. The report says the
    suite was interrupted, and compare why the entry is missing."""
    base = _suite(tmp_path / "base", "cpu-gloo-a", RunStatus.COMPLETE, None)
    new = _suite(tmp_path / "new", "cpu-gloo-b", RunStatus.RUNNING, ELSEWHERE)
    record = json.loads((new / "suite.json").read_text())
    record["entries"][1].update(status="pending", path=None)
    (new / "suite.json").write_text(json.dumps(record))
    shutil.rmtree(new / "r2")
    _age(new, 3600)

    report = cli("report", new, "--images", "none")
    assert report.exit_code == 0, report.stderr
    assert "This suite was interrupted (its launcher (pid 7)" in report.stdout

    compare = cli("compare", base, new, "-f", "md")
    assert compare.exit_code == 1, (compare.stdout, compare.stderr)
    assert "the new run was interrupted (its launcher (pid 7)" in compare.stdout + compare.stderr
