"""Output formats (issue 36, item 3): `--format` is one shared option, and an export format
is one entry of one registry, whose entries also make `export --format`'s help."""

from __future__ import annotations

import typer

from commbench.cli import app
from commbench.formats import Writes, help_text, names
from commbench.report.options import ExportFormat


def test_every_export_format_has_one_registry_entry_and_its_help_comes_from_it() -> None:
    assert [f.value for f in ExportFormat] == names(Writes.EXPORT)
    assert help_text(Writes.EXPORT) == (
        "openmetrics (text format 1.0.0), prometheus (text format 0.0.4) or "
        "nccl-tests-json (nccl-tests' -J file, version 3)."
    )
    group = typer.main.get_command(app)
    export = group.commands["export"]  # type: ignore[attr-defined]
    (fmt,) = [p for p in export.params if p.name == "fmt"]
    assert fmt.help == help_text(Writes.EXPORT)


def test_every_format_option_is_spelled_the_same_way() -> None:
    """Every command that prints in several formats takes `--format`/`-f`, from one
    declaration (`commbench.flags.FORMAT`), each with its own choices."""
    group = typer.main.get_command(app)
    spelled = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in getattr(command, "params", []):
            if param.name == "fmt":
                spelled[name] = tuple(param.opts)
    assert set(spelled) >= {"collectives", "compare", "diagnose", "model", "p2p", "run", "topo"}
    assert set(spelled.values()) == {("--format", "-f")}
