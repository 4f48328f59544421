"""nccl-tests' `-J` JSON, versions 1-3: the import (samples, per-process times, devices) and
the writer (`to_nccl_tests_json`), read back as nccl-tests' own analyzer reads it.

The fixtures are written by fixtures/nccl_tests/make_json.py as nccl-tests' src/util.cu prints
them (see fixtures/nccl_tests/README.md for the commit of each version).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import UserError
from commbench.importers.nccl_tests import (
    JSON_VERSIONS,
    MAX_RANK_LINES,
    parse_file,
    parse_json,
    to_nccl_tests_json,
)
from commbench.results.runs import load_run
from commbench.results.schema import ProcessTimes, RankTimes
from tests.factories import allreduce_factor, make_row, write_run

FIX = Path(__file__).parent / "fixtures" / "nccl_tests"
V1 = FIX / "v1_all_gather_1proc_2gpus.json"
V2 = FIX / "v2_all_reduce_2procs_per_iter.json"
V3 = FIX / "v3_all_reduce_4procs_slow_process.json"
SLOW = "the process of rank 2 (node-b, cuda:0 [0000:1b:00] NVIDIA H100 80GB HBM3)"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def by_key(rows: list) -> dict:
    return {(r.size_bytes, r.in_place): r for r in rows}


def test_fixtures_are_printed_as_util_cu_prints_them() -> None:
    """No whitespace, `/` escaped, booleans as strings, doubles with six decimals."""
    for path, version in ((V1, 1), (V2, 2), (V3, 3)):
        text = path.read_text()
        assert text.startswith(f'{{"version":{version},"start_time":') and not text.endswith("\n")
        assert " :" not in text and ", " not in text and '"blocking_collectives":"false"' in text
        assert re.search(r'"time":[0-9]+\.[0-9]{6},', text)
        assert '"root":"    -1"' in text and "build\\/" in text  # sanitizeJson escapes /


def test_version_1_one_process_of_two_gpus() -> None:
    """nccl-tests lists one device per process: world = devices x nthreads x ngpus."""
    parsed = parse_file(V1)
    (section,) = parsed.sections
    assert section.op == "all_gather" and len(section.ranks) == 1
    assert {r.world_size for r in parsed.rows} == {2}
    rows = by_key(parsed.rows)
    assert len(rows) == 10 and rows[(1 << 24, False)].count == (1 << 24) // 4  # S's elements
    assert all(r.samples_us == [] and r.processes is None for r in parsed.rows)
    assert {r.reduce_op for r in parsed.rows} == {""}  # redop "none"
    assert section.avg_busbw == pytest.approx(49.738302)  # `average_bus_bandwidith` (typo)
    assert parsed.nccl == "2.27.3"


def test_version_2_per_iteration_times_are_the_samples() -> None:
    data = load(V2)
    parsed = parse_json(data, str(V2))
    entry = data["results"][1]["in_place_per_iter"]
    row = by_key(parsed.rows)[(1 << 18, True)]
    assert row.samples_us == entry["times_us"] and row.stats.n == 8
    assert row.processes is not None and row.processes.ranks == [0, 1]
    assert row.processes.times_us == entry["per_process_max_times_us"]
    assert row.busbw_gbps / row.algbw_gbps == pytest.approx(allreduce_factor(2), rel=1e-5)
    assert isinstance(row.ranks, RankTimes) and row.ranks.ranks == [0, 1]


def test_version_3_skipped_iterations_and_the_slow_process() -> None:
    data = load(V3)
    parsed = parse_json(data, str(V3))
    (section,) = parsed.sections
    assert section.header is not None and section.header.more["per_iter_skip"] == 1
    assert [(d.rank, d.host, d.local_rank, d.pci_bus_id) for d in section.ranks][2] == (
        2,
        "node-b",
        0,
        "0000:1b:00",
    )
    entry = data["results"][3]["out_of_place_per_iter"]
    row = by_key(parsed.rows)[(1 << 26, False)]
    assert row.samples_us == entry["times_us"][1:]  # -K 1: the first left out, as nccl-tests does
    assert row.stats.n == 9 and row.world_size == 4
    assert row.processes is not None
    assert row.processes.times_us == [t[1:] for t in entry["per_process_max_times_us"]]
    slow = row.slow_process
    assert slow is not None and slow.rank == 2 and 0.15 < slow.share < 0.25
    # one GPU per process: the ranks' own times, read as commbench reads its own; the three
    # others arrived equally late, so no one rank kept the others waiting
    assert row.ranks is not None and row.ranks.wait_us[2] == 0 and row.straggler is None


def test_import_names_the_slow_process_then_report_and_compare(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["import", "nccl-tests", str(V3), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (path,) = result.stdout.split()
    assert f"{SLOW} was the slowest at 8 of 8 points" in result.stderr
    run = load_run(Path(path))
    assert [r["host"] for r in run.context.ranks] == ["node-a", "node-a", "node-b", "node-b"]
    assert run.context.world_size == 4 and run.context.nnodes == 2
    assert all(r.processes is not None for r in run.rows)  # kept in results.json
    report = runner.invoke(app, ["report", path, "--images", "none"])
    assert report.exit_code == 0, report.output
    assert "## Slowest processes" in report.stdout and SLOW in report.stdout
    assert "## Waited-for ranks" in report.stdout
    same = runner.invoke(app, ["compare", path, path])
    assert same.exit_code == 0, same.output
    assert "without per-iteration samples" not in same.stdout


def _refused(tmp_path: Path, text: str, name: str = "all_reduce_perf.json") -> str:
    """The one line `import` prints on stderr for `text`, having written nothing."""
    bad = tmp_path / name
    bad.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["import", "nccl-tests", str(bad), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert not out.exists() or not any(out.iterdir())
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_unknown_versions_and_other_files_are_refused(tmp_path: Path) -> None:
    data = load(V3)
    data["version"] = 4
    said = _refused(tmp_path, json.dumps(data))
    assert "version 4 is not understood (known: 1, 2, 3)" in said
    assert JSON_VERSIONS == (1, 2, 3)
    assert "not valid JSON" in _refused(tmp_path, V3.read_text()[:-300])  # a crashed run
    other = {"benchmarks": [{"name": "x"}], "results": []}  # another tool's file
    assert "not an nccl-tests JSON file" in _refused(tmp_path, json.dumps(other))


def test_per_process_arrays_must_match_the_run(tmp_path: Path) -> None:
    data = load(V3)
    per_iter = data["results"][2]["in_place_per_iter"]
    per_iter["per_process_max_times_us"] = per_iter["per_process_max_times_us"][:3]
    said = _refused(tmp_path, json.dumps(data))
    assert "results[2].in_place_per_iter.per_process_max_times_us: 3 processes" in said
    assert "the run has 4" in said
    data = load(V3)
    data["results"][0]["out_of_place_per_iter"]["per_process_max_times_us"][1].pop()
    said = _refused(tmp_path, json.dumps(data))
    assert "per_process_max_times_us[1]: 9 iterations, but times_us holds 10" in said
    data = load(V3)
    data["results"][0]["out_of_place_per_iter"]["per_process_max_times_us"] = [[]] * (
        MAX_RANK_LINES + 1
    )
    assert f"more than {MAX_RANK_LINES}" in _refused(tmp_path, json.dumps(data))
    data = load(V3)
    data["results"][0]["out_of_place_per_iter"]["times_us"][3] = "nan"
    assert "times_us[3]" in _refused(tmp_path, json.dumps(data))


# -- the writer -------------------------------------------------------------------------------


def _collectives_run(tmp_path: Path) -> Path:
    """A run of commbench's own: all_reduce on 4 ranks, out-of-place and in-place, with
    samples and per-rank times, one rank on another host."""
    rows = []
    for size in (1 << 20, 1 << 22, 1 << 24):
        base = 20 + size / 40e3
        for in_place in (False, True):
            samples = [base * (1 + 0.01 * i) for i in range(6)]
            rows.append(
                make_row(
                    size,
                    samples,
                    busbw_factor=allreduce_factor(4),
                    world_size=4,
                    in_place=in_place,
                    warmup=5,
                    ranks=RankTimes(
                        ranks=[0, 1, 2, 3],
                        median_us=[base] * 4,
                        p95_us=[base] * 4,
                        wait_us=[0.0, 0.0, 0.3 * base, 0.0],
                    ),
                )
            )
    ranks = [
        {
            "rank": r,
            "local_rank": r % 2,
            "host": f"n{r // 2}",
            "pid": 100 + r,
            "device": f"cuda:{r % 2}",
            "device_name": "NVIDIA H100 80GB HBM3",
        }
        for r in range(4)
    ]
    record = {
        "kind": "collectives",
        "status": "complete",
        "context": {
            "world_size": 4,
            "backend": "nccl",
            "device": "cuda",
            "nccl": "2.21.5",
            "hosts": ["n0", "n1"],
            "ranks": ranks,
            "started_at": "2026-07-10T09:00:00+0200",
            "env": {"NCCL_ALGO": "Ring"},
        },
    }
    return write_run(tmp_path / "run", rows, record)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_analyzer_reads_it(data: dict[str, Any]) -> None:
    """Every key and type NVIDIA/nccl-tests' tools/analyze_perf_json.py (at a0b82b2) reads."""
    assert isinstance(data["version"], int) and data["version"] == 3
    assert isinstance(data["results"], list) and data["results"]
    config = data["config"]
    assert isinstance(config, dict)
    assert isinstance(config["iterations"], int)
    assert isinstance(config["aggregated_iterations"], int)
    assert isinstance(config["per_iter_skip"], int)
    assert isinstance(config["devices"], list)
    assert all(isinstance(d["hostname"], str) for d in config["devices"])
    for r in data["results"]:
        assert isinstance(r["size"], int)
        for key in ("out_of_place_per_iter", "in_place_per_iter"):
            per_iter = r[key]
            assert isinstance(per_iter, dict)
            for name in ("max_us", "avg_us", "min_us", "p99_us", "cv_pct"):
                assert _number(per_iter[name]), name
            times = per_iter["times_us"]
            assert isinstance(times, list) and all(_number(t) for t in times)
            processes = per_iter.get("per_process_max_times_us", [])
            assert isinstance(processes, list)
            for row in processes:
                assert isinstance(row, list) and all(_number(t) for t in row)
            if processes:  # its consistency check: times_us is the max over process rows
                maxima = [max(col) for col in zip(*processes, strict=True)]
                assert all(abs(a - b) < 0.001 for a, b in zip(times, maxima, strict=True))


def _same_rows(before: list, after: list) -> None:
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        assert (a.op, a.size_bytes, a.dtype, a.reduce_op, a.in_place, a.world_size, a.count) == (
            b.op,
            b.size_bytes,
            b.dtype,
            b.reduce_op,
            b.in_place,
            b.world_size,
            b.count,
        )
        assert b.samples_us == pytest.approx(a.samples_us, abs=1e-6)
        assert b.time_us == pytest.approx(a.time_us, abs=1e-6)
        assert b.algbw_gbps == pytest.approx(a.algbw_gbps, rel=1e-6)
        assert b.busbw_gbps == pytest.approx(a.busbw_gbps, rel=1e-6)
        assert b.check == a.check


def test_a_collectives_run_written_as_version_3(tmp_path: Path) -> None:
    run = load_run(_collectives_run(tmp_path))
    text = to_nccl_tests_json(run)
    assert text.startswith('{"version":3,"start_time":"2026-07-10 09:00:00","args":')
    data = json.loads(text)
    _as_analyzer_reads_it(data)
    assert list(data) == [
        "version",
        "start_time",
        "args",
        "env",
        "nccl_version",
        "config",
        "results",
        "out_of_bounds",
        "average_bus_bandwidth",
        "errors",
        "end_time",
    ]
    assert data["nccl_version"] == 22105 and data["env"] == ["NCCL_ALGO=Ring"]
    first = data["results"][0]
    assert list(first) == [
        "size",
        "count",
        "type",
        "redop",
        "root",
        "out_of_place",
        "out_of_place_per_iter",
        "in_place",
        "in_place_per_iter",
        "actual_iterations",
        "experiment_name",
    ]
    assert (first["type"], first["redop"], first["root"]) == ("float", "sum", "    -1")
    assert first["out_of_place"]["nwrong"] == 0.0
    assert "per_process_max_times_us" not in first["out_of_place_per_iter"]  # no such times
    assert [d["hostname"] for d in data["config"]["devices"]] == ["n0", "n0", "n1", "n1"]
    assert data["config"]["step_factor"] == 4 and data["config"]["ngpus"] == 1
    _same_rows(run.rows, parse_json(data, "x.json").rows)


def test_an_imported_run_written_back_keeps_its_processes(tmp_path: Path) -> None:
    for fixture in (V1, V2, V3):
        result = CliRunner().invoke(
            app, ["import", "nccl-tests", str(fixture), "-o", str(tmp_path / fixture.stem)]
        )
        assert result.exit_code == 0, result.output
        run = load_run(Path(result.stdout.strip()))
        data = json.loads(to_nccl_tests_json(run))
        again = parse_json(data, "again.json")
        _same_rows(run.rows, again.rows)
        assert [r.processes for r in again.rows] == [r.processes for r in run.rows]
        if fixture != V1:
            _as_analyzer_reads_it(data)
    assert isinstance(run.rows[0].processes, ProcessTimes)
    assert data["config"]["devices"][2]["device_hex"] == "0000:1b:00"


def test_the_writer_refuses_what_nccl_tests_cannot_hold(tmp_path: Path) -> None:
    path = _collectives_run(tmp_path)
    run = load_run(path)
    run.rows.append(make_row(1 << 20, op="all_gather", reduce_op="", world_size=4))
    with pytest.raises(UserError, match="holds all_reduce, all_gather"):
        to_nccl_tests_json(run)
    gathered = json.loads(to_nccl_tests_json(run, op="all_gather"))
    assert gathered["args"][0] == "all_gather_perf"
    count = gathered["results"][0]["count"]
    assert count == (1 << 20) // 4 // 4  # per rank, as nccl-tests prints all_gather's
    with pytest.raises(UserError, match="no broadcast results"):
        to_nccl_tests_json(run, op="broadcast")


def test_commbench_export_writes_the_file_that_imports_back(tmp_path: Path) -> None:
    """The done-when of issue 27's first part through the commands a user types: a v3 file
    imports, `export --format nccl-tests-json` writes it again, and that imports back to the
    same rows with the same slow process."""
    runner = CliRunner()
    first = runner.invoke(app, ["import", "nccl-tests", str(V3), "-o", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    path = first.stdout.strip()
    out = tmp_path / "again" / "all_reduce_perf.json"
    exported = runner.invoke(app, ["export", path, "--format", "nccl-tests-json", "-o", str(out)])
    assert exported.exit_code == 0, exported.output
    assert json.loads(out.read_text())["version"] == 3
    assert exported.stdout == ""  # with --out, the file holds it
    back = runner.invoke(app, ["import", "nccl-tests", str(out), "-o", str(tmp_path / "b")])
    assert back.exit_code == 0, back.output
    assert f"{SLOW} was the slowest at 8 of 8 points" in back.stderr
    _same_rows(load_run(Path(path)).rows, load_run(Path(back.stdout.strip())).rows)
    wrong = runner.invoke(app, ["export", path, "--format", "prometheus", "--op", "all_reduce"])
    assert (
        wrong.exit_code == 2 and "--op chooses the op of --format nccl-tests-json" in wrong.stderr
    )
    assert wrong.stdout == ""


def test_a_file_of_millions_of_empty_objects_is_refused_before_it_is_parsed(
    tmp_path: Path,
) -> None:
    """`{}` is three bytes of text and about a hundred of memory: 220 MB of them took 11.6 GB
    to parse. They are counted in the text first."""
    import resource

    from commbench.files import MAX_CONTAINERS

    doc = json.loads(V3.read_text())
    text = json.dumps(doc)[:-1] + ',"extra":[' + "{}," * MAX_CONTAINERS + "{}]}"
    bad = tmp_path / "all_reduce_perf.json"
    bad.write_text(text)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = CliRunner().invoke(app, ["import", "nccl-tests", str(bad), "-o", str(tmp_path)])
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.exit_code == 2, result.output
    assert f"more than {MAX_CONTAINERS:,} objects and arrays" in result.stderr
    assert grown_mib < 200  # the text and a count of it, not two million dicts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all_reduce_perf.json"]


def test_a_byte_order_mark_before_the_json_is_read_past(tmp_path: Path) -> None:
    marked = tmp_path / "all_reduce_perf.json"
    marked.write_bytes(b"\xef\xbb\xbf" + V3.read_bytes())
    result = CliRunner().invoke(app, ["import", "nccl-tests", str(marked), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"{SLOW} was the slowest" in result.stderr


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    """JSON leaves a duplicate key to the reader: a file with version 3 and version 2 says
    two things, and is refused rather than read as whichever came last."""
    text = V3.read_text().replace('{"version":3,', '{"version":3,"version":2,', 1)
    assert text != V3.read_text()
    said = _refused(tmp_path, text)
    assert "the key 'version' given twice in one object" in said


def test_a_device_line_the_run_cannot_hold_is_refused_naming_the_file(tmp_path: Path) -> None:
    doc = load(V3)
    doc["config"]["devices"][0]["hostname"] = 'a"b\n# EOF'
    said = _refused(tmp_path, json.dumps(doc))
    assert said.startswith("commbench: error: ") and "all_reduce_perf.json: context.host" in said
