"""The blocks a report is made of: headings, paragraphs, tables, lists, images.

A section of a report is a list of these, and nothing else: the writers (`writers`) turn the
same list into markdown or HTML, so the markdown a CI job posts and the HTML attached to a
ticket always hold the same content. Every text of a block is plain text, shown as it is:
much of it comes from run.json, which anyone may have written, so no block carries markup
(a bold paragraph says so with `bold`), and each writer escapes all of it for its format.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    bold: bool = False


@dataclass(frozen=True, slots=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True, slots=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric: bool = True
    """Right-align every column but the first (and those in `words`)."""
    words: tuple[int, ...] = ()
    """Columns of words in a numeric table: left-aligned."""

    def right(self, column: int) -> bool:
        return self.numeric and column > 0 and column not in self.words


@dataclass(frozen=True, slots=True)
class Image:
    alt: str
    png: bytes
    name: str = "figure"
    """File stem when the image is written beside the document (`--images files`)."""


@dataclass(frozen=True, slots=True)
class Pre:
    """Preformatted text: a fixed-width table from another command's renderer, as printed."""

    text: str


@dataclass(frozen=True, slots=True)
class Contents:
    """The contents list; filled in by the writer from the document's headings."""

    levels: tuple[int, ...] = (2, 3)


Block = Heading | Para | Bullets | Table | Image | Pre | Contents
