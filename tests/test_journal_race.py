"""The races between rank 0's journal and the launcher's result files, made deterministic with
a fake torchrun (a short Python script): no torch, no timing.

- torchrun's agent killed outright leaves its workers running; one that journals a row as it
  is being stopped (after the launcher's last look at the journal, before its death) must
  still have that row in results.json and results.csv.
- a launcher killed outright leaves run.json "running" and rows journaled after its last
  rewrite; a reader of the run on this host (report, compare, load_run) takes it as ended,
  with those rows, and writes nothing; `settle` writes that into the run.
- the journal's reader skips a torn line, and takes a whole unterminated last line at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from commbench.launch import launcher
from commbench.launch.protocol import RUN_MARKER, Done, Journal, JournalReader, RankBeat
from commbench.processes import ProcessId
from commbench.results.lifecycle import settle
from commbench.results.record import RunStatus
from commbench.results.runs import load_run
from commbench.results.store import RESULTS_CSV, RunDir
from tests.factories import abandoned_run, collectives_settings, dead_launcher, make_row


def _row(size: int) -> dict:
    return make_row(size).to_dict()


def _line(event: dict) -> str:
    return json.dumps(event) + "\n"


CONTEXT = {"type": "context", "world_size": 2, "group_size": 2, "ranks": []}

# torchrun's stand-in: journals a row, starts a "worker" (in its own session, like torchrun's)
# that journals one more row when it is told to stop, waits for it to be ready, then dies of
# SIGKILL as a killed agent does.
FAKE_AGENT = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    run_dir, first, second = sys.argv[1], sys.argv[2], sys.argv[3]
    events = os.path.join(run_dir, "events.jsonl")
    with open(events, "a") as fh:
        fh.write(first)
    worker = '''
    import os, signal, sys, time
    def stop(signum, frame):
        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
        os.write(fd, sys.argv[2].encode())
        os._exit(143)
    signal.signal(signal.SIGTERM, stop)
    open(sys.argv[1] + ".ready", "w").close()
    while True:
        time.sleep(1)
    '''
    subprocess.Popen([sys.executable, "-c", worker, events, second], start_new_session=True)
    while not os.path.exists(events + ".ready"):
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.integration
def test_a_row_journaled_while_the_workers_of_a_killed_agent_are_stopped_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _line(CONTEXT) + _line({"type": "row", "point": 0, "row": _row(1024)})
    second = _line({"type": "row", "point": 1, "row": _row(2048)})

    def fake_torchrun(run_dir: Path, settings, launch, worker) -> list[str]:
        return [sys.executable, "-c", FAKE_AGENT, str(run_dir), first, second]

    monkeypatch.setattr(launcher, "torchrun_command", fake_torchrun)
    monkeypatch.setattr(launcher, "preflight", lambda settings, launch=None: {})
    settings = collectives_settings(
        device="cpu", backend="gloo", nproc=2, ops=["all_reduce"], sizes=[1024, 2048], iters=3
    )
    outcome = launcher.run_collectives(settings, tmp_path / "out")
    run_dir = outcome.run_dir
    journaled = [
        json.loads(ln)["row"]["size_bytes"]
        for ln in (run_dir / "events.jsonl").read_text().splitlines()
        if json.loads(ln)["type"] == "row"
    ]
    assert journaled == [1024, 2048]
    assert [r.size_bytes for r in outcome.rows] == [1024, 2048]
    assert [r.size_bytes for r in RunDir(run_dir).read_rows()] == [1024, 2048]
    csv_sizes = [ln.split(",") for ln in (run_dir / RESULTS_CSV).read_text().splitlines()[1:]]
    assert len(csv_sizes) == 2
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "failed" and record["points_done"] == 2
    assert "SIGKILL" in record["failure"]


def _tree(path: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under `path`: its mode, its mtime and its bytes."""
    return {
        str(f.relative_to(path)): (f.stat().st_mode, f.stat().st_mtime_ns, f.read_bytes())
        for f in sorted(path.rglob("*"))
        if f.is_file()
    }


@pytest.mark.integration
def test_a_reader_recovers_a_killed_run_in_memory_and_settle_writes_it(tmp_path: Path) -> None:
    run_dir = abandoned_run(tmp_path / "out", dead_launcher(), journaled=3, written=1)
    before = _tree(run_dir)
    run = load_run(run_dir)
    assert [r.size_bytes for r in run.rows] == [1024, 2048, 4096]
    assert run.record.status == RunStatus.INTERRUPTED and "is gone" in (run.record.failure or "")
    assert run.record.points_done == 3
    assert any("2 point(s) taken from events.jsonl" in w for w in run.record.warnings)
    assert _tree(run_dir) == before  # reading wrote nothing
    found = settle(RunDir(run_dir))
    assert not isinstance(found, str) and found.taken == 2 and found.files_behind
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "interrupted" and "is gone" in record["failure"]
    assert record["points_done"] == 3 and "launcher" not in record
    said = [w for w in record["warnings"] if "2 point(s) taken from events.jsonl" in w]
    assert len(said) == 1 and "commbench settle (pid " in said[0], record["warnings"]
    assert len((run_dir / RESULTS_CSV).read_text().splitlines()) == 1 + 3
    assert [r.size_bytes for r in RunDir(run_dir).read_rows()] == [1024, 2048, 4096]
    again = _tree(run_dir)
    assert settle(RunDir(run_dir)) == "it is interrupted"  # settled once
    assert _tree(run_dir) == again
    settled = load_run(run_dir)
    assert settled.record.warnings == record["warnings"]
    assert [r.size_bytes for r in settled.rows] == [1024, 2048, 4096]


@pytest.mark.integration
def test_a_launcher_killed_between_its_json_and_its_csv_is_settled(tmp_path: Path) -> None:
    """The launcher writes results.json, then results.csv: killed between the two, the JSON
    holds every journaled row and the CSV one fewer. A reader takes the JSON's rows; settle
    rewrites the CSV too (seen once in test_kill_anywhere's 20 random kills)."""
    run_dir = abandoned_run(tmp_path / "out", dead_launcher(), journaled=3, written=3)
    rows = RunDir.of(run_dir).read_rows()
    from commbench.results.exporters import rows_to_csv

    (run_dir / RESULTS_CSV).write_text(rows_to_csv(rows[:2]))
    run = load_run(run_dir)
    assert len(run.rows) == 3 and run.record.status == RunStatus.INTERRUPTED
    assert len((run_dir / RESULTS_CSV).read_text().splitlines()) == 1 + 2
    found = settle(RunDir(run_dir))
    assert not isinstance(found, str) and found.taken == 0 and found.files_behind
    assert len((run_dir / RESULTS_CSV).read_text().splitlines()) == 1 + 3


@pytest.mark.integration
def test_a_run_whose_launcher_runs_or_whose_workers_still_run_is_left_alone(
    tmp_path: Path,
) -> None:
    live = abandoned_run(tmp_path / "live", ProcessId.of(), journaled=2, written=1)
    assert load_run(live).record.status == RunStatus.RUNNING
    assert len(load_run(live).rows) == 1
    assert settle(RunDir(live)) == f"its launcher (pid {os.getpid()}) still runs"
    assert json.loads((live / "run.json").read_text())["status"] == "running"
    # the launcher is gone but a worker of this run is not: it may journal one more row
    run_dir = abandoned_run(tmp_path / "dying", dead_launcher(), journaled=2, written=1)
    worker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={**os.environ, RUN_MARKER: str(run_dir.resolve())},
    )
    try:
        (run_dir / "ranks").mkdir()
        beat = RankBeat(rank=0, pid=worker.pid).to_json()
        (run_dir / "ranks" / "rank0.json").write_bytes(beat)
        assert load_run(run_dir).record.status == RunStatus.INTERRUPTED  # as recognised
        assert len(load_run(run_dir).rows) == 1  # the journal's second row is not taken yet
        assert (
            settle(RunDir(run_dir))
            == "a worker of the run still runs: it may journal another point"
        )
        assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    finally:
        worker.kill()
        worker.wait()
    assert len(load_run(run_dir).rows) == 2
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    assert not isinstance(settle(RunDir(run_dir)), str)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"


def test_the_journal_reader_skips_a_torn_line_and_takes_a_whole_last_one(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    row = _line({"type": "row", "row": _row(1024)})
    # a line cut short by a kill, then the next one glued onto it; then a whole event whose
    # newline never came
    path.write_text(row[:40] + row + _line({"type": "done"})[:-1])
    reader = JournalReader(path)
    assert reader.read() == [] and reader.torn == 1
    assert reader.read(final=True) == [{"type": "done"}]
    path.write_text("")
    fresh = JournalReader(path)
    with open(path, "a") as fh:
        fh.write(row[:40])
    assert fresh.read(final=True) == [] and fresh.torn == 1


def test_a_journal_write_cut_short_is_finished_not_left_for_the_next_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:7]))
    journal = Journal(tmp_path / "events.jsonl")
    journal.write({"type": "row", "row": _row(1024)})
    journal.write(Done())
    journal.close()
    monkeypatch.undo()
    events = JournalReader(tmp_path / "events.jsonl").read()
    assert [e["type"] for e in events] == ["row", "done"]
