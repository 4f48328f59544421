"""Issue 36, item 3, and issue 44: a format is one entry of one registry
(`commbench.formats.FORMATS`) and one writer. Every renderer returns a `tables.Document` and
never asks which format it is for, so a format registered here, in-process, writes every
command's output (rows, strategies, the model, p2p, the gate); and every command whose
output it can write (`formats.Writes`) takes it as a `--format` choice, named in its help."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import commbench.api
from commbench import formats
from commbench.cli import _COMMANDS
from commbench.cli.reference import with_synopses
from commbench.compare import GateSettings, compare_runs
from commbench.formats import FORMATS, OutputFormat, Writer, Writes
from commbench.p2p.render import render_expectations, render_rows
from commbench.report.comparison import render, render_many
from commbench.results.exporters import Format, export, write
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
    monkeypatch.setitem(
        FORMATS, "tsv", OutputFormat("tsv", {Writes.TABLES: Writer(tsv)}, human=True)
    )
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
    assert [f.value for f in Format] == formats.names(Writes.TABLES)
    for fmt in Format:
        expected = FORMATS[fmt.value].writers[Writes.TABLES].function()(doc)
        assert write(doc, fmt) == expected
        assert write(doc, fmt.value) == expected


# -- every command's --format, from the registry ------------------------------------------------


def fresh_app() -> typer.Typer:
    """The commands declared again, as `commbench.cli` declares them at import: each reads the
    registry as it is now. Each command's module runs afresh, as a copy of its own (history
    declares its subcommands as its module runs), and `commbench.cli` is left as it was."""
    app = typer.Typer()
    for name in _COMMANDS:
        spec = importlib.util.find_spec(f"commbench.cli.{name}")
        assert spec is not None and spec.loader is not None
        copy = importlib.util.spec_from_file_location(f"_fresh_{name}", spec.origin)
        assert copy is not None and copy.loader is not None
        module = importlib.util.module_from_spec(copy)
        sys.modules[copy.name] = module  # its dataclasses look their module up
        try:
            copy.loader.exec_module(module)
        finally:
            del sys.modules[copy.name]
        module.register(app)
    return app


def format_options(app: typer.Typer) -> dict[str, Any]:
    """Every command's (and subcommand's) `--format` option, by its command line."""
    found: dict[str, Any] = {}

    def walk(command: Any, path: str) -> None:
        for sub_name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {sub_name}".strip())
        for param in getattr(command, "params", []):
            if param.name == "fmt":
                found[path] = param

    walk(typer.main.get_command(app), "")
    return found


def choices_of(param: Any) -> list[str]:
    """An option's choices: the values of the Enum it takes."""
    return [member.value for member in param.type_descriptor.annotation]


PRINTS = {
    "collectives": Writes.TABLES,
    "compare": Writes.TABLES,
    "model": Writes.TABLES,
    "p2p": Writes.TABLES,
    "run": Writes.TABLES,
    "history list": Writes.TABLES,
    "history show": Writes.TABLES,
    "history changes": Writes.TABLES,
    "diagnose": Writes.DIAGNOSIS,
    "topo": Writes.TOPOLOGY,
    "report": Writes.REPORT,
    "export": Writes.EXPORT,
}
"""What each command that takes `--format` prints: its choices are the formats that write it."""


def test_every_command_s_format_choices_and_help_come_from_the_registry() -> None:
    options = format_options(fresh_app())
    assert set(options) == set(PRINTS)
    for command, param in options.items():
        choices = formats.names(PRINTS[command])
        assert choices_of(param) == choices, command
        assert getattr(param.default, "value", param.default) == choices[0], command
        assert all(name in param.help for name in choices), command


def tsv_topology(snapshot: Any) -> str:
    return "\t".join(["host", str(snapshot.host.hostname)]) + "\n"


def tsv_diagnosis(diagnosis: Any) -> str:
    return "".join(f"{n.host}\t{n.verdict}\n" for n in diagnosis.nodes)


def test_a_new_format_reaches_every_command_that_prints_what_it_writes(
    monkeypatch: pytest.MonkeyPatch, tsv_format: str
) -> None:
    """tsv writes table documents: every command that prints them takes it; diagnose, topo,
    report and export print something else, and do not, until the entry says it writes theirs."""
    options = format_options(fresh_app())
    takes = {command for command, param in options.items() if "tsv" in choices_of(param)}
    assert takes == {c for c, what in PRINTS.items() if what is Writes.TABLES}
    assert "tsv" in options["compare"].help
    result = CliRunner().invoke(fresh_app(), ["compare", str(GOLDEN), str(GOLDEN), "-f", "tsv"])
    assert result.exit_code == 0, result.output
    assert "size\tbaseline\tnew\t" in result.stdout

    writers = {
        Writes.TABLES: Writer(tsv),
        Writes.TOPOLOGY: Writer(tsv_topology),
        Writes.DIAGNOSIS: Writer(tsv_diagnosis),
    }
    monkeypatch.setitem(FORMATS, "tsv", OutputFormat("tsv", writers, human=True))
    options = format_options(fresh_app())
    assert "tsv" in choices_of(options["topo"]) and "tsv" in choices_of(options["diagnose"])
    result = CliRunner().invoke(fresh_app(), ["topo", "--from", str(PUZZLE), "-f", "tsv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("host\t")


def test_the_docs_synopses_list_the_registry_s_formats() -> None:
    """Every `--format a|b|c` in a code block of docs/ is its command's choices, written by
    `make docs` (`reference.with_synopses`); a format registered in-process reaches them too."""
    docs = Path(__file__).parents[1] / "docs"
    for page in docs.glob("*.md"):
        text = page.read_text()
        assert with_synopses(text) == text, f"{page.name}: stale synopsis, run `make docs`"
    synopsis = (docs / "collectives.md").read_text()
    assert f"[--format {'|'.join(formats.names(Writes.TABLES))}]" in synopsis
    choices = {"collectives": [*formats.names(Writes.TABLES), "tsv"]}
    assert "[--format table|csv|json|md|tsv]" in with_synopses(synopsis, choices)
