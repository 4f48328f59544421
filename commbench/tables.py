"""Plain-text and Markdown tables: the one layout every command's tables share.

Numbers read best right-aligned and words left-aligned, so a table names its word columns
(`left`); everything else is right-aligned. Markdown cells escape `|`, which would otherwise
end the cell.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


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
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"

    rule = "|" + "|".join("---" if i in left else "---:" for i in range(len(headers))) + "|"
    return [line(headers), rule, *(line(row) for row in cells)]
