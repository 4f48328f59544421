"""Every output format of every command, in one registry: what each format can write.

A command prints one kind of value (`Writes`): a table document (a run's rows, strategies, the
model, p2p, the gate, a history), diagnose's verdicts, topo's snapshot, a report page, or an
export for another tool. A format is one `OutputFormat` entry of `FORMATS` naming its writer of
each kind it can write; every command's `--format` choices (`choices`), its help
(`help_text`) and the docs' synopses (`synopsis`) are read off the registry, so adding a
format is one entry here and one writer, and a command gains it exactly where the entry says
it can write what the command prints.

Light at import (`--help` reads it): a writer is named `"module:function"` and imported when
it writes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Writes(str, Enum):
    """What a command prints: each kind is one type of value a writer takes."""

    TABLES = "tables"
    """A `tables.Document` (`Writer(doc) -> str`): a run's rows, strategies, the model, p2p,
    the regression gate, a history."""
    DIAGNOSIS = "diagnosis"
    """diagnose's verdicts (`Writer(diagnose.verdict.Diagnosis) -> str`)."""
    TOPOLOGY = "topology"
    """topo's snapshot (`Writer(topology.model.TopologySnapshot) -> str`)."""
    REPORT = "report"
    """A report page (`Writer(blocks, images, folder) -> report.writers.Rendered`)."""
    EXPORT = "export"
    """A run's metrics or file for another tool (`Writer(report.export.ExportSource) -> str`)."""


WriterRef = str | Callable[..., Any]
"""A writer: `"module:function"`, imported when it writes, or the function itself."""


@dataclass(frozen=True, slots=True)
class Writer:
    """One format's writer of one kind, and what `--format`'s help says of the format there."""

    write: WriterRef
    says: str = ""
    """In parentheses after the format's name in the help (`table (readable)`); none: the
    name alone."""

    def function(self) -> Callable[..., Any]:
        if not isinstance(self.write, str):
            return self.write
        module, name = self.write.split(":")
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """One `--format` value: its writers, and what it is to the commands that print it."""

    name: str
    writers: dict[Writes, Writer] = field(default_factory=dict)
    """What it can write: a command prints it only when its kind is here."""
    human: bool = False
    """Read by people: titles, summaries and notes go with the table on stdout (a machine
    format's stdout holds the rows alone, to stay parseable)."""
    markdown: bool = False
    """Markdown: what goes with the table is written as markdown too."""
    no_gate: str | None = None
    """An export with no place for the regression gate (`export --baseline` is refused), named
    as the refusal says it; None: it holds the gate's metrics."""
    one_op: bool = False
    """An export that holds one op's results, which `export --op` chooses."""


FORMATS: dict[str, OutputFormat] = {
    f.name: f
    for f in (
        OutputFormat(
            "table",
            {
                Writes.TABLES: Writer("commbench.tables:text_document"),
                Writes.DIAGNOSIS: Writer("commbench.diagnose.render:table"),
                Writes.TOPOLOGY: Writer("commbench.topology.render:render", "readable"),
            },
            human=True,
        ),
        OutputFormat("csv", {Writes.TABLES: Writer("commbench.tables:csv_document")}),
        OutputFormat(
            "json",
            {
                Writes.TABLES: Writer("commbench.tables:json_document"),
                Writes.DIAGNOSIS: Writer("commbench.diagnose.render:json_text"),
                Writes.TOPOLOGY: Writer("commbench.topology.render:snapshot_json", "the snapshot"),
            },
        ),
        OutputFormat(
            "md",
            {
                Writes.TABLES: Writer("commbench.tables:markdown_document"),
                Writes.DIAGNOSIS: Writer("commbench.diagnose.render:markdown"),
                Writes.REPORT: Writer("commbench.report.writers:to_markdown"),
            },
            human=True,
            markdown=True,
        ),
        OutputFormat("junit", {Writes.DIAGNOSIS: Writer("commbench.diagnose.render:junit")}),
        OutputFormat("html", {Writes.REPORT: Writer("commbench.report.writers:to_html")}),
        OutputFormat(
            "openmetrics",
            {Writes.EXPORT: Writer("commbench.report.export:openmetrics", "text format 1.0.0")},
        ),
        OutputFormat(
            "prometheus",
            {Writes.EXPORT: Writer("commbench.report.export:prometheus", "text format 0.0.4")},
        ),
        OutputFormat(
            "nccl-tests-json",
            {
                Writes.EXPORT: Writer(
                    "commbench.report.export:nccl_tests_json", "nccl-tests' -J file, version 3"
                )
            },
            no_gate="nccl-tests' JSON",
            one_op=True,
        ),
    )
}
"""The registry: the one place a format is added. The order is each command's order of
choices (its first choice is the default where the command takes no other)."""


def names(what: Writes) -> list[str]:
    """The formats that can write `what`, in the registry's order."""
    return [name for name, f in FORMATS.items() if what in f.writers]


def entry(fmt: str) -> OutputFormat:
    """The registry's entry of `fmt` (a name, or a member of a `choices` Enum)."""
    return FORMATS[getattr(fmt, "value", fmt)]


def writer(what: Writes, fmt: str) -> Callable[..., Any]:
    """`fmt`'s writer of `what`; a KeyError names a format that cannot write it."""
    return entry(fmt).writers[what].function()


def write(what: Writes, fmt: str, *value: Any) -> Any:
    """`value` (what a writer of `what` takes) in `fmt`."""
    return writer(what, fmt)(*value)


def help_text(what: Writes, lead: str = "", tail: str = "") -> str:
    """`--format`'s help for a command that prints `what`: `lead: ` then the formats that
    can write it, each with what it says (`a (says), b or c.`), then `tail`."""
    named = [
        f"{name} ({w.says})" if (w := FORMATS[name].writers[what]).says else name
        for name in names(what)
    ]
    listed = f"{', '.join(named[:-1])} or {named[-1]}" if len(named) > 1 else named[0]
    return (f"{lead}: {listed}." if lead else f"{listed}.") + (f" {tail}" if tail else "")


def synopsis(what: Writes) -> str:
    """How the docs' command synopses write the option: `[--format a|b|c]`."""
    return f"[--format {'|'.join(names(what))}]"


class Choice(str, Enum):
    """A format a command was given: a member of the Enum `choices` builds from the registry,
    with its entry's properties."""

    @property
    def human(self) -> bool:
        return entry(self.value).human

    @property
    def markdown(self) -> bool:
        return entry(self.value).markdown


def choices(what: Writes, name: str = "Format") -> type[Choice]:
    """The choices of a command that prints `what`, as the Enum its `--format` takes (members
    named as the values, `-` as `_`), read off the registry when the command is declared."""
    members = [(n.replace("-", "_"), n) for n in names(what)]
    return Choice(name, members, module=__name__)  # type: ignore[call-overload,no-any-return]


__all__ = [
    "FORMATS",
    "Choice",
    "OutputFormat",
    "Writer",
    "Writes",
    "choices",
    "entry",
    "help_text",
    "names",
    "synopsis",
    "write",
    "writer",
]
