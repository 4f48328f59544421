"""Issue 36, item 3: a table format is one writer and one registry line. Every renderer
returns a `tables.Document` and never asks which format it is for, so a format registered
here, in-process, writes every command's output (rows, strategies, the model, p2p, the gate)."""

from __future__ import annotations

from pathlib import Path

import pytest

import commbench.api
from commbench.compare import GateSettings, compare_runs
from commbench.p2p.render import render_expectations, render_rows
from commbench.report.comparison import render, render_many
from commbench.results.exporters import FORMATS, Format, Writer, export, write
from commbench.results.runs import load_run
from commbench.strategies.model import Params, predict
from commbench.strategies.report import render_comparison, render_predictions
from commbench.tables import Document, TitledTable
from tests.test_strategies_report import model_rows

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "runs" / "h100x8-golden"
P2P = FIXTURES / "runs" / "p2p-v1"
PUZZLE = FIXTURES / "p2p" / "snapshot_puzzle8.json"


def tsv(doc: Document) -> str:
    """A made-up format: every table tab-separated under its title, then the notes, the
    headline and the records; a suite's parts under their names."""
    lines: list[str] = []
    for name, part in doc.parts:
        lines += [f"[{name}]", tsv(part)]
    for block in doc.blocks:
        if isinstance(block, TitledTable):
            lines += [block.title, "\t".join(block.headers), *("\t".join(r) for r in block.rows)]
        else:
            lines += block.lines
    if doc.headline is not None:
        lines += [*doc.headline.details, doc.headline.text]
    lines += ["\t".join(str(r.get(c, "")) for c in doc.columns) for r in doc.records]
    return "\n".join(lines) + "\n"


@pytest.fixture
def tsv_format(monkeypatch: pytest.MonkeyPatch) -> str:
    """The new format: one entry of the registry, nothing else."""
    monkeypatch.setitem(FORMATS, "tsv", Writer(tsv, human=True))
    return "tsv"


def outputs(fmt: str) -> dict[str, str]:
    """Every renderer's output in `fmt`."""
    golden = load_run(GOLDEN)
    gate = compare_runs(golden, golden, GateSettings())
    params = Params(alpha_us=100.0, bw_gbps=1.0, backend="gloo")
    dry = commbench.api.run_p2p(dry_run=True, topology=str(PUZZLE), dst="1,2,4")
    return {
        "rows": export(golden.rows, fmt),
        "strategies": render_comparison(model_rows(), fmt),
        "model": render_predictions(predict(params, [4], [1024, 1 << 20]), params, fmt),
        "p2p dry run": render_expectations(dry.expectations, fmt),
        "p2p rows": render_rows(load_run(P2P).rows, fmt),
        "gate": render(gate, fmt),
        "suite gate": render_many([("a", gate), ("b", gate)], fmt),
    }


def test_a_new_format_is_one_registry_entry_and_writes_every_renderers_output(
    tsv_format: str,
) -> None:
    written = outputs(tsv_format)
    for what, text in written.items():
        assert text.strip(), what
        assert "\t" in text, what  # its tables, written by the new writer
    assert "busbw_GB/s" in written["rows"]
    assert "[a]" in written["suite gate"] and "[b]" in written["suite gate"]
    assert "PASS" in written["gate"]  # the headline, written by the new writer too


def test_every_format_writes_through_its_registry_entry() -> None:
    """The shipped formats take the same path: a renderer's output is the registry's writer
    of its document."""
    doc = Document([TitledTable("t", ["a", "b"], [["1", "2"]])], columns=["a"], data=[1])
    for fmt in Format:
        assert write(doc, fmt) == FORMATS[fmt].document(doc)
        assert write(doc, fmt.value) == FORMATS[fmt].document(doc)
