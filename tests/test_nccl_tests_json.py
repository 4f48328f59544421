"""nccl-tests' `-J` JSON, versions 1-3: the import (samples, per-process times, devices).

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
from commbench.importers.nccl_tests import (
    JSON_VERSIONS,
    MAX_RANK_LINES,
    parse_file,
    parse_json,
)
from commbench.results.runs import load_run
from commbench.results.schema import RankTimes
from tests.factories import allreduce_factor

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
