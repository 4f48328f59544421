"""`commbench model` through the CLI: predictions, fitting from a run, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.strategies.model import Params, predict_one
from tests.factories import make_row, write_run

runner = CliRunner()


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_predicts_every_strategy_and_the_winner() -> None:
    result = runner.invoke(
        app, ["model", "--world", "8", "--bw", "100", "--latency", "5", "--sizes", "1K,1G"]
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "model  8 ranks  nccl algorithms, alpha 5.00 us/step, beta 100 GB/s" in out
    for header in ("direct", "red+bcast", "rs+ag", "ring", "ring_naive", "winner"):
        assert header in out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln[:2] in ("1K", "1G")}
    # 1 KiB: 7 naive steps beat 14; 1 GiB: (n-1) S loses to 2(n-1)/n S
    assert lines["1K"].endswith("ring_naive")
    assert lines["1G"].endswith("direct")
    assert "70.02 us (0.026)" in lines["1K"]  # 14 x 5 us + 1.75 KiB / 100 GB/s
    assert " ms (" in lines["1G"] and "^" not in out  # human units; nothing fitted to exceed


def test_json_has_params_and_a_row_per_prediction() -> None:
    result = runner.invoke(
        app,
        ["model", "-w", "2,64", "--bw", "10", "--latency", "1", "-s", "1K,1M", "-f", "json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["params"] == {
        "alpha_us": 1.0,
        "bw_gbps": 10.0,
        "launch_us": 0.0,
        "backend": "nccl",
    }
    assert data["fit"] is None
    assert len(data["rows"]) == 2 * 2 * 5
    assert sum(r["winner"] for r in data["rows"]) == 4


def make_run(
    tmp_path: Path, sizes: list[int], backend: str = "gloo", dtypes: tuple[str, ...] = ("float32",)
) -> Path:
    truth = Params(alpha_us=200.0, bw_gbps=0.5)
    rows = [
        make_row(
            s,
            [predict_one("direct", 4, s, truth).time_us],
            busbw_factor=1.5,
            strategy="direct",
            dtype=dtype,
            world_size=4,
        )
        for s in sizes
        for dtype in dtypes
    ]
    meta = {"kind": "collectives", "status": "complete", "context": {}}
    return write_run(tmp_path / "run", rows, {**meta, "settings": {"backend": backend}})


def test_from_run_fits_and_extrapolates(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, [1024, 65536, 1 << 20])
    result = runner.invoke(app, ["model", "--from", str(run_dir), "-s", "1M", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["params"]["alpha_us"] == pytest.approx(200.0)
    assert data["params"]["bw_gbps"] == pytest.approx(0.5)
    assert data["params"]["backend"] == "gloo"  # the run's
    assert data["fit"]["points"] == 3
    assert sorted({r["world_size"] for r in data["rows"]}) == [4, 8, 64, 1024]
    table = runner.invoke(app, ["model", "--from", str(run_dir), "-s", "1M", "--bw", "2"])
    assert "beta 2 GB/s" in table.stdout  # a flag overrides the fitted value
    assert "fitted to 3 direct all_reduce points measured at 4 ranks, sizes 1K-1M" in table.stdout
    # 1M at 4 ranks was measured; the same size at 8, 64 and 1024 ranks is an extrapolation
    rows = [ln for ln in table.stdout.splitlines() if ln.startswith("1M")]
    assert rows[0].split()[1] != "^" and all(ln.split()[1] == "^" for ln in rows[1:])
    assert "^ extrapolated: beyond what was measured (4 ranks, sizes 1K-1M)" in table.stdout
    assert not re.search(r"\d{5,}", table.stdout)  # no raw microsecond counts
    assert "bandwidth given, worst fit error" in table.stdout
    assert "alpha 200" not in table.stdout  # latency refitted with beta held at 2 GB/s
    both = runner.invoke(
        app, ["model", "--from", str(run_dir), "-s", "1M", "--bw", "2", "--latency", "5"]
    )
    assert both.exit_code == 0 and "latency and bandwidth given: worst error" in both.stdout
    assert "checked against 3 direct all_reduce points" in both.stdout  # nothing was fitted
    assert "fitted to" not in both.stdout


def test_several_dtypes_are_said_to_be_pooled(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, [1024, 65536], dtypes=("bfloat16", "float32"))
    table = runner.invoke(app, ["model", "--from", str(run_dir), "-s", "1M"])
    assert table.exit_code == 0, table.output
    assert (
        "fitted to 4 direct all_reduce points (bfloat16, float32 pooled: the model is in bytes)"
        in table.stdout
    )


def test_nccl_predictions_say_what_the_ring_only_model_leaves_out() -> None:
    nccl = runner.invoke(app, ["model", "--world", "8", "--bw", "100", "--latency", "5"])
    assert "NCCL also has a tree algorithm" in nccl.stdout
    gloo = runner.invoke(
        app, ["model", "--world", "8", "--bw", "1", "--latency", "50", "--backend", "gloo"]
    )
    assert gloo.exit_code == 0 and "tree algorithm" not in gloo.stdout


def test_a_fit_through_two_sizes_says_it_proves_nothing(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, [1024, 1 << 20])
    result = runner.invoke(app, ["model", "--from", str(run_dir), "-s", "1M"])
    assert result.exit_code == 0
    assert "exact through 2 size(s) by construction" in result.stdout
    assert "worst fit error" not in result.stdout


def test_given_bandwidth_rescues_a_run_whose_time_does_not_grow(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, [1024, 65536, 1 << 20])
    meta = json.loads((run_dir / "results.json").read_text())
    for row in meta["rows"]:
        row["stats"]["median"] = 300.0  # flat: no bandwidth can be fitted from this
    (run_dir / "results.json").write_text(json.dumps(meta))
    assert "cannot fit a bandwidth" in one_line_error(
        runner.invoke(app, ["model", "--from", str(run_dir), "-s", "1M"])
    )
    result = runner.invoke(app, ["model", "--from", str(run_dir), "-s", "1M", "--bw", "10"])
    assert result.exit_code == 0, result.output
    assert "bw 0" not in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--bw", "10"], "give --bw and --latency, or --from RUN"),
        (["--bw", "10", "--latency", "1", "--world", "8,x"], "comma list of integers"),
        (
            ["--bw", "10", "--latency", "1", "--world", "0"],
            "at least 2 (one rank has nothing to reduce)",
        ),
        (["--bw", "0", "--latency", "1"], "bandwidth must be > 0"),
        (["--bw", "1", "--latency", "-1"], "latency must be >= 0"),
        (["--bw", "1", "--latency", "1", "--backend", "mpi"], "unknown backend"),
        (["--bw", "1", "--latency", "1", "--strategies", "tree"], "unknown strategy"),
        (["--bw", "1", "--latency", "1", "--sizes", "1K-banana"], "malformed size"),
        (["--from", "nowhere"], "no such run directory"),
        (["--bw", "10", "--latency", "1", "--world", ""], "--world is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    assert fragment in one_line_error(runner.invoke(app, ["model", *args]))


def test_from_run_with_one_size_is_refused(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, [1024])
    line = one_line_error(runner.invoke(app, ["model", "--from", str(run_dir)]))
    assert "2 sizes or more" in line


def test_help_mentions_the_model() -> None:
    result = runner.invoke(app, ["--help"])
    assert "model" in result.stdout
    result = runner.invoke(app, ["model", "--help"])
    assert result.exit_code == 0 and "alpha-beta" in result.stdout


@pytest.mark.integration
def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    """`commbench model ... | head -1`: the pipe breaks under a long table; the command ends
    at once, with no traceback and no "Exception ignored" at exit."""
    import subprocess
    import sys

    worlds = ",".join(str(w) for w in range(2, 200))
    proc = subprocess.Popen(
        [sys.executable, "-m", "commbench", "model", "--world", worlds, "--bw", "100",
         "--latency", "5", "--sizes", "1K-1G"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"# model")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (0, 1, 141), err
    assert "Traceback" not in err and "Exception" not in err, err
