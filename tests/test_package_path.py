"""The workers import the commbench that launched them, installed or not (issue 24, D1).

`make gpu-check` runs from a plain checkout on a GPU machine where nothing may be installed:
torchrun's workers must then find the package through the PYTHONPATH the launcher gives them.
The integration test proves it in a Python that cannot see any installed commbench: a venv
without the system site-packages, reaching torch and the other dependencies through a .pth
line (a directory added that way has its own .pth files, the editable install's included,
left unread).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from commbench.launch.pythonpath import PACKAGE_ROOT, with_package_path

REPO = Path(__file__).resolve().parents[1]


def test_the_package_root_is_prepended_to_any_pythonpath() -> None:
    root = str(PACKAGE_ROOT)
    assert (PACKAGE_ROOT / "commbench" / "__init__.py").is_file()
    assert with_package_path({})["PYTHONPATH"] == root
    assert with_package_path({"PYTHONPATH": ""})["PYTHONPATH"] == root
    assert with_package_path({"PYTHONPATH": "/a:/b", "X": "1"}) == {
        "PYTHONPATH": os.pathsep.join([root, "/a", "/b"]),
        "X": "1",
    }
    # already first: left as it is, never doubled
    assert with_package_path({"PYTHONPATH": f"{root}:/a"})["PYTHONPATH"] == f"{root}:/a"


def isolated_python(tmp_path: Path) -> Path:
    """A Python with torch and commbench's dependencies but no commbench at all."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.mark.integration
def test_workers_import_the_launchers_copy_of_an_uninstalled_package(tmp_path: Path) -> None:
    python = isolated_python(tmp_path)
    src = tmp_path / "checkout"
    shutil.copytree(
        REPO / "commbench", src / "commbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [str(python), "-c", "import commbench"], cwd=elsewhere, env=env, capture_output=True
    )
    assert probe.returncode != 0  # nothing installed is visible here

    launcher = (
        "import runpy, sys; "
        f"sys.path.insert(0, {str(src)!r}); "
        "runpy.run_module('commbench', run_name='__main__', alter_sys=True)"
    )
    out = tmp_path / "runs"
    proc = subprocess.run(
        [
            str(python),
            "-c",
            launcher,
            "collectives",
            "--device",
            "cpu",
            "--nproc",
            "2",
            "--ops",
            "all_reduce",
            "--sizes",
            "1K",
            "--iters",
            "5",
            "--warmup",
            "1",
            "--no-plot",
            "-o",
            str(out),
        ],
        cwd=elsewhere,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "complete"
    rows = json.loads((run_dir / "results.json").read_text())["rows"]
    assert [r["check"] for r in rows] == ["ok"]
