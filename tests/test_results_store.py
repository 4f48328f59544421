import csv
import json
import math
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.processes import ProcessId
from commbench.results.csv_rows import CSV_COLUMNS
from commbench.results.exporters import Format, export
from commbench.results.lifecycle import settle
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus
from commbench.results.runs import load_run
from commbench.results.schema import SCHEMA_VERSION, ResultRow
from commbench.results.store import RunDir, new_run_dir, write_results
from tests import factories

make_row = partial(factories.make_row, world_size=4, busbw_factor=1.5)


def test_measured_row_computes_nccl_tests_bandwidths() -> None:
    row = make_row(size=1 << 20, samples=[100.0, 200.0, 300.0])
    assert row.time_us == 200.0
    assert row.algbw_gbps == pytest.approx((1 << 20) / 200e-6 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 1.5)
    assert row.samples_us == [100.0, 200.0, 300.0]


def test_run_dirs_are_never_reused(tmp_path: Path) -> None:
    a = new_run_dir(tmp_path, "collectives")
    b = new_run_dir(tmp_path, "collectives")
    assert a != b and a.is_dir() and b.is_dir()


def test_results_round_trip_with_samples_and_nan(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "x")
    rows = [
        make_row(),
        ResultRow.not_run(
            op="sendrecv",
            dtype="float32",
            world_size=1,
            size_bytes=8,
            count=2,
            check="skipped",
            note="needs two ranks",
        ),
    ]
    RunDir(run).write_record(
        RunRecord(
            kind=RunKind.COLLECTIVES, status=RunStatus.COMPLETE, context=RunContext(backend="gloo")
        )
    )
    write_results(run, rows)
    loaded = load_run(run)
    assert json.loads((run / "run.json").read_text())["schema_version"] == SCHEMA_VERSION
    assert loaded.context == RunContext(backend="gloo")
    assert loaded.rows[0] == rows[0]
    assert math.isnan(loaded.rows[1].time_us) and loaded.rows[1].note == "needs two ranks"
    # results.json is strict JSON (no NaN tokens), results.csv has the fixed columns first
    json.loads(
        (run / "results.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}")
    )
    with open(run / "results.csv") as fh:
        header = next(csv.reader(fh))
    assert header == CSV_COLUMNS
    assert header[:11] == [
        "op",
        "strategy",
        "dtype",
        "reduce_op",
        "world_size",
        "size_bytes",
        "count",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "check",
    ]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(UserError, match="newer than this commbench"):
        load_run(tmp_path)


def test_missing_or_broken_run_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such run directory"):
        load_run(tmp_path / "nope")
    with pytest.raises(UserError, match=r"not a run directory \(no run.json in it\)"):
        load_run(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UserError, match=r"notes\.txt: not a run directory"):
        load_run(tmp_path / "notes.txt")
    (tmp_path / "run.json").write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        load_run(tmp_path)
    (tmp_path / "run.json").write_bytes(b"\x89PNG\r\n")
    with pytest.raises(UserError, match=r"run.json: not a run file: not UTF-8 text \(byte 0"):
        load_run(tmp_path)


def test_exporters_share_one_table() -> None:
    rows = [make_row(1024), make_row(2048, note="rounded from 2050 B", requested_bytes=2050)]
    table = export(rows, Format.table)
    md = export(rows, Format.md)
    assert "# all_reduce  float32  op=sum  4 ranks" in table
    assert "### all_reduce  float32  op=sum  4 ranks" in md
    # world size in the title, iterations under their own name, the gate's spread: no `n`, no cv
    assert table.splitlines()[1].split() == [
        "size", "count", "time_us", "algbw_GB/s", "busbw_GB/s", "spread", "iters", "check"
    ]  # fmt: skip
    assert "| 2K |" in md and "rounded from 2050 B" in md and "rounded from 2050 B" in table
    as_json = json.loads(export(rows, Format.json))
    assert as_json["schema_version"] == SCHEMA_VERSION and as_json["rows"][1]["size_bytes"] == 2048
    assert "samples_us" not in as_json["rows"][1]
    assert export(rows, Format.csv).splitlines()[0].startswith("op,strategy,dtype")


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        (
            "stats",
            {"median": "abc"},
            "rows[0].stats.median: expected a number, got the string 'abc'",
        ),
        ("world_size", 2.5, "rows[0].world_size: expected an integer"),
        ("samples_us", [1, "x"], "rows[0].samples_us[1]: expected a number"),
        ("in_place", 1, "rows[0].in_place: expected true or false"),
    ],
)
def test_a_row_of_the_wrong_type_is_one_clear_error(
    tmp_path: Path, field: str, value, fragment: str
) -> None:
    run = new_run_dir(tmp_path, "x")
    RunDir(run).write_record(RunRecord(kind=RunKind.COLLECTIVES, status=RunStatus.COMPLETE))
    write_results(run, [make_row()])
    data = json.loads((run / "results.json").read_text())
    data["rows"][0][field] = value
    (run / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"rows\[0\]") as info:
        load_run(run)
    assert fragment in str(info.value)


def test_every_row_field_has_a_declared_type() -> None:
    from dataclasses import fields

    from commbench.results.schema import (
        _PROCESSES_READERS,
        _RANKS_READERS,
        FIELD_READERS,
        P2P_READERS,
        STATS_READERS,
        P2PCopy,
        ProcessTimes,
        RankTimes,
    )
    from commbench.stats import Stats

    nested = {"stats", "p2p", "ranks", "processes"}  # read by their own readers
    assert set(FIELD_READERS) | nested == {f.name for f in fields(ResultRow)}
    assert set(STATS_READERS) == {f.name for f in fields(Stats)}
    assert set(P2P_READERS) == {f.name for f in fields(P2PCopy)}
    assert set(_RANKS_READERS) == {f.name for f in fields(RankTimes)}
    assert set(_PROCESSES_READERS) == {f.name for f in fields(ProcessTimes)}


# -- what a failed write or a vanished writer leaves -----------------------------------------


def test_a_write_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A full disk fails the write after the temporary file exists: it must go too. (A file
    size limit fails the write the same way, without root or a small filesystem.)"""
    import resource

    from commbench.results.store import atomic_write

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # Python ignores SIGXFSZ: EFBIG
    try:
        with pytest.raises(UserError, match=r"cannot write .*results\.json: File too large"):
            atomic_write(tmp_path / "results.json", "x" * 10_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert list(tmp_path.iterdir()) == []


def test_a_durable_write_syncs_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is synced before it is renamed into place (a crash leaves the old file or
    the whole new one); a heartbeat (`durable=False`) is not synced. (The suite's fsync only
    checks its descriptor: tests/conftest.py.)"""
    from commbench.results.store import atomic_write

    synced: list[tuple[int, bool]] = []  # the synced file's size, and whether it was in place
    path = tmp_path / "results.json"

    def fsync(fd: int) -> None:
        synced.append((os.fstat(fd).st_size, path.exists()))

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(path, "first")
    assert synced == [(5, False)] and path.read_text() == "first"
    atomic_write(path, "beat", durable=False)
    assert len(synced) == 1 and path.read_text() == "beat"


def _left_running_by_a_process_that_exited(parent: Path) -> tuple[int, Path]:
    """A run saying "running", started by a process that is gone now; its pid and directory."""
    code = (
        "import os, sys; from pathlib import Path; "
        "from commbench.results.lifecycle import start_run; "
        "from commbench.results.record import RunContext, RunKind; "
        "life = start_run(Path(sys.argv[1]), RunKind.COLLECTIVES, settings={}, "
        "context=RunContext()); "
        "print(os.getpid(), life.path)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(parent)], capture_output=True, text=True, check=True
    )
    pid, path = done.stdout.split()
    return int(pid), Path(path)


@pytest.mark.integration
def test_a_run_whose_launcher_is_gone_reads_as_interrupted(tmp_path: Path) -> None:
    pid, run_dir = _left_running_by_a_process_that_exited(tmp_path)
    run = load_run(run_dir)
    assert run.record.status == "interrupted"
    assert run.record.failure == f"its launcher (pid {pid}) is gone"
    assert run.unfinished == f"was interrupted (its launcher (pid {pid}) is gone)"
    # reading writes nothing: run.json still says running, until `commbench settle` ends it
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    settle(RunDir(run_dir))
    stored = json.loads((run_dir / "run.json").read_text())
    assert stored["status"] == "interrupted" and stored["failure"] == run.record.failure


def _running(run_dir: Path) -> None:
    """run.json saying "running", written by this process."""
    record = RunRecord(kind=RunKind.COLLECTIVES, status=RunStatus.RUNNING, launcher=ProcessId.of())
    RunDir(run_dir).write_record(record)


def test_a_run_whose_launcher_runs_is_running(tmp_path: Path) -> None:
    _running(tmp_path)  # this process
    run = load_run(tmp_path)
    assert run.record.status == "running" and not run.record.failure
    RunDir(tmp_path).write_record(
        RunRecord(kind=RunKind.COLLECTIVES, status=RunStatus.COMPLETE, launcher=ProcessId.of())
    )
    assert "launcher" not in json.loads((tmp_path / "run.json").read_text())
    assert load_run(tmp_path).unfinished is None


def test_a_reused_pid_or_another_host_is_not_taken_for_the_launcher(tmp_path: Path) -> None:
    _running(tmp_path)
    record = json.loads((tmp_path / "run.json").read_text())
    record["launcher"]["start_ticks"] -= 1  # this pid, but a process started earlier
    (tmp_path / "run.json").write_text(json.dumps(record))
    assert load_run(tmp_path).record.status == "interrupted"
    record["launcher"].update(host="elsewhere", pid=7)
    (tmp_path / "run.json").write_text(json.dumps(record))
    run = load_run(tmp_path)
    assert run.record.status == "running"
    assert run.record.failure == (
        "its launcher (pid 7) runs on host elsewhere: whether it still runs cannot be told from here"
    )


# -- one row for every run kind, schema version 2, version 1 migrated on load ------------------

REPO = Path(__file__).resolve().parents[1]
V1_COLLECTIVES = [
    *sorted((REPO / "results" / "reference" / "cpu-gloo-w4-strategies").glob("2*-collectives")),
    *(REPO / "tests" / "fixtures" / "runs" / n for n in ("cpu-gloo-a", "h100x8-golden")),
]
V1_P2P = REPO / "tests" / "fixtures" / "runs" / "p2p-v1"  # written by commbench p2p, version 1

# results.csv's header as version 1 wrote it: users' spreadsheets and `to_frame()` read these
# columns, so the schema change must not move one of them.
COLLECTIVES_HEADER = (
    "op,strategy,dtype,reduce_op,world_size,size_bytes,count,time_us,algbw_gbps,busbw_gbps,"
    "check,min_us,q1_us,q3_us,p95_us,max_us,mean_us,stddev_us,cv,n,outliers,warmup,in_place,"
    "requested_bytes,note"
)
P2P_HEADER = (
    "step,test,mode,direction,copy,src,dst,pair,size_bytes,dtype,time_ms,bw_gbps,peak_gbps,"
    "ceiling_gbps,expected_gbps,efficiency,link,nvlinks,p2p,path,suspicious,check,diagnosis,"
    "min_ms,q1_ms,q3_ms,p95_ms,max_ms,mean_ms,stddev_ms,cv,n,outliers,warmup"
)


def _same_rows(a: list[ResultRow], b: list[ResultRow]) -> None:
    """Equal rows, NaN standing for NaN (a dataclass compares NaN unequal to itself)."""
    from commbench.files import dump_json

    assert [dump_json(r.to_dict()) for r in a] == [dump_json(r.to_dict()) for r in b]


def _rewritten(tmp_path: Path, run_dir: Path, rows: list[ResultRow], p2p: bool = False) -> Path:
    """The run as version 2 writes it."""
    out = tmp_path / run_dir.name
    out.mkdir()
    (out / "run.json").write_text((run_dir / "run.json").read_text())
    write_results(out, rows, p2p=p2p)
    return out


@pytest.mark.parametrize("run_dir", V1_COLLECTIVES, ids=lambda p: p.name)
def test_a_version_1_run_loads_to_the_rows_of_its_version_2_rewrite(
    tmp_path: Path, run_dir: Path
) -> None:
    from commbench.results.exporters import rows_to_csv
    from commbench.results.runs import load_run as load_any

    stored = json.loads((run_dir / "results.json").read_text())
    assert stored["schema_version"] == 1  # the committed files stay version 1
    rows = load_any(run_dir).rows
    raw = stored["rows"][0]
    stats = rows[0].stats
    assert (stats.median, stats.q1, stats.q3, stats.cv, stats.n) == (
        raw["time_us"], raw["q1_us"], raw["q3_us"], raw["cv"], raw["n"]
    )  # fmt: skip
    assert rows[0].samples_us == raw["samples_us"]
    # its results.csv, header and values, is what version 2 writes of the migrated rows
    assert rows_to_csv(rows) == (run_dir / "results.csv").read_text()
    again = _rewritten(tmp_path, run_dir, rows)
    data = json.loads((again / "results.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert "time_us" not in data["rows"][0] and data["rows"][0]["stats"]["median"] == raw["time_us"]
    _same_rows(load_any(again).rows, rows)
    assert (again / "results.csv").read_text() == (run_dir / "results.csv").read_text()


def test_a_version_1_p2p_run_loads_as_rows_with_their_copy(tmp_path: Path) -> None:
    from commbench.results.runs import load_run as load_any

    stored = json.loads((V1_P2P / "results.json").read_text())
    assert (stored["schema_version"], stored["kind"]) == (1, "p2p")
    rows = load_any(V1_P2P).rows
    assert len(rows) == len(stored["rows"]) == 27
    by_strategy = {r.strategy: (r, raw) for r, raw in zip(rows, stored["rows"], strict=True)}
    row, raw = by_strategy["0->1 p2p uni concurrent"]
    assert (row.op, row.world_size, row.size_bytes, row.dtype) == ("p2p", 8, 65536, "float32")
    assert row.busbw_gbps == row.algbw_gbps == raw["bw_gbps"]
    assert row.stats.median == pytest.approx(raw["time_ms"] * 1000, rel=1e-15)
    assert row.samples_us == pytest.approx([ms * 1000 for ms in raw["samples_ms"]], rel=1e-15)
    assert row.p2p is not None
    assert (row.p2p.src, row.p2p.dst, row.p2p.link, row.p2p.peer_access) == (0, 1, "NV4", True)
    assert row.p2p.peak_gbps == raw["peak_gbps"] and row.p2p.diagnosis == raw["diagnosis"]
    host, _ = by_strategy["host->0 h2d uni sequential latency"]
    assert host.p2p is not None and (host.p2p.src, host.busbw_gbps) == (None, None)
    again = _rewritten(tmp_path, V1_P2P, rows, p2p=True)
    assert "kind" not in json.loads((again / "results.json").read_text())
    _same_rows(load_any(again).rows, rows)


def test_results_csv_keeps_its_columns_for_every_run_kind(tmp_path: Path) -> None:
    from commbench.results.runs import load_run as load_any

    v1_headers = {
        p.name: (p / "results.csv").read_text().splitlines()[0] for p in [*V1_COLLECTIVES, V1_P2P]
    }
    assert set(v1_headers.values()) == {COLLECTIVES_HEADER, P2P_HEADER}

    def header(run: Path) -> str:
        return (run / "results.csv").read_text().splitlines()[0]

    collectives = new_run_dir(tmp_path, "collectives")
    write_results(collectives, [make_row()])
    assert header(collectives) == COLLECTIVES_HEADER
    p2p_empty = new_run_dir(tmp_path, "p2p")
    write_results(p2p_empty, [], p2p=True)  # before the first step
    assert header(p2p_empty) == P2P_HEADER
    p2p = _rewritten(tmp_path, V1_P2P, load_any(V1_P2P).rows)
    assert header(p2p) == P2P_HEADER
    # the values too: equal as numbers (a time in ms is stored in us now: the last bit of a
    # computed figure, a mean or a stddev, may differ), equal as text for everything else
    old = list(csv.reader((V1_P2P / "results.csv").read_text().splitlines()))
    new = list(csv.reader((p2p / "results.csv").read_text().splitlines()))
    assert len(old) == len(new) == 28
    for a, b in zip(old, new, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x == y or float(x) == pytest.approx(float(y), rel=1e-14)


def test_rows_from_stored_refuses_a_newer_version_and_names_bad_fields() -> None:
    from commbench.results.versions import rows_from_stored

    row = make_row().to_dict()
    with pytest.raises(UserError, match=r"^f\.json: schema_version 3 is newer than this") as info:
        rows_from_stored({"schema_version": 3, "rows": [row]}, "f.json")
    assert "\n" not in str(info.value)
    bad = {**row, "stats": {**row["stats"], "cv": -1}}
    with pytest.raises(UserError, match=r"^f\.json: rows\[0\]\.stats\.cv: -1 is outside"):
        rows_from_stored({"schema_version": 2, "rows": [bad]}, "f.json")
    with pytest.raises(UserError, match=r"^f\.json: rows\[0\]\.stats: missing"):
        rows_from_stored({"schema_version": 2, "rows": [{**row, "stats": None}]}, "f.json")
    p2p = json.loads((V1_P2P / "results.json").read_text())
    copy = {**p2p["rows"][0], "src": -1}
    with pytest.raises(UserError, match=r"^f\.json: rows\[0\]\.src: -1 is outside"):
        rows_from_stored({**p2p, "rows": [copy]}, "f.json")
    copy = {**p2p["rows"][0], "time_ms": "x"}
    with pytest.raises(UserError, match=r"^f\.json: rows\[0\]\.time_ms: expected a number"):
        rows_from_stored({**p2p, "rows": [copy]}, "f.json")
    v2 = {**row, "p2p": {"step": 0, "src": "cuda:0"}}
    with pytest.raises(UserError, match=r"^f\.json: rows\[0\]\.p2p\.src: expected an integer"):
        rows_from_stored({"schema_version": 2, "rows": [v2]}, "f.json")


def test_a_row_in_a_v1_p2p_file_without_the_kind_is_read_by_its_run_kind() -> None:
    """A version-1 p2p results.json said `kind: p2p`; when it does not, run.json's kind does."""
    from commbench.results.versions import rows_from_stored

    data = json.loads((V1_P2P / "results.json").read_text())
    del data["kind"]
    with pytest.raises(UserError, match=r"rows\[0\]\.op: missing"):
        rows_from_stored(data, "f.json")
    (row, *_) = rows_from_stored(data, "f.json", kind="p2p", world_size=8)
    assert row.op == "p2p" and row.world_size == 8 and row.p2p is not None
