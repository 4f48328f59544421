"""An installed torch older than the floor is refused up front: one line, exit 2, nothing
launched (not a TypeError in every worker). The version comes from the package metadata,
monkeypatched here."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench import torch_version
from commbench.cli import app
from commbench.errors import UserError
from commbench.launch import launcher
from commbench.p2p import measure

runner = CliRunner()


def fake_torch(monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    real = importlib.metadata.version

    def version_of(name: str) -> str:
        if name != "torch":
            return real(name)
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(importlib.metadata, "version", version_of)
    if version is None:
        monkeypatch.setattr(torch_version.importlib.util, "find_spec", lambda name: None)


@pytest.mark.parametrize("version", ["2.5.0", "2.5.0a0+git1234", "2.10.1", "2.13.0+cpu", "3.0"])
def test_the_floor_and_later_pass(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    fake_torch(monkeypatch, version)
    torch_version.require_torch()


@pytest.mark.parametrize("version", ["2.4.1", "2.3.0+cu121", "1.13.1"])
def test_older_torch_is_refused(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    fake_torch(monkeypatch, version)
    with pytest.raises(
        UserError, match=rf"torch {re.escape(version)} is installed; commbench needs torch>=2\.5"
    ):
        torch_version.require_torch()


def test_missing_torch_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch(monkeypatch, None)
    with pytest.raises(UserError, match="torch is not installed"):
        torch_version.require_torch()


def test_pyproject_declares_the_same_floor() -> None:
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    floor = ".".join(map(str, torch_version.TORCH_FLOOR))
    assert f'"torch>={floor}"' in text


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


OLD = "commbench: error: torch 2.4.1 is installed; commbench needs torch>=2.5"


def test_commands_that_need_torch_refuse_an_old_one_before_launching(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_torch(monkeypatch, "2.4.1")

    def must_not_run(*args: object, **kw: object) -> None:
        raise AssertionError("launched with an old torch")

    monkeypatch.setattr(launcher, "probe", must_not_run)
    monkeypatch.setattr(launcher.subprocess, "Popen", must_not_run)
    monkeypatch.setattr(measure, "TorchMeasurer", must_not_run)
    line = one_line_error(
        runner.invoke(app, ["collectives", "--device", "cpu", "--sizes", "1K", "--iters", "2"])
    )
    assert line.startswith(OLD)
    # p2p: where no GPU is visible, that is said first (it needs one whatever the torch)
    line = one_line_error(runner.invoke(app, ["p2p", "--size", "1K"]))
    assert line.startswith(OLD) or "p2p needs a CUDA GPU, and none is visible" in line
    suite = tmp_path / "s.yaml"
    suite.write_text("collectives:\n  ops: [all_reduce]\n")
    line = one_line_error(runner.invoke(app, ["run", str(suite), "--device", "cpu"]))
    assert line.startswith(OLD)
    assert not Path("results").exists()


@pytest.mark.integration
def test_the_check_reads_metadata_without_importing_torch() -> None:
    code = (
        "import sys; from commbench.torch_version import require_torch; require_torch(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
