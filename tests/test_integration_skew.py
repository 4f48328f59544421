"""all_to_allv through the real command: 2 gloo ranks on CPU, uneven splits from `--skew`, every
received element checked, the rows labelled with their skew, and `compare` of a uniform run
with a zipf one pairing none of their points. Nothing here asserts a timing."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.results.runs import load_run
from commbench.skew import Skew

pytestmark = pytest.mark.integration

FAST = ["--device", "cpu", "--nproc", "2", "--iters", "3", "--warmup", "1", "--no-plot"]


def collectives(out: Path, *args: str) -> tuple[Path, str]:
    done = subprocess.run(
        [sys.executable, "-m", "commbench", "collectives", *FAST, "-o", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir, done.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    where = tmp_path_factory.mktemp("skew")
    sizes = ["--sizes", "4K-64K"]
    return {
        "zipf": collectives(where / "zipf", "--ops", "all_to_allv", "--skew", "zipf:1.2", *sizes),
        "uniform": collectives(where / "uniform", "--ops", "all_to_allv,all_to_all", *sizes),
    }


def test_zipf_rows_carry_their_skew_and_pass_the_check(runs: dict[str, tuple[Path, str]]) -> None:
    run_dir, out = runs["zipf"]
    run = load_run(run_dir)
    assert run.record.status == "complete"
    settings = json.loads((run_dir / "run.json").read_text())["settings"]
    assert (settings["skew"], settings["seed"]) == ("zipf:1.2", 0)  # reproducible from here
    skew = Skew.parse("zipf:1.2")
    assert [r.size_bytes for r in run.rows] == [4096 << i for i in range(5)]
    for row in run.rows:
        assert (row.op, row.check, row.skew) == ("all_to_allv", "ok", "zipf:1.2 seed=0"), row
        assert row.skew_ratio == skew.ratio(row.count, 2) and row.skew_ratio > 1
        assert row.algbw_gbps is not None and row.busbw_gbps is not None
        assert row.busbw_gbps == pytest.approx(row.algbw_gbps / 2)  # alltoall's (n-1)/n
        assert row.algbw_gbps == pytest.approx(row.size_bytes * row.skew_ratio / row.time_us / 1e3)
    with open(run_dir / "results.csv") as fh:
        stored = list(csv.DictReader(fh))
    assert {r["skew"] for r in stored} == {"zipf:1.2 seed=0"}
    assert "# all_to_allv  float32  2 ranks  skew=zipf:1.2 seed=0" in out and "max/mean" in out


def test_uniform_splits_move_all_to_alls_traffic(runs: dict[str, tuple[Path, str]]) -> None:
    run = load_run(runs["uniform"][0])
    v = [r for r in run.rows if r.op == "all_to_allv"]
    even = [r for r in run.rows if r.op == "all_to_all"]
    assert [r.size_bytes for r in v] == [r.size_bytes for r in even]
    assert all(r.skew == "uniform" and r.skew_ratio == 1.0 and r.check == "ok" for r in v)
    assert all(r.skew == "" and r.skew_ratio is None for r in even)


def test_compare_never_pairs_a_uniform_point_with_a_zipf_one(
    runs: dict[str, tuple[Path, str]],
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "compare",
            str(runs["uniform"][0]),
            str(runs["zipf"][0]),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # the baseline's points are missing: a regression
    points = json.loads(done.stdout)["points"]
    v = [p for p in points if p["op"] == "all_to_allv"]
    assert {(p["skew"], p["mark"]) for p in v} == {
        ("uniform", "missing"),
        ("zipf:1.2 seed=0", "new"),
    }
    assert len(v) == 10 and all(p["base_busbw_gbps"] is None for p in v if p["mark"] == "new")
