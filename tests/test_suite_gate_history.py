"""`commbench run --confirm K` and `--history DB [--gate]`: the real runner and a real SQLite
history, with the stand-in for torchrun of tests/test_suite.py (golden rows, scaled: data,
not timings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.history.store import History
from commbench.results.schema import ResultRow
from tests.factories import rescaled
from tests.test_suite import FakeLauncher, run_suite_cli

SUITE = """
name: unit
collectives:
  ops: [all_reduce, all_gather]
  sizes: {cuda: 1K-1G:x4, cpu: 1K-64K}
  dtypes: [float32]
"""


class Speeds(FakeLauncher):
    """A launcher whose n-th run is `speeds[n]` times as fast (the last one from then on), at
    the sizes `slow_at` only when given."""

    def __init__(self, speeds: list[float], slow_at: set[int] | None = None) -> None:
        super().__init__()
        self.speeds = speeds
        self.slow_at = slow_at

    def __call__(self, settings: Any, out_parent: Path, **kw: Any) -> Any:
        self.speed = self.speeds[min(len(self.calls), len(self.speeds) - 1)]
        return super().__call__(settings, out_parent, **kw)

    def scaled(self, r: ResultRow) -> ResultRow:
        if self.slow_at is not None and r.size_bytes not in self.slow_at:
            return r
        return rescaled(r, self.speed)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "unit.yaml"
    path.write_text(SUITE)
    return path


def _one(parent: Path) -> Path:
    (only,) = [p for p in parent.iterdir() if p.is_dir()]
    return only


def _gate(suite_dir: Path) -> dict[str, Any]:
    return json.loads((suite_dir / "comparison.json").read_text())["entries"]["collectives-float32"]


def test_a_drop_that_persists_through_its_confirmations_fails(
    tmp_path: Path, suite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite), "-o", str(tmp_path / "base"))
    base = _one(tmp_path / "base")
    launcher = Speeds([0.5], slow_at={1 << 30})
    result = run_suite_cli(
        monkeypatch,
        launcher,
        str(suite),
        "-o",
        str(tmp_path / "n"),
        "-b",
        str(base),
        "--confirm",
        "3",
    )
    assert result.exit_code == 1, result.output
    assert len(launcher.calls) == 4  # the suite's one run, then three of the worse points
    for narrowed in launcher.calls[1:]:
        assert narrowed.sizes == [1 << 30] and sorted(narrowed.ops) == ["all_gather", "all_reduce"]
    new = _one(tmp_path / "n")
    assert len(list((new / "confirm").iterdir())) == 3
    worse = [p for p in _gate(new)["points"] if p["mark"] == "worse"]
    assert worse and all(p["confirmed"].startswith("3 of 3 confirmations worse") for p in worse)
    assert "confirming 2 worse point(s), 3/3" in result.stderr


def test_a_one_off_is_reported_as_one_and_passes(
    tmp_path: Path, suite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite), "-o", str(tmp_path / "base"))
    base = _one(tmp_path / "base")
    launcher = Speeds([0.5, 1.0], slow_at={1 << 30})  # slow once, then as before
    result = run_suite_cli(
        monkeypatch,
        launcher,
        str(suite),
        "-o",
        str(tmp_path / "n"),
        "-b",
        str(base),
        "--confirm",
        "2",
    )
    assert result.exit_code == 0, result.output
    assert "PASS with warnings" in result.stdout
    one_offs = [p for p in _gate(_one(tmp_path / "n"))["points"] if p["confirmed"]]
    assert one_offs and all(p["mark"] == "noisy" for p in one_offs)
    assert all(p["confirmed"].startswith("0 of 2 confirmations worse") for p in one_offs)
    assert all("a one-off" in p["reason"] for p in one_offs)


def test_the_gate_against_a_history_and_the_runs_it_adds(
    tmp_path: Path, suite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "history.db"
    for i, speed in enumerate([1.0, 1.002, 0.998, 1.001, 0.999]):
        first = run_suite_cli(
            monkeypatch,
            Speeds([speed]),
            str(suite),
            "-o",
            str(tmp_path / f"h{i}"),
            "--history",
            str(db),
            "--label",
            f"commit{i}",
        )
        assert first.exit_code == 0, first.output
        assert "commbench: history: 1 run(s) added to" in first.stderr
    with History.open(db) as store:
        assert len(store.runs()) == 5

    slow = run_suite_cli(
        monkeypatch, Speeds([0.93]), str(suite), "-o", str(tmp_path / "slow"),
        "--history", str(db), "--gate", "--format", "json",
    )  # fmt: skip
    assert slow.exit_code == 1, slow.output
    gate = _gate(_one(tmp_path / "slow"))
    assert gate["reference"] == "a history of 5 run(s)" and len(gate["history_runs"]) == 5
    assert gate["counts"]["worse"] > 0
    with History.open(db) as store:
        assert len(store.runs()) == 6  # what happened is history too, the regression included

    same = run_suite_cli(
        monkeypatch, Speeds([1.0005]), str(suite), "-o", str(tmp_path / "same"),
        "--history", str(db), "--gate",
    )  # fmt: skip
    assert same.exit_code == 0, same.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gate"], "--gate judges the suite against a history: pass --history DB"),
        (["--confirm", "2"], "--confirm measures again what the gate found worse"),
        (["--confirm", "11"], "--confirm"),
    ],
)
def test_gate_flags_that_cannot_work_are_refused_before_measuring(
    tmp_path: Path, suite: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    launcher = FakeLauncher()
    result = run_suite_cli(monkeypatch, launcher, str(suite), "-o", str(tmp_path / "n"), *args)
    assert result.exit_code == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not launcher.calls
    assert not (tmp_path / "n").exists()


def test_a_history_that_cannot_be_read_is_refused_before_measuring(
    tmp_path: Path, suite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corrupt = tmp_path / "h.db"
    corrupt.write_bytes(b"not a database at all" * 20)
    launcher = FakeLauncher()
    result = run_suite_cli(
        monkeypatch, launcher, str(suite), "-o", str(tmp_path / "n"), "--history", str(corrupt)
    )
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not launcher.calls and not (tmp_path / "n").exists()
    assert CliRunner().invoke(app, ["run", "--help"]).exit_code == 0
