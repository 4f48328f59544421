"""`commbench topo` through the CLI, with the NVML module swapped for a fake."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.topology import SCHEMA_VERSION

FIXTURES = Path(__file__).parent / "fixtures" / "topology"
sys.path.insert(0, str(FIXTURES))

from fake_nvml import FakeNvml, load_machine  # noqa: E402

runner = CliRunner()
Machine = Callable[[str | None], None]


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Callable[[str | None], None]:
    """Install a fake pynvml describing the named machine (or one whose NVML is missing)."""

    def install(name: str | None) -> None:
        spec = {"gpus": [], "init_error": 12} if name is None else load_machine(name)
        monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(spec))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    return install


def test_no_nvml_is_information_not_an_error(machine: Machine) -> None:
    machine(None)
    result = runner.invoke(app, ["topo"])
    assert result.exit_code == 0, result.output
    assert "no NVIDIA GPU visible (NVML: library not found)" in result.stdout
    assert result.stdout.startswith("Host:")
    assert result.stderr == ""


def test_no_nvml_json_still_describes_the_host(machine: Machine) -> None:
    machine(None)
    result = runner.invoke(app, ["topo", "--format", "json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["gpus"] == [] and data["pairs"] == []
    assert data["nvml_error"] == "NVML: library not found"
    assert data["host"]["cpu_threads"] >= 1


def test_default_table_on_a_dgx1v(machine: Machine) -> None:
    machine("dgx1v")
    result = runner.invoke(app, ["topo"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Tesla V100-SXM2-16GB" in out
    assert "GPU0     X      NV1     NV1     NV2     NV2     SYS     SYS     SYS" in out
    assert "CPU Affinity    NUMA Affinity" in out
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in out
    pair_rows = [line for line in out.splitlines() if line.startswith("GPU0<->GPU5")]
    assert len(pair_rows) == 1
    assert pair_rows[0].split()[:5] == ["GPU0<->GPU5", "SYS", "0", "no", "15.8"]
    assert "staged through host memory" in pair_rows[0]


def test_json_snapshot_has_the_promised_fields(machine: Machine) -> None:
    machine("dgx_h100")
    result = runner.invoke(app, ["topo", "--format", "json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["schema_version"] == SCHEMA_VERSION and len(data["gpus"]) == 8
    pair = next(p for p in data["pairs"] if p["src"] == 2 and p["dst"] == 5)
    assert pair["link"] == "NV18" and pair["nvlinks"] == 18
    assert pair["p2p"] is True and pair["peak_gbps"] == 450.0


def test_out_writes_the_snapshot_and_shows_the_table(machine: Machine, tmp_path: Path) -> None:
    machine("workstation2")
    out = tmp_path / "snap.json"
    result = runner.invoke(app, ["topo", "--format", "json", "--out", str(out)])
    assert result.exit_code == 0
    assert "GPU0<->GPU1  NV4" in result.stdout  # the human table on screen
    assert result.stderr == f"commbench: topology written to {out}\n"
    saved = json.loads(out.read_text())
    assert saved["pairs"][0]["peak_gbps"] == 56.25
    # ... and a saved snapshot renders offline the same way.
    again = runner.invoke(app, ["topo", "--from", str(out)])
    assert again.exit_code == 0
    assert again.stdout == result.stdout


def test_out_table_format(machine: Machine, tmp_path: Path) -> None:
    machine("pcie8")
    out = tmp_path / "topo.txt"
    result = runner.invoke(app, ["topo", "-o", str(out)])
    assert result.exit_code == 0
    assert out.read_text() == result.stdout
    assert "PXB" in out.read_text()


def test_from_golden_snapshot() -> None:
    result = runner.invoke(app, ["topo", "--from", str(FIXTURES / "snapshot_dgx1v.json")])
    assert result.exit_code == 0
    assert "Host:    dgx1v-node01, Intel(R) Xeon(R) CPU E5-2698 v4" in result.stdout
    assert "GPU0<->GPU3  NV2   2        yes  50.0" in result.stdout


def test_from_smi() -> None:
    path = FIXTURES / "smi_h100_nvswitch_nv18_13nics.txt"
    result = runner.invoke(app, ["topo", "--from-smi", str(path)])
    assert result.exit_code == 0
    assert "imported `nvidia-smi topo -m`" in result.stdout
    assert "NIC12: mlx5_eth4" in result.stdout
    assert "450.0*" in result.stdout
    as_json = runner.invoke(app, ["topo", "--from-smi", str(path), "--format", "json"])
    data = json.loads(as_json.stdout)
    assert data["source"] == "nvidia-smi" and data["pairs"][0]["peak_assumed"] is True


def test_from_smi_reads_stdin() -> None:
    text = (FIXTURES / "smi_dgx1v_v100_hybrid_cube_mesh.txt").read_text()
    result = runner.invoke(app, ["topo", "--from-smi", "-", "--format", "json"], input=text)
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [n["name"] for n in data["nics"]] == ["mlx5_0"]


def _fails_with(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("commbench: error: ")
    assert message in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_snapshot_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "snapshot_dgx1v.json").read_text())
    data["gpus"][3]["memory_bytes"] = "16 GB"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    _fails_with(["topo", "--from", str(bad)], "gpus[3].memory_bytes: expected an integer")
    (tmp_path / "junk.json").write_text("not json")
    _fails_with(["topo", "--from", str(tmp_path / "junk.json")], "not valid JSON (line 1")
    _fails_with(["topo", "--from", str(tmp_path / "none.json")], "no such topology snapshot")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{}")
    _fails_with(["topo", "--from", str(tmp_path / "binary.json")], "not UTF-8 text (byte 0: 0xff)")
    _fails_with(["topo", "--from", str(tmp_path)], "is a directory, expected a topology snapshot")


def test_from_a_run_json_reads_the_snapshot_it_embeds(tmp_path: Path) -> None:
    """Every run.json keeps the topology under context.topology: `topo --from` reads it."""
    snapshot = json.loads((FIXTURES / "snapshot_dgx1v.json").read_text())
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"schema_version": 1, "context": {"topology": snapshot}}))
    result = runner.invoke(app, ["topo", "--from", str(run_json)])
    assert result.exit_code == 0, result.output
    assert "GPU0<->GPU3  NV2   2        yes  50.0" in result.stdout
    # the run directory itself names its run.json
    by_dir = runner.invoke(app, ["topo", "--from", str(tmp_path)])
    assert by_dir.exit_code == 0 and by_dir.stdout == result.stdout, by_dir.output
    run_json.write_text(json.dumps({"schema_version": 1, "context": {"topology": None}}))
    _fails_with(
        ["topo", "--from", str(run_json)], "context.topology: this run recorded no topology"
    )


def test_bad_smi_text_names_file_and_line(tmp_path: Path) -> None:
    text = (FIXTURES / "smi_rtx5090x2_workstation_phb_tabs.txt").read_text()
    bad = tmp_path / "topo.txt"
    bad.write_text(text.replace("PHB\t X", "PHQ\t X"))
    _fails_with(["topo", "--from-smi", str(bad)], "topo.txt: line 5: GPU1 column GPU0: 'PHQ'")
    _fails_with(["topo", "--from-smi", str(tmp_path / "nope.txt")], "nope.txt: no such")


def test_two_inputs_is_a_usage_error(tmp_path: Path) -> None:
    _fails_with(["topo", "--from", "a.json", "--from-smi", "b.txt"], "--from and --from-smi both")


def test_help_mentions_every_option() -> None:
    result = runner.invoke(app, ["topo", "--help"])
    assert result.exit_code == 0
    for option in ("--format", "--from", "--from-smi", "--out"):
        assert option in result.stdout
