"""`commbench import nccl-tests`: published nccl-tests logs (see fixtures/nccl_tests/README.md)."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import UserError
from commbench.importers.nccl_tests import (
    import_log,
    infer_world_size,
    nccl_version_from_code,
    parse_file,
    parse_json,
    parse_text,
)
from commbench.results.runs import load_run

LOGS = Path(__file__).parent / "fixtures" / "nccl_tests"
H100 = LOGS / "h100x16_2nodes_all_reduce.log"
A100_OLD = LOGS / "a100x8_all_gather_old_format.log"
GB10 = LOGS / "gb10x2_all_gather_v2.17.log"
H100_JSON = LOGS / "h100x16_2nodes_all_reduce.json"


def by_key(rows: list) -> dict:
    return {(r.size_bytes, r.in_place): r for r in rows}


def test_current_format_multi_node_log() -> None:
    parsed = parse_file(H100)
    (section,) = parsed.sections
    assert section.op == "all_reduce"  # named only on the mpirun command line
    assert section.header is not None and section.header.iters == 20
    assert section.header.more["agg_iters"] == 1
    assert len(section.ranks) == 16 and section.ranks[8].host == "ztan-mig-gq73"
    assert section.ranks[0].pci_bus_id == "0000:04:00" and section.ranks[0].group == 0
    rows = by_key(parsed.rows)
    assert len(rows) == 31 * 2
    big_out, big_in = rows[(8 << 30, False)], rows[(8 << 30, True)]
    assert (big_out.time_us, big_out.algbw_gbps, big_out.busbw_gbps) == (47535, 180.71, 338.82)
    assert (big_in.time_us, big_in.busbw_gbps) == (47743, 337.35)
    assert {r.check for r in parsed.rows} == {"ok"}
    assert {(r.dtype, r.reduce_op, r.world_size, r.strategy) for r in parsed.rows} == {
        ("float32", "sum", 16, "")
    }
    assert math.isnan(big_out.stats.cv) and big_out.samples_us == [] and big_out.stats.n == 20


def test_older_format_with_error_column_and_no_redop() -> None:
    parsed = parse_file(A100_OLD)
    (section,) = parsed.sections
    assert section.op == "all_gather"  # from the file name
    assert section.dropped_empty == 5  # the five zero-byte rows
    assert len(section.ranks) == 8 and section.ranks[0].group is None
    assert section.ranks[0].device_name == "A100-SXM4-40GB"
    rows = by_key(parsed.rows)
    assert len(rows) == 29 * 2
    assert (
        rows[(1 << 30, False)].busbw_gbps == 212.88 and rows[(1 << 30, True)].busbw_gbps == 220.61
    )
    assert {r.check for r in parsed.rows} == {"skipped"}  # validation: 0 prints N/A
    # nccl-tests prints all_gather's count per rank (32 B at n=8: 1); commbench counts S
    assert rows[(32, False)].count == 8 and rows[(1 << 30, False)].count == (1 << 30) // 4
    assert {r.reduce_op for r in parsed.rows} == {""}
    assert section.avg_busbw == pytest.approx(58.2651)


def test_version_header_gives_the_nccl_version() -> None:
    parsed = parse_file(GB10)
    assert parsed.tests_version == "2.17.6"
    assert parsed.nccl == "2.28.3"  # nccl-library=22803
    (section,) = parsed.sections
    assert section.op == "all_gather"  # "Collective test starting: all_gather_perf"
    assert {r.reduce_op for r in parsed.rows} == {""}  # redop "none"
    assert [r.busbw_gbps for r in parsed.rows] == [18.94, 20.95]
    assert {r.world_size for r in parsed.rows} == {2}


def test_json_output_matches_the_log() -> None:
    from_json = by_key(parse_file(H100_JSON).rows)
    from_log = by_key(parse_file(H100).rows)
    assert len(from_json) == 14 * 2
    for key, row in from_json.items():
        assert (row.time_us, row.busbw_gbps, row.world_size) == (
            from_log[key].time_us,
            from_log[key].busbw_gbps,
            16,
        )


def test_json_per_iteration_times_become_samples() -> None:
    data = json.loads(H100_JSON.read_text())
    item = data["results"][-1]
    item["out_of_place_per_iter"] = {"times_us": [47000.0, 47535.0, 48000.0, 47600.0]}
    parsed = parse_json(data, "all_reduce.json")
    row = by_key(parsed.rows)[(item["size"], False)]
    assert row.samples_us == [47000.0, 47535.0, 48000.0, 47600.0]
    assert row.time_us == pytest.approx(47567.5) and row.stats.n == 4 and row.stats.cv > 0
    assert row.busbw_gbps / row.algbw_gbps == pytest.approx(338.82 / 180.71)


def test_json_version_and_shape_are_checked() -> None:
    with pytest.raises(UserError, match=r"version 4 is not understood \(known: 1, 2, 3\)"):
        parse_json({"version": 4, "results": []}, "x.json")
    with pytest.raises(UserError, match="not an nccl-tests JSON"):
        parse_json({"rows": []}, "x.json")
    data = json.loads(H100_JSON.read_text())
    data["results"][2]["out_of_place"]["bus_bw"] = "fast"
    with pytest.raises(UserError, match=r"results\[2\]\.out_of_place"):
        parse_json(data, "x.json")


def log_lines() -> list[str]:
    return H100.read_text().splitlines()


def test_malformed_row_names_its_line(tmp_path: Path) -> None:
    lines = log_lines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith("1048576 "))
    lines[index] = lines[index].replace("9.68", "9.6x")
    with pytest.raises(UserError, match=rf"bad\.log:{index + 1}: malformed value"):
        parse_text("\n".join(lines), "bad.log")
    lines[index] = "     1048576        262144     float     sum      -1    203.2    5.16"
    with pytest.raises(UserError, match=rf"bad\.log:{index + 1}: expected 13 columns, found 7"):
        parse_text("\n".join(lines), "bad.log")


def test_rows_without_a_header_or_at_all_are_refused() -> None:
    with pytest.raises(UserError, match=r"x\.log:1: a result row before any column header"):
        parse_text(
            "   1024   256   float   sum   -1   10.0   0.1   0.2   0   10.0   0.1   0.2   0",
            "x.log",
        )
    with pytest.raises(UserError, match="no nccl-tests result rows"):
        parse_text("# nThread 1 nGpus 1\nhello\n", "x.log")


def test_unknown_op_asks_for_op_and_op_overrides(tmp_path: Path) -> None:
    text = "\n".join(line for line in log_lines() if "_perf" not in line)
    with pytest.raises(UserError, match="pass --op"):
        parse_text(text, "results.txt")
    assert {r.op for r in parse_text(text, "results.txt", op="reduce").rows} == {"reduce"}


def test_wrong_results_map_to_the_check_column() -> None:
    lines = log_lines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith("4096 "))
    lines[index] = lines[index][: lines[index].rindex("0")] + "3"  # in-place #wrong = 3
    rows = by_key(parse_text("\n".join(lines), "all_reduce_perf.log").rows)
    assert rows[(4096, False)].check == "ok"
    assert rows[(4096, True)].check == "failed" and "#wrong 3" in rows[(4096, True)].note
    old = A100_OLD.read_text().replace("   8.96    7.84    N/A", "   8.96    7.84  1e+00")
    old_rows = by_key(parse_text(old, "all_gather.log").rows)
    assert old_rows[(524288, False)].check == "failed"


def test_mpirun_tagged_output_and_debug_lines_are_understood() -> None:
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in log_lines())
    tagged += "\nworker-0:21:118 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    parsed = parse_text(tagged, "run.out")
    assert len(parsed.rows) == 62 and parsed.nccl == "2.21.5" and parsed.cuda == "12.4"


def test_world_size_from_the_busbw_factor() -> None:
    assert infer_world_size("all_reduce", 180.71, 338.82) == 16
    assert infer_world_size("all_gather", 255.31, 223.39) == 8
    assert infer_world_size("broadcast", 10.0, 10.0) is None


@pytest.mark.parametrize(
    ("code", "version"), [(22803, "2.28.3"), (21903, "2.19.3"), (2803, "2.8.3")]
)
def test_nccl_version_codes(code: int, version: str) -> None:
    assert nccl_version_from_code(code) == version


def test_import_writes_a_run_directory(tmp_path: Path) -> None:
    run = load_run(import_log(H100, tmp_path))
    assert run.record.kind == "nccl-tests" and run.record.status == "complete"
    assert run.record.settings["ops"] == ["all_reduce"]
    ctx = run.context
    assert ctx.device_names == ["NVIDIA H100 80GB HBM3"]
    assert (ctx.world_size, ctx.nnodes, ctx.backend, ctx.device) == (
        16,
        2,
        "nccl",
        "cuda",
    )
    assert ctx.hosts == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert len(run.rows) == 62 and (run.path / "results.csv").exists()


def test_import_command_then_compare_and_report(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        app, ["import", "nccl-tests", str(H100), str(GB10), "-o", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    h100, gb10 = (Path(p) for p in result.stdout.split())
    same = runner.invoke(app, ["compare", str(h100), str(h100)])
    assert same.exit_code == 0 and "without per-iteration samples" in same.stdout
    other = runner.invoke(app, ["compare", str(h100), str(gb10)])
    assert other.exit_code == 2 and "GPU model differs" in other.stderr
    report = runner.invoke(app, ["report", str(h100), "--images", "none"])
    assert report.exit_code == 0 and "ztan-mig-gq73" in report.stdout


def test_import_command_refuses_malformed_logs(tmp_path: Path) -> None:
    bad = tmp_path / "all_reduce_perf.log"
    shutil.copy(H100, bad)
    bad.write_text(bad.read_text().replace("  213.19  ", "  abc  "))
    result = CliRunner().invoke(app, ["import", "nccl-tests", str(bad), "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{bad}:" in result.stderr and "268435456" in result.stderr
    missing = CliRunner().invoke(app, ["import", "nccl-tests", str(tmp_path / "none.log")])
    assert missing.exit_code == 2
    wrong_op = CliRunner().invoke(app, ["import", "nccl-tests", str(H100), "--op", "allreduce"])
    assert wrong_op.exit_code == 2 and "unknown op" in wrong_op.stderr
    for log in (H100, H100.with_suffix(".json")):
        relabel = CliRunner().invoke(app, ["import", "nccl-tests", str(log), "--op", "all_gather"])
        assert relabel.exit_code == 2
        assert "the log measured all_reduce, not all_gather (--op)" in relabel.stderr
    agreeing = CliRunner().invoke(
        app, ["import", "nccl-tests", str(H100), "--op", "all_reduce", "-o", str(tmp_path)]
    )
    assert agreeing.exit_code == 0, agreeing.output
    for world in ("0", "-1"):
        bad_world = CliRunner().invoke(
            app, ["import", "nccl-tests", str(H100), "--world-size", world]
        )
        assert bad_world.exit_code == 2 and "--world-size must be >= 1" in bad_world.stderr


def test_import_prints_the_path_then_devices_and_both_averages(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["import", "nccl-tests", str(H100), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (path,) = result.stdout.split()  # stdout: the run directory alone, for scripts
    assert Path(path).is_dir()
    err = result.stderr
    assert "# Using devices" in err and "cuda:0 [0000:04:00]" in err
    assert re.search(r"^ +15  ztan-mig-gq73 ", err, re.M)
    # nccl-tests measured both forms: the out-of-place series says so
    assert re.search(
        r"^all_reduce float32 sum 16 ranks out-of-place +338\.82 +8G +\d+\.\d\d", err, re.M
    )
    assert re.search(r"^all_reduce float32 sum 16 ranks in-place +\d+\.\d\d +", err, re.M)
    # the log's own figure, which averages every size, is shown at last
    assert "nccl-tests' own Avg bus bandwidth (all_reduce, every size" in err
    assert err.rstrip().endswith("70.74 GB/s")


def test_rows_left_out_are_counted_and_said(tmp_path: Path) -> None:
    """A row with a negative size is no result nccl-tests prints: it is skipped, and so is a
    zero-byte row, but both are counted and said, on stderr and in the run's notes."""
    lines = log_lines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("16 "))
    bad = [
        lines[at].replace("16 ", "-8 ", 1),
        lines[at].replace("16 ", "-16 ", 1),
        lines[at].replace("          16             4", "           0             0", 1),
    ]
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("\n".join(lines[:at] + bad + lines[at:]) + "\n")
    result = CliRunner().invoke(app, ["import", "nccl-tests", str(log), "-o", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    said = [ln for ln in result.stderr.splitlines() if "skipped" in ln]
    assert said == [
        f"commbench: warning: 3 rows skipped: line {at + 1} (a negative size or count), "
        f"line {at + 2} (a negative size or count), line {at + 3} (zero bytes)"
    ], result.stderr
    run = load_run(next((tmp_path / "o").iterdir()))
    assert any(n.startswith("3 rows skipped: line") for n in run.record.notes)
    assert -8 not in {r.size_bytes for r in run.rows}


def test_a_point_measured_in_several_cycles_is_one_row(tmp_path: Path) -> None:
    """nccl-tests -N prints its table once per cycle (and two logs may be joined): each
    point becomes one row whose samples are every cycle's time, not two rows with one key
    that `compare` could not tell apart."""
    text = GB10.read_text()
    second = text.replace("   453650   37.87   18.94", "   400000   42.95   21.47")
    log = tmp_path / "cycles.log"
    log.write_text(text + second + text)
    run = load_run(import_log(log, tmp_path / "out"))
    assert len(run.rows) == 2 and len({r.key for r in run.rows}) == 2
    out_of_place = next(r for r in run.rows if not r.in_place)
    assert sorted(out_of_place.samples_us) == [400000.0, 453650.0, 453650.0]
    assert out_of_place.time_us == 453650.0  # the median of the three cycles
    assert out_of_place.busbw_gbps == pytest.approx(18.94, abs=0.01)
    assert "measured 3 times" in out_of_place.note
    assert any("measured up to 3 times" in n for n in run.record.notes)
    in_place = next(r for r in run.rows if r.in_place)
    assert in_place.samples_us == [410049.0] * 3


def _looped_log(path: Path, repeats: int) -> Path:
    """H100's log, its header and devices kept, with one table line repeated `repeats` times:
    a nightly loop appending the same point to one log."""
    lines = H100.read_text().splitlines()
    table = next(i for i, line in enumerate(lines) if line.lstrip().startswith("8 "))
    path.write_text("\n".join([*lines[:table], *[lines[table]] * repeats]) + "\n")
    return path


def test_a_loops_long_log_imports_up_to_the_named_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43, item 4: a log of repeated rows past MAX_ROWS was refused with `not one
    nccl-tests run: '2147483648 536870912 float sum ...'`, which named neither the limit nor
    what to do. Up to the limit each point is one row holding every repeat as a sample; past
    it, the refusal names the limit and the way out, and no line of the user's."""
    from commbench.importers.nccl_tests import parse

    monkeypatch.setattr(parse, "MAX_ROWS", 200)
    log = _looped_log(tmp_path / "all_reduce_perf.log", 100)
    run = load_run(import_log(log, tmp_path / "runs"))
    assert [len(r.samples_us or ()) for r in run.rows] == [100, 100]
    _looped_log(log, 101)
    result = CliRunner().invoke(app, ["import", "nccl-tests", str(log), "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert f"{log}:" in line and "more than 200 result rows (100 table lines" in line, line
    assert "the most one import reads: split the log" in line and "float" not in line, line
