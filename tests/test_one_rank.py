"""One rank moves nothing between ranks: no bandwidth is printed for it (issue 24, D3).

NCCL's in-place ops on one rank return at once, so timing them measures the dispatch alone
and a busbw of TB/s follows; gloo's are no more telling. At world size 1 every op with data
is still run, timed and checked, but its row has no bandwidth and says "bandwidth not measured
(1 rank)".
The harness benchmark, whose figure needs something timed, times an out-of-place copy there.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.collectives.specs import NOT_MEASURED_ONE_RANK, OPS, STRATEGIES

REPO = Path(__file__).resolve().parents[1]


def test_no_op_has_a_bandwidth_on_one_rank() -> None:
    for spec in [*OPS.values(), *STRATEGIES.values()]:
        assert spec.busbw_factor(1) is None
        assert spec.no_bandwidth(1) == ("" if spec.latency_only else NOT_MEASURED_ONE_RANK)
        assert spec.no_bandwidth(2) == ""
        assert (spec.busbw_factor(2) is None) == spec.latency_only
    # the probe runs every op on one rank to learn what the backend supports: not refused there
    assert OPS["all_reduce"].too_few_ranks(1) == ""


@pytest.mark.integration
def test_collectives_on_one_rank_print_no_bandwidth(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "collectives",
            "--device",
            "cpu",
            "--nproc",
            "1",
            "--ops",
            "all_reduce,all_gather,broadcast,barrier",
            "--strategies",
            "ring",
            "--sizes",
            "1K,64K",
            "--iters",
            "5",
            "--warmup",
            "1",
            "--no-plot",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    rows = json.loads((run_dir / "results.json").read_text())["rows"]
    data = [r for r in rows if r["op"] != "barrier"]
    assert len(data) == 8
    for r in data:
        assert r["algbw_gbps"] is None and r["busbw_gbps"] is None, r
        assert r["samples_us"] and r["check"] == "ok"  # still run and checked
        assert NOT_MEASURED_ONE_RANK in r["note"]
    (barrier,) = [r for r in rows if r["op"] == "barrier"]
    assert barrier["samples_us"] and barrier["busbw_gbps"] is None
    with open(run_dir / "results.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows)
    assert all(t["busbw_gbps"] == "" and t["algbw_gbps"] == "" for t in table)
    # the terminal table shows no bandwidth either, and says why
    assert "bandwidth not measured (1 rank)" in proc.stdout + proc.stderr
    assert "# Bus bandwidth" not in proc.stdout  # no peak made of nothing moved


@pytest.mark.integration
def test_harness_overhead_on_one_rank_times_a_copy_that_moves_data(tmp_path: Path) -> None:
    report = tmp_path / "h.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "harness_overhead.py"),
            "--nproc",
            "1",
            "--sizes",
            "64K",
            "--rounds",
            "1",
            "--min-time",
            "0.001",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["nproc"] == 1 and data["op"].startswith("all_gather (out of place")
    assert proc.stdout.startswith("harness overhead: all_gather (out of place")
    # one rank times the all_gather alone, whatever --ops asked; the host's pace beside it
    (point,) = data["sizes"]
    assert point["op"] == "all_gather" and point["size"] == 64 << 10
    assert point["bare_issue_ops_per_s"] > 0 and point["commbench_issue_ops_per_s"] > 0
