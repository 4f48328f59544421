import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.processes import ProcessId
from commbench.results.exporters import Format, export
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus
from commbench.results.runs import load_run
from commbench.results.schema import CSV_COLUMNS, SCHEMA_VERSION, ResultRow
from commbench.results.store import RunDir, new_run_dir, write_results


def make_row(size: int = 1024, samples: list[float] | None = None, **kw) -> ResultRow:
    base = {
        "op": "all_reduce",
        "dtype": "float32",
        "reduce_op": "sum",
        "world_size": 4,
        "count": size // 4,
        "check": "ok",
    }
    base.update(kw)
    return ResultRow.measured(
        samples_us=samples or [10.0, 12.0, 11.0], size_bytes=size, busbw_factor=1.5, **base
    )


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
        RunRecord(kind=RunKind.COLLECTIVES, context=RunContext(backend="gloo"))
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
    assert "# all_reduce  float32  op=sum  n=4" in table
    assert "### all_reduce  float32  op=sum  n=4" in md
    assert "| 2K |" in md and "rounded from 2050 B" in md and "rounded from 2050 B" in table
    as_json = json.loads(export(rows, Format.json))
    assert as_json["schema_version"] == SCHEMA_VERSION and as_json["rows"][1]["size_bytes"] == 2048
    assert "samples_us" not in as_json["rows"][1]
    assert export(rows, Format.csv).splitlines()[0].startswith("op,strategy,dtype")


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("time_us", "abc", "rows[0].time_us: expected a number, got the string 'abc'"),
        ("world_size", 2.5, "rows[0].world_size: expected an integer"),
        ("samples_us", [1, "x"], "rows[0].samples_us[1]: expected a number"),
        ("in_place", 1, "rows[0].in_place: expected true or false"),
    ],
)
def test_a_row_of_the_wrong_type_is_one_clear_error(
    tmp_path: Path, field: str, value, fragment: str
) -> None:
    run = new_run_dir(tmp_path, "x")
    RunDir(run).write_record(RunRecord(kind=RunKind.COLLECTIVES))
    write_results(run, [make_row()])
    data = json.loads((run / "results.json").read_text())
    data["rows"][0][field] = value
    (run / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"rows\[0\]") as info:
        load_run(run)
    assert fragment in str(info.value)


def test_every_row_field_has_a_declared_type() -> None:
    from dataclasses import fields

    from commbench.results.schema import _FIELD_READERS

    assert set(_FIELD_READERS) == {f.name for f in fields(ResultRow)}


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


def test_a_run_whose_launcher_is_gone_reads_as_interrupted(tmp_path: Path) -> None:
    pid, run_dir = _left_running_by_a_process_that_exited(tmp_path)
    run = load_run(run_dir)
    assert run.record.status == "interrupted"
    assert run.record.failure == f"its launcher (pid {pid}) is gone"
    assert run.unfinished == f"was interrupted (its launcher (pid {pid}) is gone)"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"  # untouched


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
