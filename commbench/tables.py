"""Plain-text and Markdown tables: the one layout every command's tables share.

Numbers read best right-aligned and words left-aligned, so a table names its word columns
(`left`); everything else is right-aligned. Markdown cells are escaped
(`escape.markdown_text`): a `|` would end the cell, a line break the table.

A command's output is a `Document`: the blocks a person reads (titled tables and notes) and
the records a tool reads (CSV columns, a JSON value). A renderer returns one and never asks
which format it is for; each format is one writer of documents (`text_document`,
`markdown_document`, `csv_document`, `json_document`), which the format registry
(`commbench.formats.FORMATS`) names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from commbench.escape import csv_line, markdown_text, visible
from commbench.files import dump_json


def text_table(
    headers: Sequence[str], cells: Sequence[Sequence[str]], left: Collection[int] = ()
) -> list[str]:
    """Header and rows, columns padded to their widest cell, two spaces apart."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *cells, strict=True)]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i in left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    return [line(headers), *(line(row) for row in cells)]


def markdown_table(
    headers: Sequence[str], cells: Sequence[Sequence[str]], left: Collection[int] = ()
) -> list[str]:
    """A GitHub-flavoured Markdown table with the same alignment as `text_table`."""

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(markdown_text(str(c), where="cell") for c in row) + " |"

    rule = "|" + "|".join("---" if i in left else "---:" for i in range(len(headers))) + "|"
    return [line(headers), rule, *(line(row) for row in cells)]


MAX_DECIMALS = 9


def fixed(value: float | None, digits: int = 2) -> str:
    """A number in fixed notation, never in exponent form (`8e-05` reads as a typo where a
    bandwidth is expected): `digits` decimals, more for a small non-zero value so that it keeps
    two significant digits instead of rounding to 0.00. None and NaN are `-`."""
    if value is None or not math.isfinite(value):
        return "-"
    decimals = digits
    if value != 0 and abs(value) < 10 ** (1 - digits):
        # the decimals of the value as two significant digits round it (0.00999 -> 0.010, not
        # 0.0100: a third digit where its neighbours have two)
        shown = abs(float(f"{value:.2g}")) or abs(value)
        decimals = min(MAX_DECIMALS, max(digits, 1 - math.floor(math.log10(shown))))
    return f"{value:.{decimals}f}"


@dataclass(frozen=True, slots=True)
class TitledTable:
    """A table under its title, followed by a blank line."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    left: tuple[int, ...] = ()
    """The columns of words: left-aligned (the others are numbers, right-aligned)."""
    level: int = 3
    """The title's heading level in markdown (plain text marks every title `# `)."""


@dataclass(frozen=True, slots=True)
class Notes:
    """Lines that go with the tables: plain lines in text, list items in markdown."""

    lines: list[str]
    indent: int = 0
    """Nesting: two spaces per level before each line (a legend under its note)."""
    ours: bool = False
    """Text commbench wrote itself, with no user's string in it: markdown as it is (its `*`
    and `~` are the marks the tables show). Otherwise each line is escaped."""
    gap: bool = False
    """A blank line after the notes."""


Block = TitledTable | Notes


@dataclass(frozen=True, slots=True)
class Headline:
    """The one line that decides (the gate's verdict) and the lines it rests on. Each writer
    puts it where its reader looks: a markdown comment's heading, first (what a list of PR
    comments shows); a terminal's last lines, after the tables (what stays in view)."""

    text: str
    details: list[str]
    icon: str = ""
    """Before the text in markdown (an emoji a glance reads)."""
    level: int = 2
    """Its heading level in markdown."""


@dataclass(frozen=True, slots=True)
class Document:
    """What a renderer returns: the same output for every format, each writer taking its part."""

    blocks: list[Block] = field(default_factory=list)
    """For people (text, markdown)."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """For CSV: one line per record, under `columns`."""
    columns: list[str] = field(default_factory=list)
    """CSV's header; none: no CSV at all (an empty output, not an empty line)."""
    data: Any = None
    """For JSON: the value written."""
    empty: str = "\n"
    """What a people's format writes for a document without blocks."""
    headline: Headline | None = None
    parts: list[tuple[str, Document]] = field(default_factory=list)
    """Named documents in one output (a suite's comparisons, one per entry): for people,
    each under its name, instead of `blocks`."""


def _lines(
    doc: Document,
    table: Callable[[TitledTable], list[str]],
    note: Callable[[Notes, str], str],
    head: Callable[[Headline], list[str]],
    foot: Callable[[Headline], list[str]],
) -> str:
    """The people's formats' one layout: the headline's `head`, each table and its blank line,
    the notes, the headline's `foot`; what differs between them is the four callables."""
    out: list[str] = head(doc.headline) if doc.headline else []
    for block in doc.blocks:
        if isinstance(block, TitledTable):
            out += [*table(block), ""]
        else:
            pad = "  " * block.indent
            out += [pad + note(block, line) for line in block.lines]
            if block.gap:
                out.append("")
    out += foot(doc.headline) if doc.headline else []
    return "\n".join(out).rstrip() + "\n" if out else doc.empty


def text_document(doc: Document) -> str:
    """For a terminal: `# title`, the padded table, the notes as they are, the headline last.
    Every string keeps to its line: a line break or control in it is written as its escape
    (`escape.visible`), as a terminal or a log reader would otherwise break or act on it."""
    if doc.parts:
        return "\n".join(
            f"=== {visible(name)} ===\n{text_document(part)}" for name, part in doc.parts
        )

    def table(t: TitledTable) -> list[str]:
        rows = [[visible(str(c)) for c in row] for row in t.rows]
        headers = [visible(h) for h in t.headers]
        return [f"# {visible(t.title)}", *text_table(headers, rows, left=t.left)]

    return _lines(
        doc,
        table,
        lambda n, line: visible(line),
        lambda h: [],
        lambda h: [*map(visible, h.details), visible(h.text)],
    )


def _md_headline(h: Headline) -> list[str]:
    icon = f"{h.icon} " if h.icon else ""
    heading = f"{'#' * h.level} {icon}{markdown_text(h.text, where='cell')}"
    return [heading, "", *(f"- {markdown_text(line)}" for line in h.details), ""]


def markdown_document(doc: Document) -> str:
    """GitHub-flavoured markdown: the headline first, a heading per table, the notes as list
    items."""
    if doc.parts:
        return "\n".join(
            f"## {markdown_text(name, where='cell')}\n\n{markdown_document(part)}"
            for name, part in doc.parts
        )
    return _lines(
        doc,
        lambda t: [
            f"{'#' * t.level} {markdown_text(t.title, where='cell')}\n",
            *markdown_table(t.headers, t.rows, left=t.left),
        ],
        lambda n, line: "- " + (line if n.ours else markdown_text(line)),
        _md_headline,
        lambda h: [],
    )


def csv_document(doc: Document) -> str:
    """The records under their columns, the one CSV writer of every commbench file: each
    field through `escape.csv_field` (None and non-finite numbers an empty cell, as they are
    null in JSON; a field quoted where it holds a comma, a quote or a line break of any
    reader's); a missing key is an empty field, an unknown one dropped."""
    if not doc.columns:
        return ""
    return csv_line(doc.columns) + "".join(
        csv_line(r.get(c) for c in doc.columns) for r in doc.records
    )


def json_document(doc: Document) -> str:
    return dump_json(doc.data)
