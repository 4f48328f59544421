"""The HTML report in a real browser (Debian's headless Chromium): it loads with nothing from
outside, every image decodes, and a screenshot is written. Skipped where Chromium is absent."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "report_in_browser.py"
GOLDEN = Path(__file__).parent / "fixtures" / "runs" / "h100x8-golden"

needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
    reason="chromium not installed (apt-get install chromium)",
)


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("report_in_browser", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
@needs_chromium
def test_the_report_loads_decodes_and_renders(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(GOLDEN), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "images decoded: 4 of 4" in done.stdout
    shot = tmp_path / "screenshot.png"
    width, height, _ = _module().png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 4000)


@pytest.mark.integration
@needs_chromium
def test_the_check_catches_an_outside_reference_and_a_broken_image(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><h1>x</h1><link href="https://cdn.example/x.css">'
        '<img alt="a" src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="></body></html>'
    )
    module = _module()
    results = dict(
        (line.split(" (")[0].split(":")[0], ok)
        for ok, line in module.check(page, tmp_path, module.chromium())
    )
    assert results["no external reference"] is False
    assert results["images decoded"] is False


@pytest.mark.integration
def test_without_chromium_the_script_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(GOLDEN), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/nonexistent"},
    )
    assert done.returncode == 2 and "chromium is not installed" in done.stdout
