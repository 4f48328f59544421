"""`commbench report`: one self-contained document, markdown or HTML, per run or suite."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner, Result

from commbench.cli import app
from commbench.report.document import Heading, Image, Table, build_report, to_html, to_markdown
from commbench.report.options import Images
from commbench.results.record import Entry, RunStatus, SuiteRecord
from commbench.results.store import SuiteDir

RUNS = Path(__file__).parent / "fixtures" / "runs"
GOLDEN = RUNS / "h100x8-golden"
DATA_URI = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


def report(*args: str) -> Result:
    return CliRunner().invoke(app, ["report", *args])


def test_markdown_report_holds_context_topology_tables_and_plots() -> None:
    result = report(str(GOLDEN))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("# commbench report: h100x8-golden\n")
    assert "NVIDIA H100 80GB HBM3 x8 · nccl 2.21.5 · world size 8" in text
    assert "## Context" in text and "| NCCL | 2.21.5 |" in text and "| driver | 550.90.07 |" in text
    assert "## Topology" in text and "| GPU0 | X | NV18 |" in text
    assert "### all_reduce  float32  op=sum  8 ranks" in text
    assert "| 1G | 268435456 | 5225.99 | 205.46 | 359.56 |" in text
    images = DATA_URI.findall(text)
    assert len(images) == 4  # three ops and the strategies
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)


def test_tables_only_for_step_summaries() -> None:
    text = report(str(GOLDEN), "--images", "none").stdout
    assert "data:image" not in text and "## Plots" not in text and "## Results" in text


def test_html_report_is_one_self_contained_file(tmp_path: Path) -> None:
    out = tmp_path / "r" / "report.html"
    result = report(str(GOLDEN), "--format", "html", "--out", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<title>commbench report: h100x8-golden</title>" in page
    assert page.count("<table>") >= 6 and '<td class="num">359.56</td>' in page
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', page)) == 4
    assert "http://" not in page.replace("http://www.w3.org", "")  # nothing fetched from outside


def test_html_escapes_what_it_shows() -> None:
    page = to_html([Heading(1, "a <b> & c"), Table(["x"], [["<script>"]], numeric=False)])
    assert "&lt;b&gt; &amp; c" in page and "<script>" not in page


def test_markdown_tables_escape_pipes() -> None:
    text = to_markdown([Table(["k", "v"], [["a|b", "c"]]), Image("alt", b"\x89PNG")])
    assert "| a\\|b | c |" in text and "![alt](data:image/png;base64,iVBORw==)" in text


def test_report_with_a_baseline_adds_the_gate(tmp_path: Path) -> None:
    text = report(str(GOLDEN), "--baseline", str(GOLDEN), "--images", "none").stdout
    assert "## Regression gate" in text and "**PASS: no regression in 66 points**" in text


def test_report_against_an_incomparable_baseline_offers_a_flag_it_has() -> None:
    refused = report(str(GOLDEN), "--baseline", str(RUNS / "cpu-gloo-a"), "--images", "none")
    assert refused.exit_code == 2 and "pass --allow-mismatch" in refused.stderr
    allowed = report(
        str(GOLDEN), "--baseline", str(RUNS / "cpu-gloo-a"), "--images", "none", "--allow-mismatch"
    )
    assert allowed.exit_code in (0, 1) and "## Regression gate" in allowed.stdout
    assert "allowed mismatch: backend differs" in allowed.stdout


def test_report_of_a_noisy_cpu_run_says_so() -> None:
    text = report(str(RUNS / "cpu-gloo-a"), "--images", "none").stdout
    assert "CPU · gloo · world size 2" in text and "points are noisy" in text
    assert "Not recorded" in text or "No GPU visible" in text


def test_suite_report_has_a_section_per_run(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copytree(GOLDEN, suite / "r1")
    shutil.copytree(RUNS / "cpu-gloo-a", suite / "r2")
    done, skipped = RunStatus.COMPLETE, RunStatus.SKIPPED
    entries = [
        Entry(name="collectives-float32", section="collectives", path="r1", status=done),
        Entry(name="strategies-float32", section="strategies", path="r2", status=done),
        Entry(name="p2p", section="p2p", status=skipped, failure="not available"),
    ]
    SuiteDir(suite).write_record(
        SuiteRecord(
            name="demo", status=done, warnings=["p2p skipped: not available"], entries=entries
        )
    )
    blocks = build_report(suite, Images.none)
    headings = [b.text for b in blocks if isinstance(b, Heading) and b.level == 2]
    assert headings[:2] == ["collectives-float32 (r1)", "strategies-float32 (r2)"]
    text = to_markdown(blocks)
    assert text.startswith("# commbench suite demo: suite") and "warning: p2p skipped" in text
    assert "| p2p | skipped | - | not available |" in text


def test_report_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    result = report(str(tmp_path))
    assert result.exit_code == 2 and "run.json" in result.stderr
