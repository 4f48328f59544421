"""Plain-text and Markdown tables: the one layout every command's tables share.

Numbers read best right-aligned and words left-aligned, so a table names its word columns
(`left`); everything else is right-aligned. Markdown cells are escaped
(`escape.markdown_text`): a `|` would end the cell, a line break the table.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from commbench.escape import markdown_text


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
