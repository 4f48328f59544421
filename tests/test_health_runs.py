"""Health snapshots around real runs: a `commbench collectives` run on CPU ranks while a
fixture RDMA counter rises, p2p with a fake NVML machine (GPU3 downtrained, an NVLink CRC
counter that rises on every read), the report's section and diagnose's evidence."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.diagnose.render import render_diagnosis
from commbench.diagnose.run import HEALTHY, Diagnosis, NodeVerdict, add_health
from commbench.health.capture import take
from commbench.health.record import NodeHealth, RunHealth
from commbench.p2p import measure
from commbench.results.record import RunStatus
from commbench.results.runs import load_run
from tests.fixtures.topology.fake_nvml import FakeNvml, load_machine

SYSFS = Path(__file__).parent / "fixtures" / "health" / "sysfs"
ARGS = ["--nproc", "2", "--ops", "all_reduce", "--sizes", "1K", "--iters", "3", "--warmup", "1"]
ARGS += ["--device", "cpu"]
NOTE = "Link health:\n  mlx5_0/1: symbol_error +12 during the run\n"


def _bump_when_running(out: Path, counter: Path, done: threading.Event) -> None:
    """Raise the counter once the run's record exists: the `before` snapshot is taken by then."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not done.is_set():
        if list(out.glob("*/run.json")):
            counter.write_text("12\n")
            return
        time.sleep(0.05)


@pytest.mark.integration
def test_collectives_run_records_health_and_prints_the_moved_counter(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    shutil.copytree(SYSFS, sysfs)
    counter = sysfs / "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    out = tmp_path / "out"
    done = threading.Event()
    bumper = threading.Thread(target=_bump_when_running, args=(out, counter, done))
    bumper.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "commbench", "collectives", *ARGS, "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "COMMBENCH_SYSFS_ROOT": str(sysfs)},
        )
    finally:
        done.set()
        bumper.join()
    assert proc.returncode == 0, proc.stderr
    assert NOTE in proc.stdout
    (run_dir,) = out.glob("*-collectives")
    health = json.loads((run_dir / "run.json").read_text())["context"]["health"]
    ports = {
        when: {p["device"]: p["counters"]["symbol_error"] for p in health[when]["ports"]}
        for when in ("before", "after")
    }
    assert ports == {"before": {"mlx5_0": 0, "mlx5_1": 5}, "after": {"mlx5_0": 12, "mlx5_1": 5}}
    assert health["before"]["taken_at"] <= health["after"]["taken_at"]
    run = load_run(run_dir)
    assert [f.message for f in run.health_findings()] == [
        "mlx5_0/1: symbol_error +12 during the run"
    ]
    report = CliRunner().invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    assert "## Link health\n\n- mlx5_0/1: symbol_error +12 during the run\n" in report.stdout


@pytest.mark.integration
def test_p2p_with_a_fake_nvml_reports_the_downtrained_gpu_and_moving_crc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(load_machine("health4")))
    (tmp_path / "no-sysfs").mkdir()  # an empty tree: no RDMA port (a missing one is refused)
    monkeypatch.setenv("COMMBENCH_SYSFS_ROOT", str(tmp_path / "no-sysfs"))
    monkeypatch.setattr(measure, "CudaBackend", lambda: measure.CpuBackend(4))
    result = CliRunner().invoke(app, ["p2p", "--size", "64K", "--warmup", "1", "--iters", "3"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "link health" in line]
    assert lines == [
        "commbench: link health: GPU1: NVLink crc_flit +3 during the run (each of its 2 links)",
        "commbench: link health: GPU3: PCIe Gen5 x8, max x16: half the host bandwidth",
    ]
    (run_dir,) = Path("results").iterdir()
    health = json.loads((run_dir / "run.json").read_text())["context"]["health"]
    assert [g["pcie_cur_width"] for g in health["before"]["gpus"]] == [16, 16, 16, 8]
    crc = [health[w]["gpus"][1]["nvlink_errors"]["0"]["crc_flit"] for w in ("before", "after")]
    assert crc == [7, 10]
    assert health["after"]["ports"] == [] and health["after"]["errors"] == []


def test_diagnose_evidence_names_the_node_with_a_sick_link(tmp_path: Path) -> None:
    nvml = FakeNvml(load_machine("health4"))
    health = RunHealth(before=take(nvml, root=tmp_path), after=take(nvml, root=tmp_path))
    diagnosis = Diagnosis(
        path=tmp_path,
        status=RunStatus.COMPLETE,
        nodes=[NodeVerdict(host="node-a", node=0), NodeVerdict(host="node-b", node=1)],
        stages=[],
    )
    add_health(diagnosis, health, 1)
    a, b = diagnosis.nodes
    # evidence, not verdict: the other nodes never see this node's counters, and every node
    # must conclude the same verdict from the measurements they share
    assert (a.verdict, a.health, b.verdict) == (HEALTHY, [], HEALTHY)
    assert "link health: GPU3: PCIe Gen5 x8, max x16: half the host bandwidth" in b.evidence
    stored: dict[str, Any] = json.loads(render_diagnosis(diagnosis, "json"))
    assert stored["nodes"][1]["health"][-1] == {
        "subject": "GPU3",
        "kind": "downtrained",
        "message": "GPU3: PCIe Gen5 x8, max x16: half the host bandwidth",
    }
    text = render_diagnosis(diagnosis, "table")
    assert "verdict: healthy; link health findings on node-b" in text


def test_diagnose_healthy_links_change_nothing(tmp_path: Path) -> None:
    nvml = FakeNvml(load_machine("dgx_h100"))
    health = RunHealth(before=take(nvml, root=tmp_path), after=take(nvml, root=tmp_path))
    diagnosis = Diagnosis(
        path=tmp_path, status=RunStatus.COMPLETE, nodes=[NodeVerdict(host="n", node=0)], stages=[]
    )
    add_health(diagnosis, health, 0)
    assert diagnosis.verdict == HEALTHY and diagnosis.nodes[0].evidence == []


def _node_sysfs(tmp_path: Path, name: str, downtrained: bool) -> Path:
    sysfs = tmp_path / name
    shutil.copytree(SYSFS, sysfs)
    if downtrained:  # a cable that trained one lane of four: static, in every snapshot
        rate = sysfs / "class/infiniband/mlx5_1/ports/1/rate"
        rate.write_text("100 Gb/sec (1X NDR)\n")
    return sysfs


@pytest.mark.integration
def test_multi_node_run_records_every_nodes_health(tmp_path: Path, free_port: int) -> None:
    """Two "nodes" on one machine, each launcher (and its workers) reading its own sysfs: the
    node that writes the results records the other node's snapshots too, and its notes, the
    stored record and the report name the other node's sick port."""
    roots = [_node_sysfs(tmp_path, "sys0", False), _node_sysfs(tmp_path, "sys1", True)]
    common = [sys.executable, "-m", "commbench", "collectives", *ARGS, "--nproc", "1"]
    common += ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port}", "--rdzv-id", "hn"]
    nodes = [
        subprocess.Popen(
            [*common, "--node-rank", str(r), "-o", f"node{r}", "--timeout", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COMMBENCH_SYSFS_ROOT": str(roots[r])},
        )
        for r in (0, 1)
    ]
    outputs = [p.communicate(timeout=240) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    runs = [load_run(next((tmp_path / f"node{r}").iterdir())) for r in (0, 1)]
    (writer,) = [i for i, r in enumerate(runs) if r.rows]
    run = runs[writer]
    health = run.context.health
    assert health is not None and health.before is not None and health.after is not None
    (other,) = health.nodes
    own_node = {r["node"] for r in run.context.ranks if r["rank"] == 0}
    assert {health.node} == own_node and other.node != health.node
    assert other.before is not None and other.after is not None
    assert other.nics is not None  # sent for the network bound (this fixture tree has none)
    # the other node's snapshots are its own sysfs's: node rank 1 read the downtrained copy
    other_rate = {p.device: p.rate for p in other.after.ports}["mlx5_1"]
    own_rate = {p.device: p.rate for p in health.after.ports}["mlx5_1"]
    sick_is_other = writer == 0
    assert (other_rate if sick_is_other else own_rate) == "100 Gb/sec (1X NDR)"
    sick = other.node if sick_is_other else health.node
    message = f"node {sick}: mlx5_1/1: 100 Gb/sec (1X NDR), other InfiniBand ports trained 4X"
    assert [f.message for f in run.health_findings()] == [message]
    # the health fixture trees hold RDMA ports but no NIC devices: the network note says so
    assert "\nNetwork efficiency:\n  network: no usable NIC recorded\n" in outputs[writer][0]
    assert f"Link health:\n  {message}\n" in outputs[writer][0]
    stored = json.loads((run.path / "run.json").read_text())["context"]["health"]
    assert [n["node"] for n in stored["nodes"]] == [other.node]
    report = CliRunner().invoke(app, ["report", str(run.path)])
    assert report.exit_code == 0, report.output
    assert f"- {message}\n" in report.stdout


def test_diagnose_evidence_from_another_nodes_health(tmp_path: Path) -> None:
    """Node 0's diagnosis gets node 1's findings from the health its workers gathered."""
    sick = FakeNvml(load_machine("health4"))
    well = FakeNvml(load_machine("dgx_h100"))
    own = take(well, root=tmp_path)
    other = NodeHealth(node=1, host="node-b", before=take(sick, root=tmp_path))
    other.after = take(sick, root=tmp_path)
    own.host = "node-a"
    health = RunHealth(before=own, after=own, node=0, nodes=[other])
    diagnosis = Diagnosis(
        path=tmp_path,
        status=RunStatus.COMPLETE,
        nodes=[NodeVerdict(host="node-a", node=0), NodeVerdict(host="node-b", node=1)],
        stages=[],
    )
    add_health(diagnosis, health, 0)
    a, b = diagnosis.nodes
    assert (a.verdict, a.health, b.verdict) == (HEALTHY, [], HEALTHY)
    assert "link health: node-b: GPU3: PCIe Gen5 x8, max x16: half the host bandwidth" in (
        b.evidence
    )
    assert all(f.node == 1 for f in b.health)
    text = render_diagnosis(diagnosis, "table")
    assert "verdict: healthy; link health findings on node-b" in text
    # the record round-trips: what node 0 stored reads back the same
    again = RunHealth.from_dict(json.loads(json.dumps(health.to_dict())), "health")
    assert again.to_dict() == health.to_dict()
