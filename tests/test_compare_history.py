"""`compare --history DB`: each point judged against how far its median moved in the history's
comparable runs. The runs are the golden fixture's, their samples scaled (data, not timings);
the history a real SQLite file written by `commbench.history`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.compare import Basis
from commbench.history.store import History
from commbench.results.record import RunRecord
from commbench.results.runs import load_run
from commbench.results.schema import ResultRow
from tests.factories import rescaled, write_run

GOLDEN = Path(__file__).parent / "fixtures" / "runs" / "h100x8-golden"


def _copy(tmp_path: Path, name: str, speed: float, *, minute: int) -> Path:
    """The golden run with every point `speed` times as fast, its own id and start time."""
    run = load_run(GOLDEN)
    rows: list[ResultRow] = [rescaled(r, speed) for r in run.rows]
    meta = run.record.to_dict()
    meta["run_id"] = name
    meta["context"]["started_at"] = f"2026-11-01T10:{minute:02d}:00+0000"
    return write_run(tmp_path / name, rows, RunRecord.from_dict(meta, name))


def _history(tmp_path: Path, speeds: list[float]) -> Path:
    db = tmp_path / "history.db"
    runs = [_copy(tmp_path, f"h{i}", s, minute=i) for i, s in enumerate(speeds)]
    with History.open(db, write=True) as store:
        store.add([(load_run(r), f"c{i}", "--label") for i, r in enumerate(runs)])
    return db


HistoryOf = Callable[[tuple[float, ...]], Path]
"""The `history` fixture: a history of the speeds given."""

QUIET = (1.0, 1.002, 0.998, 1.001, 0.999, 1.0)
"""Six runs within 0.3% of one another."""


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> HistoryOf:
    """`_history` of the speeds given, built once in a module's process: every test only
    reads a history (two check that its bytes stay as they were), and building one (its runs
    written and added, their change points found) took half a second, for the same speeds
    in several tests."""
    made: dict[tuple[float, ...], Path] = {}

    def get(speeds: tuple[float, ...]) -> Path:
        if speeds not in made:
            made[speeds] = _history(tmp_path_factory.mktemp("history"), list(speeds))
        return made[speeds]

    return get


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["compare", *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_small_drop_fails_against_a_quiet_history(tmp_path: Path, history: HistoryOf) -> None:
    """Six quiet runs (within 0.3%): a uniform 6% drop is far beyond how far they moved, and
    beyond the 5% tolerance; the verdict names the history."""
    db = history(QUIET)
    base = _copy(tmp_path, "base", 1.0, minute=30)
    slow = _copy(tmp_path, "slow", 0.94, minute=31)
    code, out, err = invoke(str(base), str(slow), "--history", str(db), "--format", "json")
    assert code == 1, err
    data = json.loads(out)
    assert data["reference"].startswith("a history of 6 run(s)")
    assert data["history_runs"] == [f"h{i}" for i in range(6)]
    worse = [p for p in data["points"] if p["mark"] == "worse"]
    assert worse and all(p["p_value"] < 1e-6 for p in worse)
    assert {p["basis"] for p in data["points"]} >= {Basis.tolerance.value}
    same = _copy(tmp_path, "same", 1.001, minute=32)
    assert invoke(str(base), str(same), "--history", str(db))[0] == 0


def test_a_drop_within_a_moving_history_warns(tmp_path: Path) -> None:
    """The history's medians moved ±15% run to run: an 8% drop is within that."""
    db = _history(tmp_path, [1.0, 1.15, 0.87, 1.1, 0.9, 1.05])
    base = _copy(tmp_path, "base", 1.0, minute=30)
    slow = _copy(tmp_path, "slow", 0.92, minute=31)
    code, out, _ = invoke(str(base), str(slow), "--history", str(db), "--format", "json")
    assert code == 0
    points = json.loads(out)["points"]
    assert {p["basis"] for p in points if p["mark"] == "noisy"} == {Basis.history_spread.value}


def test_a_history_that_cannot_be_read_is_one_line_and_exit_2(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\x17" * 200)
    missing = tmp_path / "nowhere.db"
    for db in (corrupt, missing):
        before = sorted(p.name for p in tmp_path.iterdir())
        code, out, err = invoke(str(GOLDEN), str(GOLDEN), "--history", str(db))
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made


def test_reading_a_history_changes_nothing(tmp_path: Path, history: HistoryOf) -> None:
    db = history(QUIET[:5])
    copy = tmp_path / "ro"
    copy.mkdir()
    shutil.copy(db, copy / "history.db")
    before = (copy / "history.db").read_bytes()
    (copy / "history.db").chmod(0o444)
    copy.chmod(0o555)
    try:
        base = _copy(tmp_path, "base", 1.0, minute=30)
        code, _, err = invoke(str(base), str(base), "--history", str(copy / "history.db"))
        assert code == 0, err
        assert (copy / "history.db").read_bytes() == before
        assert sorted(p.name for p in copy.iterdir()) == ["history.db"]
    finally:
        copy.chmod(0o755)


def test_the_report_shows_a_runs_trend_in_the_history(tmp_path: Path, history: HistoryOf) -> None:
    """`report --history`: each point against the runs before it, and a figure per op; read
    only (the history's bytes unchanged)."""
    db = history(QUIET)
    before = db.read_bytes()
    slow = _copy(tmp_path, "slow", 0.8, minute=40)
    result = CliRunner().invoke(app, ["report", str(slow), "--history", str(db)])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "## Trend in the history" in text
    assert "| all_reduce | 1K | 6 | 0.80x | none |" in text.replace("  ", " ")
    html = (
        CliRunner()
        .invoke(app, ["report", str(slow), "--history", str(db), "--format", "html"])
        .stdout
    )
    assert "Trend in the history" in html and html.count('alt="trend of ') == 3
    assert db.read_bytes() == before


def test_the_report_says_when_the_history_holds_nothing_of_the_machine(
    tmp_path: Path, history: HistoryOf
) -> None:
    db = history(QUIET[:5])
    cpu = Path(__file__).parent / "fixtures" / "runs" / "cpu-gloo-a"
    result = CliRunner().invoke(app, ["report", str(cpu), "--history", str(db)])
    assert result.exit_code == 0, result.output
    assert "holds no run of this machine" in result.stdout
    bad = CliRunner().invoke(app, ["report", str(cpu), "--history", str(tmp_path / "no.db")])
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
