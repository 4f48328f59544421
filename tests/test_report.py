"""`commbench report`: one self-contained document, markdown or HTML, per run or suite."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner, Result

from commbench.cli import app
from commbench.report.blocks import Heading, Image, Table
from commbench.report.document import build_report
from commbench.report.options import Images
from commbench.report.writers import to_html, to_markdown
from commbench.results.record import Entry, RunStatus, SuiteRecord
from commbench.results.store import SuiteDir
from commbench.sizes import format_size
from tests.factories import one_op_copy

RUNS = Path(__file__).parent / "fixtures" / "runs"
GOLDEN = RUNS / "h100x8-golden"
DATA_URI = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")


def report(*args: str) -> Result:
    return CliRunner().invoke(app, ["report", *args])


def test_markdown_report_holds_context_topology_tables_and_plots() -> None:
    result = report(str(GOLDEN), "--images", "embed")
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
    page = to_html([Heading(1, "a <b> & c"), Table(["x"], [["<script>"]], numeric=False)]).text
    assert "&lt;b&gt; &amp; c" in page and "<script>" not in page


def test_markdown_tables_escape_pipes() -> None:
    text = to_markdown([Table(["k", "v"], [["a|b", "c"]]), Image("alt", b"\x89PNG")]).text
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
    text = to_markdown(blocks).text
    assert text.startswith("# commbench suite demo: suite") and "warning: p2p skipped" in text
    assert "| p2p | skipped | - | not available |" in text


def test_report_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    result = report(str(tmp_path))
    assert result.exit_code == 2 and "run.json" in result.stderr


def test_contents_links_resolve_to_headings_in_both_formats(tmp_path: Path) -> None:
    md = report(str(GOLDEN), "--images", "none").stdout
    links = re.findall(r"^ *- \[[^\]]+\]\(#([^)]+)\)$", md, re.M)
    assert "summary" in links and "strategies" in links and len(links) >= 8
    out = tmp_path / "r.html"
    # without figures too: the anchors are the headings', which the figures do not change
    assert report(str(GOLDEN), "-f", "html", "--images", "none", "--out", str(out)).exit_code == 0
    page = out.read_text()
    ids = set(re.findall(r'<h[1-6] id="([^"]+)"', page))
    hrefs = re.findall(r'<a href="#([^"]+)"', page)
    assert hrefs == links and set(hrefs) <= ids  # the same anchors, every one a heading


def test_each_plot_follows_its_table_and_strategies_have_a_section() -> None:
    blocks = build_report(GOLDEN, Images.embed)
    kinds = [
        ("h", b.text)
        if isinstance(b, Heading)
        else ("img", b.name)
        if isinstance(b, Image)
        else ("", "")
        for b in blocks
    ]
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        table = next(i for i, (k, t) in enumerate(kinds) if k == "h" and t.startswith(f"{op}  "))
        image = kinds.index(("img", op))
        between = [k for k, t in kinds[table + 1 : image] if k == "h"]
        assert image > table and not between, (op, kinds[table:image])
    section = kinds.index(("h", "Strategies"))
    assert kinds.index(("img", "strategies")) > section
    assert ("h", "Plots") not in kinds  # nothing left for the end of the page
    text = to_markdown(blocks, Images.none).text
    assert "### Fastest per size: all_reduce float32 op=sum 8 ranks" in text
    assert "### Cost model: all_reduce float32 op=sum 8 ranks" in text
    assert "### Model at other scales" in text and "model  1024 ranks" in text
    # the figure right after the fastest-per-size table (and its note), before the model
    fastest = kinds.index(("h", "Fastest per size: all_reduce float32 op=sum 8 ranks"))
    model = kinds.index(("h", "Cost model: all_reduce float32 op=sum 8 ranks"))
    assert fastest < kinds.index(("img", "strategies")) < model


def test_context_table_has_a_header_and_a_summary_comes_first() -> None:
    text = report(str(GOLDEN), "--images", "none").stdout
    assert "| field | value |" in text and "|  |  |" not in text
    assert text.index("## Summary") < text.index("## Context") < text.index("## Results")
    assert "Using devices" in text and "peak busbw" in text


def test_markdown_with_out_writes_the_plots_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "bench.md"
    result = report(str(GOLDEN), "--out", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "data:image" not in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 4 and all(link.startswith("bench_files/") for link in links)
    for link in links:
        assert (out.parent / link).read_bytes().startswith(b"\x89PNG")


def test_markdown_on_stdout_leaves_plots_out_unless_asked() -> None:
    plain = report(str(GOLDEN))
    assert plain.exit_code == 0 and "data:image" not in plain.stdout
    assert "--images embed" in plain.stderr
    assert "data:image/png;base64," in report(str(GOLDEN), "--images", "embed").stdout
    refused = report(str(GOLDEN), "--images", "files")
    assert refused.exit_code == 2 and "--out" in refused.stderr and refused.stdout == ""


STRATEGIES_RUN = (
    Path(__file__).parent.parent
    / "results"
    / "reference"
    / "cpu-gloo-w4-strategies"
    / "20261121-060313-collectives"
)


def _section(text: str, heading: str) -> str:
    """The markdown under `heading` up to the next heading of the same level."""
    marks = heading.split(" ", 1)[0]
    return text.split(heading + "\n", 1)[1].split(f"\n{marks} ", 1)[0]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_strategies_fastest_per_size_names_the_fastest_and_its_margin() -> None:
    """On a real 4-rank gloo strategies run: per size the fastest is the strategy with the
    smallest median, and the margin is the runner-up's time over it."""
    text = report(str(STRATEGIES_RUN), "--images", "none").stdout
    section = _section(text, "### Fastest per size: all_reduce float32 op=sum 4 ranks")
    lines = [x for x in section.splitlines() if x.startswith("| ")]
    assert _cells(lines[0]) == [
        "size", "direct", "red+bcast", "rs+ag", "ring", "ring_naive", "fastest", "margin"
    ]  # fmt: skip
    # times right-aligned, the fastest's name (words) left-aligned
    assert "|---|---:|---:|---:|---:|---:|---|---:|" in section
    names = ["direct", "reduce_broadcast", "reduce_scatter_all_gather", "ring", "ring_naive"]
    rows = [_cells(x) for x in lines[1:]]
    assert [r[0] for r in rows] == [format_size(1024 << k) for k in range(13)]  # 1K..4M
    for row in rows:
        ms = [float(c.split()[0]) for c in row[1:6]]  # all in ms on this run
        assert row[1].endswith("(1.00x)")  # direct against itself
        fastest, runner = sorted(range(5), key=lambda i: ms[i])[:2]
        name, mark = row[6].split()
        assert name == names[fastest] and mark in ("*", "~")
        assert row[7] == f"{ms[runner] / ms[fastest]:.2f}x vs {names[runner]}"


def test_strategies_cost_model_names_its_winner_and_why() -> None:
    from commbench.results.runs import load_run
    from commbench.strategies.model import fit, predict_one, winner

    text = report(str(STRATEGIES_RUN), "--images", "none").stdout
    section = _section(text, "### Cost model: all_reduce float32 op=sum 4 ranks")
    run = load_run(STRATEGIES_RUN)
    params = fit(run.rows, "gloo").params
    assert f"alpha {params.alpha_us:.2f} us per step" in section and "gloo algorithms" in section
    lines = [x for x in section.splitlines() if x.startswith("| ")]
    assert _cells(lines[0]) == ["size", "model's winner", "predicted", "measured", "why (model)"]
    names = ["direct", "reduce_broadcast", "reduce_scatter_all_gather", "ring", "ring_naive"]
    for line in lines[1:]:
        row = _cells(line)
        size = next(1024 << k for k in range(13) if format_size(1024 << k) == row[0])
        assert row[1] == winner(predict_one(s, 4, size, params) for s in names)
        assert "steps" in row[4] or "xS" in row[4]  # the term that decides it
    assert "- ring_naive: the whole S on each of n-1 steps" in section


def test_summary_is_tables_with_the_peak_and_its_size() -> None:
    from commbench.results.runs import load_run
    from commbench.results.summary import summarise

    text = report(str(STRATEGIES_RUN), "--images", "none").stdout
    summary = _section(text, "## Summary")
    assert "```" not in summary and "| rank | host | device | model |" in summary
    assert "| 3 | vm | cpu | cpu |" in summary
    plain = next(s for s in summarise(load_run(STRATEGIES_RUN).rows).series if not s.strategy)
    assert plain.peak_busbw_gbps is not None and plain.peak_size_bytes is not None
    row = _cells(next(x for x in summary.splitlines() if x.startswith("| all_reduce float32")))
    assert float(row[1]) == round(plain.peak_busbw_gbps, 2)
    assert row[2] == format_size(plain.peak_size_bytes)


def test_p2p_heatmap_follows_the_copies_tables() -> None:
    blocks = build_report(RUNS / "p2p-v1", Images.embed)
    texts = [b.text for b in blocks if isinstance(b, Heading)]
    assert "Strategies" not in texts and "Plots" not in texts
    at = next(i for i, b in enumerate(blocks) if isinstance(b, Image))
    assert isinstance(blocks[at - 1], Table)
    heading = blocks[at - 2]
    assert isinstance(heading, Heading) and heading.text.startswith("p2p ")
    # the last p2p table: no other p2p table after the heatmap
    later = [b.text for b in blocks[at:] if isinstance(b, Heading)]
    assert not any(t.startswith("p2p ") for t in later)


def test_suite_plot_files_are_named_after_their_entry(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    # all_reduce alone in each: one figure name (all_reduce) in both entries is the case
    one_op_copy(GOLDEN, suite / "r1")
    one_op_copy(RUNS / "cpu-gloo-a", suite / "r2")
    done = RunStatus.COMPLETE
    entries = [
        Entry(name="gpu", section="collectives", path="r1", status=done),
        Entry(name="cpu", section="collectives", path="r2", status=done),
    ]
    SuiteDir(suite).write_record(SuiteRecord(name="demo", status=done, entries=entries))
    out = tmp_path / "out" / "suite.md"
    result = report(str(suite), "-o", str(out))
    assert result.exit_code == 0, result.output
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", out.read_text())
    assert "suite_files/gpu-all_reduce.png" in links and "suite_files/cpu-all_reduce.png" in links
    assert len(links) == len(set(links)) == 3  # golden: all_reduce + strategies; cpu: all_reduce
    assert all((out.parent / link).read_bytes().startswith(b"\x89PNG") for link in links)
