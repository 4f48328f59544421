"""`make gpu-check` (benchmarks/gpu_check.py): without a GPU, one line and exit 2 before
anything is installed or written; the README's figures computed from the benchmarks' JSON."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def references() -> set[str]:
    ref = REPO / "results" / "reference"
    return {p.name for p in ref.iterdir()} if ref.exists() else set()


no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


@no_gpu
def test_without_a_gpu_the_script_says_so_in_one_line_and_exits_2() -> None:
    before = references()
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("gpu-check: no CUDA GPU") and proc.stderr.count("\n") == 1
    assert references() == before


@no_gpu
@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_gpu_check_stops_before_installing_anything() -> None:
    proc = subprocess.run(
        ["make", "-s", "-C", str(REPO), "gpu-check", f"PYTHON={sys.executable}", "PIP=false"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0].startswith("gpu-check: no CUDA GPU")
    assert "pip" not in proc.stdout + proc.stderr


def test_without_torch_or_nvidia_smi_there_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gc = gpu_check()
    monkeypatch.setattr(gc.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(gc.shutil, "which", lambda name: None)
    assert gc.no_gpu_reason() == "no CUDA GPU here (no torch installed and no nvidia-smi)"


P2P = {
    "kinds": {
        "d2d": {"ratio": 0.95, "commbench_gbps": 1900.0, "bare_gbps": 2000.0},
        "h2d": {"commbench_gbps": 55.0},
        "d2h": {"commbench_gbps": 50.0},
    }
}


def harness(*overheads: tuple[int, float]) -> dict:
    return {
        "sizes": [
            {"size": size, "timer_overhead": over, "commbench_mean_us": 10.0, "bare_mean_us": 9.9}
            for size, over in overheads
        ]
    }


def test_figures_against_the_goals() -> None:
    gc = gpu_check()
    rows = gc.figures(
        P2P,
        {
            "eager": harness((1 << 10, 0.5), (1 << 20, 0.01), (64 << 20, 0.031)),
            "graph": None,
        },
        64.0,
    )
    table = {r[0]: r[1:] for r in rows}
    assert table["d2d copy vs a bare torch copy loop (same run)"][0].startswith("95.0%")
    assert table["d2d copy vs a bare torch copy loop (same run)"][2] == "yes"
    h2d, d2h = (table[f"pinned {k} vs PCIe Gen5 x16 (64.0 GB/s)"] for k in ("h2d", "d2h"))
    assert h2d[0].startswith("85.9%") and h2d[2] == "yes"
    assert d2h[0].startswith("78.1%") and d2h[2] == "NO"
    eager = [r for r in rows if "eager" in r[0]]
    assert [(r[0].rsplit(", ", 1)[1], r[3]) for r in eager] == [("1M", "yes"), ("64M", "NO")]
    assert ("not measured", "-") in {(r[1], r[3]) for r in rows if "graph" in r[0]}
    text = gc.render_readme(
        "NVIDIA H100",
        {"date": "d", "torch": "t", "cuda": "c", "nccl": "n", "commit": "x"},
        rows,
        [],
    )
    assert text.startswith("# GPU reference: NVIDIA H100\n")
    assert "| 95.0% (1900.0 vs 2000.0 GB/s) | >= 90% | yes |" in text
    assert gc.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_each_step_is_bounded_and_the_readme_says_how_it_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gc = gpu_check()
    monkeypatch.setattr(gc, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=0: "Fake GPU")

    def fake_steps(out: Path) -> list:
        return [
            gc.Step("quick", [sys.executable, "-c", "print('hi')"], 30, "quick.log", "quick.out"),
            gc.Step("stuck", [sys.executable, "-c", "import time; time.sleep(600)"], 1, "s.log"),
        ]

    monkeypatch.setattr(gc, "steps", fake_steps)
    out = tmp_path / "ref"
    assert gc.main(["--out", str(out)]) == 1  # a step that timed out fails the check
    readme = (out / "README.md").read_text()
    assert readme.startswith("# GPU reference: Fake GPU\n")
    assert "| quick | ok |" in readme and "| stuck | timed out |" in readme
    assert "not measured" in readme  # no benchmark output: no figure is made up
    assert (out / "quick.out").read_text() == "hi\n"
    assert json.loads((out / "summary.json").read_text())["steps"][1]["timed_out"] is True
