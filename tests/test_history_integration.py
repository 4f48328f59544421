"""`commbench history` with real processes (issue 42, item 1): two writers adding at once lose
nothing, on SQLite and on a real PostgreSQL server (tests/postgres.py: Debian's, started for
this module and removed after it); a read-only copy of a history is read by another user;
the CLI, as a user runs it, on PostgreSQL; a server that does not answer is one line in time."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from commbench.history.identity import CI_COMMITS
from commbench.history.store import History
from tests.history_runs import history_run
from tests.postgres import make_database, postgres_server, rows_in

# the reader tests/test_read_only.py reads runs as, and the place it reads them in (fixtures)
from tests.test_read_only import Reader, place, reader  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("machines", "runs", "series", "points", "changes")

ADD_ONE_BY_ONE = """
import sys, time
from pathlib import Path
import commbench
db, go, *runs = sys.argv[1:]
while not Path(go).exists():
    time.sleep(0.005)
for run in runs:
    for r in commbench.history_add([run], db=db).runs:
        print("added" if r.added else "there", r.run_id, flush=True)
"""
"""A writer: waits for the go file, then adds its runs one transaction each."""


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CI_COMMITS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**env, **extra}


def commbench_cli(
    *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "commbench", *map(str, args)],
        capture_output=True,
        text=True,
        env=env or environment(),
        timeout=120,
    )


def series_runs(parent: Path, n: int = 16, at: int = 8) -> list[Path]:
    """n runs whose busbw drops 30% from run `at` on, where NCCL_PROTO changed."""
    return [
        history_run(
            parent,
            f"r{i:02d}",
            hour=i,
            speed=1.0 if i < at else 0.7,
            env={"NCCL_PROTO": "Simple" if i < at else "LL128"},
        )
        for i in range(n)
    ]


def two_writers(db: str, first: list[Path], second: list[Path], go: Path) -> list[str]:
    """Both writers started, then let go at the same moment; their lines."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ADD_ONE_BY_ONE, db, str(go), *map(str, runs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        for runs in (first, second)
    ]
    time.sleep(1.5)  # both have imported commbench and are waiting
    go.touch()
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        lines += out.split("\n")
    return [line for line in lines if line]


def assert_all_there_once(lines: list[str], names: list[str], counts: dict[str, int]) -> None:
    added = sorted(line.split()[1] for line in lines if line.startswith("added "))
    assert added == sorted(names), lines  # each run added by exactly one of the writers
    assert counts["runs"] == len(names)
    assert counts["points"] == 2 * len(names) and counts["series"] == 2


def test_two_sqlite_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    runs = [history_run(tmp_path / "runs", f"w{i}", hour=i) for i in range(10)]
    db = tmp_path / "new" / "history.db"  # neither writer finds a history: both make it
    lines = two_writers(str(db), runs[:7], runs[3:], tmp_path / "go")
    with History.open(db) as history:
        counts = history.counts()
    assert_all_there_once(lines, [r.name for r in runs], counts)
    assert not [p for p in db.parent.iterdir() if p.name.endswith(".new")]


def test_a_read_only_copy_is_read_by_another_user(place: Path, reader: Reader) -> None:  # noqa: F811
    """As tests/test_read_only.py reads runs: a copy nobody may write, read by a user who
    may not write it, left as it was (no -wal or -shm file made beside it either)."""
    made = place / "made" / "history.db"
    runs = series_runs(place / "runs")
    assert commbench_cli("history", "add", *runs, "--db", made).returncode == 0
    shared = place / "shared"
    shared.mkdir()
    copy = shared / "history.db"
    shutil.copyfile(made, copy)
    copy.chmod(0o444)
    shared.chmod(0o555)  # nobody may write here: not even SQLite's index files
    before = {p.name: (p.stat().st_mode, p.stat().st_mtime_ns) for p in shared.iterdir()}
    out = reader.home / "history-plots"
    for args in (
        ["list"],
        ["show", "r03"],
        ["changes", "--format", "json"],
        ["plot", "--out", str(out), "--sizes", "1K"],
    ):
        done = reader.commbench("history", *args, "--db", str(copy))
        assert done.returncode == 0, (reader.who, args, done.stderr)
        if args[0] == "changes":
            assert {c["run_id"] for c in json.loads(done.stdout)} == {"r08"}
    assert {p.name: (p.stat().st_mode, p.stat().st_mtime_ns) for p in shared.iterdir()} == before
    assert digest(copy) == digest(made)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres(hold_port: Callable[[], AbstractContextManager[int]]) -> Iterator[str]:
    with postgres_server(hold_port) as url:
        yield url


_databases = itertools.count()


@pytest.fixture
def pg_db(postgres: str) -> str:
    """An empty database of its own for each test, on the module's server."""
    return make_database(postgres, f"history_{next(_databases)}")


def pg_counts(url: str) -> dict[str, int]:
    return {t: rows_in(url, t) for t in TABLES}


def test_postgres_through_the_cli(pg_db: str, tmp_path: Path) -> None:
    runs = series_runs(tmp_path)
    empty = commbench_cli("history", "list", "--db", pg_db)
    assert empty.returncode == 2 and "not a commbench history" in empty.stderr
    added = commbench_cli("history", "add", *runs, "--db", pg_db, "--label", "v1")
    assert added.returncode == 0, added.stderr
    assert added.stdout.count("added: ") == 16 and added.stdout.count("change: ") == 2
    counts = pg_counts(pg_db)
    assert counts == {"machines": 1, "runs": 16, "series": 2, "points": 32, "changes": 2}
    again = commbench_cli("history", "add", runs[0], runs[5], "--db", pg_db)
    assert again.returncode == 0 and again.stdout.count("already there: ") == 2
    assert pg_counts(pg_db) == counts

    listed = json.loads(commbench_cli("history", "list", "--db", pg_db, "-f", "json").stdout)
    assert [r["run_id"] for r in listed] == [r.name for r in runs]
    assert {r["label"] for r in listed} == {"v1"}
    shown = json.loads(commbench_cli("history", "show", "r03", "--db", pg_db, "-f", "json").stdout)
    assert shown["run"]["run_id"] == "r03" and len(shown["points"]) == 2
    found = json.loads(commbench_cli("history", "changes", "--db", pg_db, "-f", "json").stdout)
    assert [c["run_id"] for c in found] == ["r08", "r08"]
    assert all(c["changed"] == {"env.NCCL_PROTO": ["Simple", "LL128"]} for c in found)
    assert all(0.6 < c["ratio"] < 0.8 for c in found)
    series = found[0]["series_id"]
    one = json.loads(commbench_cli("history", "show", series, "--db", pg_db, "-f", "json").stdout)
    assert len(one["values"]) == 16 and one["changes"][0]["run_id"] == "r08"
    plotted = commbench_cli("history", "plot", "--db", pg_db, "-o", tmp_path / "p", "-s", "1M")
    assert plotted.returncode == 0 and plotted.stdout.strip().endswith(".png")
    assert pg_counts(pg_db) == counts  # reading wrote nothing


def test_two_postgres_writers_at_once_lose_nothing(pg_db: str, tmp_path: Path) -> None:
    runs = [history_run(tmp_path / "runs", f"w{i}", hour=i) for i in range(10)]
    lines = two_writers(pg_db, runs[:7], runs[3:], tmp_path / "go")
    assert_all_there_once(lines, [r.name for r in runs], pg_counts(pg_db))


def test_postgres_refuses_a_newer_schema_and_a_failed_run(pg_db: str, tmp_path: Path) -> None:
    import psycopg

    from commbench.history.schema import SCHEMA_VERSION

    good = history_run(tmp_path, "good", hour=0)
    assert commbench_cli("history", "add", good, "--db", pg_db).returncode == 0
    failed = history_run(tmp_path, "failed", hour=1, status="failed", failure="rank 0 hung")
    refused = commbench_cli("history", "add", failed, "--db", pg_db)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "rank 0 hung" in refused.stderr
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute(
            "UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    counts = pg_counts(pg_db)
    later = history_run(tmp_path, "later", hour=2)
    for args in (("add", later), ("list",), ("changes",)):
        done = commbench_cli("history", *args, "--db", pg_db)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "newer than this commbench" in done.stderr
    assert pg_counts(pg_db) == counts
    nowhere = pg_db.rsplit("/", 1)[0] + "/no_such_database"
    done = commbench_cli("history", "list", "--db", nowhere)
    assert done.returncode == 2 and "cannot connect" in done.stderr
    assert done.stderr.count("\n") == 1


def test_a_server_that_does_not_answer_is_one_line_within_5_s() -> None:
    with socket.socket() as silent:  # takes the connection (its backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        start = time.monotonic()
        done = commbench_cli("history", "list", "--db", f"postgresql://ci@127.0.0.1:{port}/h")
        took = time.monotonic() - start
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot connect" in done.stderr and "timeout" in done.stderr
    assert took < 5.5, took  # 4 s to connect, and the command's own start
