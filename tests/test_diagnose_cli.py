"""`commbench diagnose` through its command line: bad input, and real torchrun launches on
CPU ranks (one node; three "nodes" meeting at a rendezvous on 127.0.0.1). Loopback timings
are too noisy here to assert a verdict: these check what every run must hold whatever it
finds (the faults themselves are injected in tests/test_diagnose_cluster.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sizes", "1K,2K"], "diagnose tests at one size"),
        (["--sizes", "1K-1M:xinf"], "malformed step"),
        (["--stages", "intra,outer"], "--stages: choose from intra, inter"),
        (["--tolerance", "150%"], "--tolerance"),
        (["--baseline", "missing.json"], "missing.json"),
        (["--nproc", "0"], "--nproc"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(
        app, ["diagnose", "--device", "cpu", "-o", str(tmp_path / "o"), *args]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: error:") and message in lines[0]
    assert not (tmp_path / "o").exists()


def test_an_expectations_file_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "exp.json"
    bad.write_text(json.dumps({"inter-node": -3}))
    result = CliRunner().invoke(app, ["diagnose", "--device", "cpu", "--baseline", str(bad)])
    assert result.exit_code == 2 and "expected GB/s as a positive number" in result.output
    bad.write_text(json.dumps({"outer": 3}))
    result = CliRunner().invoke(app, ["diagnose", "--device", "cpu", "--baseline", str(bad)])
    assert result.exit_code == 2 and "unknown stage 'outer'" in result.output


def test_one_node_three_ranks(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "diagnose",
            "--device",
            "cpu",
            "--nproc",
            "3",
            "--sizes",
            "64K",
            "--iters",
            "4",
            "--format",
            "json",
            "-o",
            str(tmp_path),
        ],
    )
    assert result.exit_code in (0, 1), result.output
    shown = json.loads(result.stdout)
    (run_dir,) = tmp_path.glob("*-diagnose")
    stored = json.loads((run_dir / "diagnosis.json").read_text())
    assert shown == stored and stored["schema_version"] == 1
    assert [s["name"] for s in stored["stages"]] == ["intra-node", "gpu-pairs"]
    intra, pairs = stored["stages"]
    # one node; 3 pairs of ranks, in one pass, or in 5 when the first suspected one
    assert intra["tests"] == 1 and pairs["tests"] == pairs["rounds"] in (3, 15)
    assert stored["verdict"] in ("healthy", "degraded") and len(stored["nodes"]) == 1
    assert result.exit_code == (0 if stored["verdict"] == "healthy" else 1)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["kind"] == "diagnose" and run["status"] == "complete"
    assert (run_dir / "heatmap-gpu-pairs.png").stat().st_size > 1000
    rows = json.loads((run_dir / "results.json").read_text())["rows"]
    assert len(rows) == 1 + pairs["tests"] and all(r["op"] == "all_reduce" for r in rows)
    assert all(" rank " in r["note"] and "GPU" not in r["note"] for r in rows[1:])


def test_three_nodes_reach_the_same_verdict(tmp_path: Path, free_port: int) -> None:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "commbench",
                "diagnose",
                "--device",
                "cpu",
                "--nproc",
                "1",
                "--sizes",
                "64K",
                "--iters",
                "4",
                "--nnodes",
                "3",
                "--node-rank",
                str(r),
                "--rdzv-endpoint",
                f"127.0.0.1:{free_port}",
                "--rdzv-id",
                "dg3",
                "--timeout",
                "60",
                "--format",
                "junit",
                "-o",
                str(tmp_path / f"node{r}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(3)
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    codes = {p.returncode for p in procs}
    assert len(codes) == 1 and codes <= {0, 1}, outputs
    stored = [
        json.loads(next((tmp_path / f"node{r}").glob("*-diagnose/diagnosis.json")).read_text())
        for r in range(3)
    ]
    assert stored[0]["nodes"] == stored[1]["nodes"] == stored[2]["nodes"]
    # three pairs of nodes, in one pass, or in 5 when the first suspected one
    (stage,) = stored[0]["stages"]
    assert stage["name"] == "inter-node" and stage["rounds"] == stage["tests"] in (3, 15)
    suite = ET.fromstring(outputs[0][0])  # a test case per node
    assert suite.tag == "testsuite" and suite.get("tests") == "3"
    assert len(suite.findall("testcase")) == 3


def test_slurm_script_wraps_diagnose_checked_on_the_submit_host() -> None:
    runner = CliRunner()
    ok = runner.invoke(
        app, ["slurm-script", "-N", "4", "--gpus-per-node", "8", "--", "diagnose", "--sizes", "64M"]
    )
    assert ok.exit_code == 0, ok.output
    assert "srun --ntasks-per-node=1 --cpu-bind=none commbench diagnose --sizes 64M" in ok.stdout
    bad = runner.invoke(app, ["slurm-script", "-N", "4", "--", "diagnose", "--stages", "x"])
    assert bad.exit_code == 2 and "--stages: choose from intra, inter" in bad.output
    wide = runner.invoke(
        app, ["slurm-script", "-N", "2", "--gpus-per-node", "2", "--", "diagnose", "--nproc", "4"]
    )
    assert wide.exit_code == 2 and "--gpus-per-node 2" in wide.output
