"""Run directories written by version 1 (the committed reference runs, users' baselines) are
read by every command that reads runs, migrated on load; a newer version is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner, Result

from commbench.cli import app
from commbench.results.record import RunKind, RunStatus
from commbench.results.runs import load_run
from commbench.results.schema import SCHEMA_VERSION

REFERENCE = Path(__file__).parents[1] / "results" / "reference" / "cpu-gloo-w4-strategies"
V1_RUN = REFERENCE / "20261121-060313-collectives"
V1_OTHER = REFERENCE / "20261121-060353-collectives"


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def test_the_reference_runs_are_version_1() -> None:
    # what this file tests: if they are ever rewritten, keep a version-1 copy to test with
    assert SCHEMA_VERSION > 1
    assert json.loads((V1_RUN / "run.json").read_text())["schema_version"] == 1


def test_a_v1_run_loads_as_a_typed_record() -> None:
    run = load_run(V1_RUN)
    assert (run.kind, run.status) == (RunKind.COLLECTIVES, RunStatus.COMPLETE)
    assert run.context.world_size == 4 and run.context.backend == "gloo"
    assert run.context.topology is not None and run.context.topology.source == "nvml"
    assert run.record.points_done == len(run.rows) == 78
    frame = run.to_frame()
    assert list(frame.columns)[:3] == ["op", "strategy", "dtype"] and len(frame) == 78


def test_a_v1_run_compares(tmp_path: Path) -> None:
    result = cli("compare", str(V1_RUN), str(V1_OTHER), "--allow-mismatch")
    assert result.exit_code in (0, 1), result.output
    assert "commbench: error" not in result.output


def test_a_v1_run_reports() -> None:
    result = cli("report", str(V1_RUN), "--images", "none")
    assert result.exit_code == 0, result.output
    assert "CPU · gloo · world size 4" in result.stdout and "## Topology" in result.stdout


def test_a_v1_run_plots(tmp_path: Path) -> None:
    result = cli("plot", str(V1_RUN), "-o", str(tmp_path), "--formats", "png")
    assert result.exit_code == 0, result.output
    assert list(tmp_path.glob("*.png"))


def test_a_v1_run_is_modelled() -> None:
    result = cli("model", "--from", str(V1_RUN), "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)


def test_a_v1_failed_topology_discovery_is_migrated(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(V1_RUN, run_dir)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["context"]["topology"] = {"error": "RuntimeError: no NVML"}
    (run_dir / "run.json").write_text(json.dumps(meta))
    run = load_run(run_dir)
    assert run.context.topology is None
    assert run.context.topology_error == "RuntimeError: no NVML"
    assert "Topology discovery failed: RuntimeError: no NVML" in cli("report", str(run_dir)).stdout


def test_a_newer_run_is_refused_in_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(V1_RUN, run_dir)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["schema_version"] = SCHEMA_VERSION + 1
    (run_dir / "run.json").write_text(json.dumps(meta))
    for command in (["report", str(run_dir)], ["plot", str(run_dir), "-o", str(tmp_path)]):
        result = cli(*command)
        assert result.exit_code == 2
        assert "is newer than this commbench understands" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
