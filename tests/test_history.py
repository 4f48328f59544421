"""`commbench history` (issue 42, item 1): runs added once into series of their machine, change
points kept as runs come, read back by list/show/changes/plot without writing, the gate's
reference, and every bad input refused in one line with nothing changed. SQLite, in-process;
the concurrent writers, the read-only copy for another user and PostgreSQL are in
tests/test_history_integration.py."""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import commbench
from commbench.cli import app
from commbench.history import db as history_db
from commbench.history.identity import CI_COMMITS, label_of
from commbench.history.schema import SCHEMA_VERSION
from commbench.history.store import History, Selection
from commbench.results.record import RunContext
from commbench.results.runs import load_run
from tests.factories import make_row, write_run
from tests.history_runs import history_run

FIXTURES = Path(__file__).parent / "fixtures" / "runs"


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_refused(result: Result, *fragments: str) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert len(lines) == 1 and lines[0].startswith("commbench: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def counts(db: Path) -> dict[str, int]:
    with History.open(db) as history:
        return history.counts()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def _no_ci_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI running this suite has its own commit variables: the tests set their own."""
    for name in CI_COMMITS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "h" / "history.db"


def step_series(parent: Path, n: int = 16, at: int = 8, ratio: float = 0.7) -> list[Path]:
    """n runs of one machine whose busbw drops to `ratio` from run `at` on, where torch and
    NCCL_ALGO changed."""
    return [
        history_run(
            parent,
            f"r{i:02d}",
            hour=i,
            speed=1.0 if i < at else ratio,
            torch="2.13.0+cpu" if i < at else "2.14.0+cpu",
            env={"NCCL_ALGO": "Ring" if i < at else "Tree"},
        )
        for i in range(n)
    ]


# -- adding ------------------------------------------------------------------------------------


def test_add_list_show_and_twice_is_once(tmp_path: Path, db: Path) -> None:
    a = history_run(tmp_path, "a", hour=0)
    b = history_run(tmp_path, "b", hour=1)
    done = cli("history", "add", a, b, "--db", db)
    assert done.exit_code == 0, done.output
    assert done.stdout.count("added: ") == 2 and "2 points" in done.stdout
    assert counts(db) == {
        "meta": 2,
        "machines": 1,
        "runs": 2,
        "series": 2,
        "points": 4,
        "changes": 0,
    }
    again = cli("history", "add", b, "--db", db)
    assert again.exit_code == 0 and again.stdout.startswith("already there: ")
    copy = tmp_path / "copy-of-a"  # the same run from another path is the same run
    copy.mkdir()
    for f in a.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    assert cli("history", "add", copy, "--db", db).stdout.startswith("already there: ")
    assert counts(db)["runs"] == 2 and counts(db)["points"] == 4

    listed = json.loads(cli("history", "list", "--db", db, "--format", "json").stdout)
    assert [r["run_id"] for r in listed] == ["a", "b"]
    assert listed[0]["machine"] == "2x cpu gloo on vm" and listed[0]["points"] == 2
    assert listed[0]["software"]["torch"] == "2.13.0+cpu"
    table = cli("history", "list", "--db", db).stdout
    assert "2026-01-01 00:00 UTC" in table and "2x cpu gloo on vm" in table
    csv = cli("history", "list", "--db", db, "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("id,run_id,at,label") and len(csv) == 3

    shown = json.loads(cli("history", "show", "a", "--db", db, "-f", "json").stdout)
    assert shown["run"]["run_id"] == "a" and len(shown["points"]) == 2
    series_id = shown["points"][0]["series_id"]
    one = json.loads(cli("history", "show", series_id[:6], "--db", db, "-f", "json").stdout)
    assert [v["run_id"] for v in one["values"]] == ["a", "b"]
    assert one["series"]["size_bytes"] in (1024, 1 << 20)
    md = cli("history", "show", series_id, "--db", db, "--format", "md").stdout
    assert md.startswith("### all_reduce float32 op=sum 2 ranks")


def test_a_suite_adds_each_of_its_runs(tmp_path: Path, db: Path) -> None:
    from commbench.results.record import Entry, RunStatus, SuiteRecord
    from commbench.results.store import SuiteDir

    suite = tmp_path / "suite"
    suite.mkdir()
    for i in range(2):
        history_run(suite, f"entry{i}", hour=i, sizes=(4096,))
    done = RunStatus.COMPLETE
    SuiteDir(suite).write_record(
        SuiteRecord(
            name="ci",
            status=done,
            entries=[
                Entry(name=f"e{i}", section="collectives", path=f"entry{i}", status=done)
                for i in range(2)
            ],
        )
    )
    result = cli("history", "add", suite, "--db", db)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("added: ") == 2
    assert counts(db)["runs"] == 2


def test_the_fixture_runs_of_every_kind_go_in(db: Path) -> None:
    runs = [FIXTURES / n for n in ("cpu-gloo-a", "cpu-gloo-b", "h100x8-golden", "p2p-v1")]
    result = cli("history", "add", *runs, "--db", db)
    assert result.exit_code == 0, result.output
    machines = {
        r["machine"] for r in json.loads(cli("history", "list", "--db", db, "-f", "json").stdout)
    }
    assert "8x NVIDIA H100 80GB HBM3 nccl on gpu-node-17 (topology 51fd06)" in machines
    assert any(m.endswith("[p2p]") for m in machines) and len(machines) == 3


def test_adding_never_writes_into_the_run(tmp_path: Path, db: Path) -> None:
    run = history_run(tmp_path, "a", hour=0)
    before = {f.name: digest(f) for f in run.iterdir()}
    assert cli("history", "add", run, "--db", db).exit_code == 0
    assert {f.name: digest(f) for f in run.iterdir()} == before


def test_a_run_from_another_machine_has_series_of_its_own(tmp_path: Path, db: Path) -> None:
    here = [history_run(tmp_path, f"vm{i}", hour=i) for i in range(2)]
    there = history_run(tmp_path, "other", hour=3, host="node7", speed=0.5)
    gpu_like = history_run(tmp_path, "world4", hour=4, world=4)
    assert cli("history", "add", *here, there, gpu_like, "--db", db).exit_code == 0
    assert counts(db)["machines"] == 3 and counts(db)["series"] == 6
    with History.open(db) as history:
        for series in history.series():
            runs = {v.run_id for v in history.values(series)}
            assert runs in ({"vm0", "vm1"}, {"other"}, {"world4"}), runs


def test_an_nccl_tests_import_joins_the_series_of_collectives_runs(
    tmp_path: Path, db: Path
) -> None:
    ours = history_run(tmp_path, "ours", hour=0)
    imported = history_run(tmp_path, "imported", hour=1, kind="nccl-tests")
    assert cli("history", "add", ours, imported, "--db", db).exit_code == 0
    assert counts(db)["machines"] == 1 and counts(db)["series"] == 2
    kinds = [r["kind"] for r in json.loads(cli("history", "list", "--db", db, "-f", "json").stdout)]
    assert kinds == ["collectives", "nccl-tests"]


def test_the_samples_decide_never_a_stats_block_that_disagrees(tmp_path: Path, db: Path) -> None:
    from dataclasses import replace

    row = make_row(1 << 20, [100.0, 101.0, 102.0], world_size=2)
    lying = replace(row, stats=replace(row.stats, median=5.0), busbw_gbps=row.busbw_gbps * 20)
    run = write_run(
        tmp_path / "lying",
        [lying],
        {"kind": "collectives", "run_id": "lying", "status": "complete", "context": {}},
    )
    assert cli("history", "add", run, "--db", db).exit_code == 0
    shown = json.loads(cli("history", "show", "lying", "--db", db, "-f", "json").stdout)
    point = shown["points"][0]
    assert point["median_us"] == pytest.approx(101.0)
    assert point["busbw_gbps"] == pytest.approx(row.busbw_gbps * 100.0 / 101.0, rel=1e-6)
    assert point["n"] == 3 and point["q1_us"] == pytest.approx(100.5)


def test_only_measured_points_are_stored(tmp_path: Path, db: Path) -> None:
    from commbench.results.schema import ResultRow

    good = make_row(4096, world_size=2)
    not_run = ResultRow.not_run(
        op="all_reduce",
        dtype="float32",
        reduce_op="sum",
        world_size=2,
        size_bytes=8192,
        count=2048,
        check="skipped",
        note="no memory",
    )
    run = write_run(
        tmp_path / "partial",
        [good, not_run],
        {"kind": "collectives", "run_id": "partial", "status": "complete", "context": {}},
    )
    assert cli("history", "add", run, "--db", db).exit_code == 0
    assert counts(db)["points"] == 1


def test_the_label_is_given_else_the_ci_s_commit_else_the_run_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = RunContext(cwd_git_commit="abc123")
    assert label_of("v1.2", {"GITHUB_SHA": "f00"}, ctx) == ("v1.2", "--label")
    assert label_of(None, {"CI_COMMIT_SHA": "beef", "GIT_COMMIT": "cafe"}, ctx) == (
        "beef",
        "CI_COMMIT_SHA",
    )
    assert label_of(None, {"BUILDKITE_COMMIT": " "}, ctx) == ("abc123", "cwd_git_commit")
    assert label_of(None, {}, RunContext()) == (None, None)


def test_add_labels_runs_from_the_ci_s_variable(
    tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_SHA", "0123abcd")
    a = history_run(tmp_path, "a", hour=0, commit="fff")
    b = history_run(tmp_path, "b", hour=1, commit="fff")
    assert cli("history", "add", a, "--db", db).exit_code == 0
    assert cli("history", "add", b, "--db", db, "--label", "nightly-7").exit_code == 0
    listed = json.loads(cli("history", "list", "--db", db, "-f", "json").stdout)
    assert [(r["label"], r["label_from"]) for r in listed] == [
        ("0123abcd", "GITHUB_SHA"),
        ("nightly-7", "--label"),
    ]


def test_the_api_verbs(tmp_path: Path, db: Path) -> None:
    run = history_run(tmp_path, "a", hour=0)
    added = commbench.history_add([run], db=db, label="x")
    assert [(r.run_id, r.added, r.points) for r in added.runs] == [("a", True, 2)]
    assert [r.label for r in commbench.history_list(db=db)] == ["x"]
    assert commbench.history_show("a", db=db).run is not None
    assert commbench.history_changes(db=db) == []


# -- change points -----------------------------------------------------------------------------


def test_changes_finds_the_step_and_names_what_changed(tmp_path: Path, db: Path) -> None:
    runs = step_series(tmp_path)
    added = cli("history", "add", *runs, "--db", db)
    assert added.exit_code == 0, added.output
    assert added.stdout.count("change: ") == 2  # the two sizes' series
    found = json.loads(cli("history", "changes", "--db", db, "--format", "json").stdout)
    assert len(found) == 2
    for change in found:
        assert change["run_id"] == "r08" and change["before_run_id"] == "r07"
        assert change["ratio"] == pytest.approx(0.7, rel=0.05)
        assert change["ratio_low"] <= change["ratio"] <= change["ratio_high"]
        assert change["p_value"] < 0.01
        assert change["changed"] == {
            "torch": ["2.13.0+cpu", "2.14.0+cpu"],
            "env.NCCL_ALGO": ["Ring", "Tree"],
        }
        assert change["series"].startswith("all_reduce float32 op=sum 2 ranks")
    table = cli("history", "changes", "--db", db).stdout
    assert re.search(r"x0\.(69|70|71)", table) and "torch: 2.13.0+cpu -> 2.14.0+cpu" in table
    only = json.loads(cli("history", "changes", "--db", db, "-f", "json", "-s", "1K").stdout)
    assert len(only) == 1
    none = json.loads(
        cli("history", "changes", "--db", db, "-f", "json", "--op", "broadcast").stdout
    )
    assert none == []
    series = found[0]["series_id"]
    shown = cli("history", "show", series, "--db", db).stdout
    assert re.search(r"change x0\.(69|70|71)", shown)


def test_adding_runs_one_by_one_finds_what_adding_them_at_once_does(tmp_path: Path) -> None:
    runs = step_series(tmp_path, n=18, at=9, ratio=1.4)
    at_once, one_by_one = tmp_path / "once.db", tmp_path / "each.db"
    assert cli("history", "add", *runs, "--db", at_once).exit_code == 0
    for run in runs:
        assert cli("history", "add", run, "--db", one_by_one).exit_code == 0

    def changes(db: Path) -> list[tuple[str, str, float]]:
        found = json.loads(cli("history", "changes", "--db", db, "-f", "json").stdout)
        return [(c["series_id"], c["run_id"], round(c["ratio"], 9)) for c in found]

    assert changes(at_once) == changes(one_by_one) and len(changes(at_once)) == 2


def test_a_run_older_than_the_series_is_placed_in_time(tmp_path: Path, db: Path) -> None:
    runs = step_series(tmp_path)
    late = runs[3]
    assert cli("history", "add", *[r for r in runs if r != late], "--db", db).exit_code == 0
    assert cli("history", "add", late, "--db", db).exit_code == 0  # a backfill: all recomputed
    found = json.loads(cli("history", "changes", "--db", db, "-f", "json").stdout)
    assert {c["run_id"] for c in found} == {"r08"} and {c["index"] for c in found} == {8}


def test_a_series_without_a_step_has_no_change(tmp_path: Path, db: Path) -> None:
    runs = [history_run(tmp_path, f"flat{i}", hour=i, noise=0.02) for i in range(20)]
    assert cli("history", "add", *runs, "--db", db).exit_code == 0
    assert json.loads(cli("history", "changes", "--db", db, "-f", "json").stdout) == []


# -- the gate's reference ----------------------------------------------------------------------


def test_the_reference_is_the_comparable_runs_since_the_last_change(
    tmp_path: Path, db: Path
) -> None:
    runs = step_series(tmp_path)
    other = history_run(tmp_path, "elsewhere", hour=20, host="node9")
    extra = history_run(tmp_path, "extra", hour=21, speed=0.7, sizes=(1024, 1 << 20, 4096))
    assert cli("history", "add", *runs, other, "--db", db).exit_code == 0
    new = load_run(history_run(tmp_path, "new", hour=30, sizes=(1024, 1 << 20, 65536)))
    with History.open(db) as history:
        ref = history.reference(new, limit=4)
    assert ref.run_ids == ["r12", "r13", "r14", "r15"]  # after the change, the 4 latest
    key_1k = next(k for k in ref.medians_us if k[5] == 1024)
    key_64k = next(k for k in ref.medians_us if k[5] == 65536)
    stored = {v.run_id: v.median_us for v in _values(db, 1024)}
    assert ref.medians_us[key_1k] == [stored[r] for r in ref.run_ids]
    assert all(math.isnan(m) for m in ref.medians_us[key_64k])  # no history for this point

    assert cli("history", "add", extra, "--db", db).exit_code == 0
    with History.open(db) as history:
        ref = history.reference(load_run(runs[14]))  # a run of the history: never itself
        assert ref.run_ids == ["r08", "r09", "r10", "r11", "r12", "r13"]  # and none after it
        whole = history.reference(new)
    assert whole.run_ids[-1] == "extra" and "elsewhere" not in whole.run_ids
    assert all(k[5] != 4096 for k in whole.medians_us)  # only the new run's own points
    medians_1k = whole.medians_us[key_1k]
    assert len(medians_1k) == len(whole.run_ids) and not any(map(math.isnan, medians_1k))


def _values(db: Path, size: int) -> list:
    with History.open(db) as history:
        (series,) = [
            s for s in history.series(Selection(sizes=(size,))) if s.machine.endswith("on vm")
        ]
        return history.values(series)


# -- plot --------------------------------------------------------------------------------------


def test_plot_draws_each_chosen_series(tmp_path: Path, db: Path) -> None:
    assert cli("history", "add", *step_series(tmp_path), "--db", db).exit_code == 0
    out = tmp_path / "plots"
    done = cli("history", "plot", "--db", db, "--out", out, "--sizes", "1K", "-f", "png,svg")
    assert done.exit_code == 0, done.output
    files = sorted(Path(line) for line in done.stdout.split())
    assert [f.suffix for f in files] == [".png", ".svg"] and all(f.stat().st_size for f in files)
    assert files[0].read_bytes().startswith(b"\x89PNG")
    svg = files[1].read_text()
    assert "torch: 2.13.0+cpu -&gt; 2.14.0+cpu" in svg or "2.14.0+cpu" in svg
    every = cli("history", "plot", "--db", db, "--out", out)
    assert every.exit_code == 0 and len(every.stdout.split()) == 2


def test_plot_refuses_what_it_cannot_draw(
    tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from commbench.history import request

    assert cli("history", "add", history_run(tmp_path, "a", hour=0), "--db", db).exit_code == 0
    out = tmp_path / "plots"
    assert_refused(cli("history", "plot", "--db", db, "--out", out, "-f", "gif"), "gif")
    assert_refused(cli("history", "plot", "--db", db, "--op", "broadcast", "-o", out), "no series")
    assert_refused(cli("history", "plot", "--db", db, "--series", "xyz"), "--series")
    monkeypatch.setattr(request, "MAX_FIGURES", 1)
    assert_refused(cli("history", "plot", "--db", db, "-o", out), "2 series match", "--op")
    assert_refused(cli("history", "plot", "--db", db, "-o", db, "--sizes", "1K"), "cannot write")
    assert not out.exists()


# -- reading never writes ----------------------------------------------------------------------


def test_reading_changes_nothing_and_makes_nothing(tmp_path: Path, db: Path) -> None:
    assert cli("history", "add", *step_series(tmp_path), "--db", db).exit_code == 0
    before = digest(db)
    for args in (("list",), ("changes",), ("show", "r03"), ("plot", "-o", tmp_path / "p")):
        assert cli("history", *args, "--db", db).exit_code == 0, args
    assert digest(db) == before
    missing = tmp_path / "nowhere" / "history.db"
    for args in (("list",), ("changes",), ("show", "r03"), ("plot", "-o", tmp_path / "q")):
        assert_refused(cli("history", *args, "--db", missing), "no history there")
    assert not missing.parent.exists() and not (tmp_path / "q").exists()


def test_a_read_only_file_is_read(tmp_path: Path, db: Path) -> None:
    """As root permissions stop nothing: the copy for another user is the integration test's;
    here, the reader's connection itself refuses to write."""
    assert cli("history", "add", history_run(tmp_path, "a", hour=0), "--db", db).exit_code == 0
    with History.open(db) as history, pytest.raises(sqlite3.OperationalError, match="readonly"):
        history.db._conn.execute("DELETE FROM runs")


# -- bad input: one line, exit 2, nothing changed ----------------------------------------------


def test_a_run_that_did_not_finish_or_failed_is_refused_and_nothing_is_added(
    tmp_path: Path, db: Path
) -> None:
    good = history_run(tmp_path, "good", hour=0)
    assert cli("history", "add", good, "--db", db).exit_code == 0
    before = counts(db)
    newer = history_run(tmp_path, "newer", hour=1)
    bad = {
        "failed": history_run(tmp_path, "failed", hour=2, status="failed", failure="rank 1 died"),
        "running": history_run(tmp_path, "running", hour=3, status="running"),
        "interrupted": history_run(tmp_path, "stopped", hour=4, status="interrupted"),
        "wrong result": history_run(tmp_path, "wrong", hour=5, check="failed"),
    }
    for why, run in bad.items():
        line = assert_refused(cli("history", "add", newer, run, "--db", db), run.name, "not added")
        assert "nothing was added" in line, why
    assert counts(db) == before
    fresh = tmp_path / "fresh.db"
    assert_refused(cli("history", "add", bad["failed"], "--db", fresh), "rank 1 died")
    assert not fresh.exists()
    nothing = write_run(
        tmp_path / "empty",
        [],
        {"kind": "collectives", "run_id": "empty", "status": "complete", "context": {}},
    )
    assert_refused(cli("history", "add", nothing, "--db", db), "no measured point")
    assert_refused(cli("history", "add", tmp_path / "nope", "--db", db), "nope")
    assert counts(db) == before


def test_a_corrupt_or_truncated_file_is_refused(tmp_path: Path, db: Path) -> None:
    run = history_run(tmp_path, "a", hour=0)
    junk = tmp_path / "junk.db"
    junk.write_bytes(bytes(range(256)) * 40)
    made = tmp_path / "made.db"
    assert cli("history", "add", *step_series(tmp_path / "s"), "--db", made).exit_code == 0
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(made.read_bytes()[: made.stat().st_size // 2])
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    for path, said in (
        (junk, "not a readable history database"),
        (truncated, "not a readable history database"),
        (empty, "not a commbench history"),
        (other, "not a commbench history"),
    ):
        before = digest(path)
        for args in (("add", run), ("list",), ("changes",), ("show", "a")):
            assert_refused(cli("history", *args, "--db", path), path.name, said)
        assert digest(path) == before, path
    assert_refused(cli("history", "list", "--db", tmp_path), "is a directory")


def test_a_schema_newer_than_this_commbench_is_refused(tmp_path: Path, db: Path) -> None:
    assert cli("history", "add", history_run(tmp_path, "a", hour=0), "--db", db).exit_code == 0
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    conn.close()
    before = digest(db)
    later = history_run(tmp_path, "b", hour=1)
    for args in (("add", later), ("list",), ("changes",), ("plot",)):
        assert_refused(cli("history", *args, "--db", db), "newer than this commbench", "upgrade")
    assert digest(db) == before


def test_show_says_what_it_cannot_find(tmp_path: Path, db: Path) -> None:
    runs = [history_run(tmp_path, f"r{i}", hour=i, sizes=(1024,)) for i in range(2)]
    assert cli("history", "add", *runs, "--db", db).exit_code == 0
    assert_refused(cli("history", "show", "r9", "--db", db), "no run or series")
    # a prefix as short as one hex digit is no id: nothing in the history is that vague
    assert_refused(cli("history", "show", "0", "--db", db), "no run or series")


def test_a_url_of_another_kind_is_refused(db: Path) -> None:
    assert_refused(cli("history", "list", "--db", "mysql://h/db"), "postgresql://")


def test_postgres_without_psycopg_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    url = "postgresql://ci:secret@db.example/commbench"
    for args in (("list",), ("add", history_run(tmp_path, "a", hour=0))):
        line = assert_refused(
            cli("history", *args, "--db", url), "pip install 'commbench[postgres]'"
        )
        assert "secret" not in line and "ci:***@db.example" in line


def test_a_server_that_does_not_answer_is_one_line_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("psycopg")
    monkeypatch.setattr(history_db, "CONNECT_TIMEOUT_S", 2)  # libpq's least
    with socket.socket() as silent:  # listens, never answers: connect_timeout ends the wait
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        start = time.monotonic()
        assert_refused(cli("history", "list", "--db", f"postgresql://u@127.0.0.1:{port}/db"))
        assert time.monotonic() - start < 4
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: refused at once
    url = f"postgresql://u@127.0.0.1:{port}/db"
    assert_refused(cli("history", "list", "--db", url), "cannot connect")
