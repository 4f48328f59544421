"""The one heatmap drawer: every pair matrix commbench draws goes through `draw_heatmap`.

Three figures are pair matrices: `p2p --matrix` (GB/s per GPU pair, p2p-matrix.png), a
diagnosis's pair tests (heatmap-<stage>.png) and the p2p figure of `plot` and `report`
(p2p.png, p2p.svg). Each caller builds a `Heatmap` (the matrix, its labels, its title and
unit, how it is coloured and what each cell says) from its own data, and this module alone
knows matplotlib: sizes, ticks, the colour bar and the text in the cells are decided once,
so the three figures read alike and a fix to one is a fix to all.

matplotlib is imported inside the functions (through `commbench.drawing`: headless, user
text drawn literally, no global state), so importing this module costs nothing.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DPI = 110
"""Dots per inch of a written heatmap (the report's figures use the same)."""
CELL_INCHES = 0.45
"""A cell without text: wide enough for a tick label of a few characters."""
ANNOTATED_CELL_INCHES = 0.8
"""A cell with text: room for a number and a short line under it."""


@dataclass(kw_only=True, slots=True)
class Heatmap:
    """A matrix to draw, with everything a reader needs to read it."""

    values: list[list[float | None]]
    """Rows by columns; None (or NaN) where nothing was measured: that cell stays blank."""
    row_labels: list[str]
    col_labels: list[str]
    title: str = ""
    unit: str = ""
    """The values' unit, beside the colour bar ("GB/s")."""
    row_axis: str = ""
    """What the rows are ("source"), beside their labels; "" for a symmetric matrix."""
    col_axis: str = ""
    colormap: str = "viridis"
    """matplotlib's name of the colour map."""
    light_above: float = 0.6
    """The colour rule of the cells' text: a cell above this share of the largest value is
    light on `colormap` (viridis runs dark to yellow), so its text is black; the others' is
    white."""
    annotations: list[list[str]] | None = None
    """The text in each cell ("" for none): its value, a link's name; None: no text."""
    zero_based: bool = True
    """The colour scale starts at 0, so a cell's colour is in proportion to its value: two
    links 10% apart look 10% apart, not like the two ends of the scale (as they do when it
    runs from the smallest value to the largest). False: smallest to largest."""

    @classmethod
    def square(cls, values: list[list[float | None]], labels: list[str], **rest: Any) -> Heatmap:
        """A matrix whose rows and columns are the same things (GPUs, hosts): labelled once."""
        return cls(values=values, row_labels=labels, col_labels=labels, **rest)

    def __post_init__(self) -> None:
        rows, cols = len(self.row_labels), len(self.col_labels)
        if len(self.values) != rows or any(len(line) != cols for line in self.values):
            raise ValueError(f"heatmap {self.title!r}: values are not {rows} x {cols}")
        if self.annotations is not None and (
            len(self.annotations) != rows or any(len(line) != cols for line in self.annotations)
        ):
            raise ValueError(f"heatmap {self.title!r}: annotations are not {rows} x {cols}")


def value_text(
    values: Sequence[Sequence[float | None]], below: Sequence[Sequence[str]] | None = None
) -> list[list[str]]:
    """Cell texts: each value as a whole number (GB/s of links run from tens to hundreds, where
    decimals are noise), with `below`'s line under it where it has one; "" for no value."""
    out = []
    for i, line in enumerate(values):
        texts = []
        for j, v in enumerate(line):
            if v is None or math.isnan(v):
                texts.append("")
                continue
            under = below[i][j] if below is not None else ""
            texts.append(f"{v:.0f}\n{under}" if under else f"{v:.0f}")
        out.append(texts)
    return out


def _measured(values: Sequence[Sequence[float | None]]) -> list[list[float]]:
    """The values with NaN where nothing was measured (matplotlib leaves those cells blank)."""
    return [[math.nan if v is None else v for v in line] for line in values]


def figure_size(heatmap: Heatmap) -> tuple[float, float]:
    """Inches: a cell per value (larger when it holds text), plus room for the labels, the
    title and the colour bar."""
    cell = ANNOTATED_CELL_INCHES if heatmap.annotations is not None else CELL_INCHES
    width = max(4.0, cell * len(heatmap.col_labels) + 2.2)
    height = max(3.5, cell * len(heatmap.row_labels) + 1.8)
    return width, height


def draw_heatmap(heatmap: Heatmap) -> Any:
    """A matplotlib Figure of the heatmap (made directly: nothing to close)."""
    from commbench.drawing import literal_text

    with literal_text():
        return _draw(heatmap)


def _draw(heatmap: Heatmap) -> Any:
    from commbench.drawing import new_figure

    width, height = figure_size(heatmap)
    fig = new_figure((width, height))
    ax = fig.subplots()
    grid = _measured(heatmap.values)
    top = max((v for line in grid for v in line if not math.isnan(v)), default=0.0)
    image = ax.imshow(
        grid,
        cmap=heatmap.colormap,
        vmin=0.0 if heatmap.zero_based and top > 0 else None,
        vmax=top if heatmap.zero_based and top > 0 else None,
    )
    annotated = heatmap.annotations is not None
    fontsize = 8 if annotated else 7
    cell = ANNOTATED_CELL_INCHES if annotated else CELL_INCHES
    # a label wider than its column (about 0.6 em per character) is turned upright
    longest = max((len(label) for label in heatmap.col_labels), default=0)
    upright = longest * fontsize * 0.6 / 72 > cell
    ax.set_xticks(
        range(len(heatmap.col_labels)),
        heatmap.col_labels,
        rotation=90 if upright else 0,
        fontsize=fontsize,
    )
    ax.set_yticks(range(len(heatmap.row_labels)), heatmap.row_labels, fontsize=fontsize)
    if heatmap.col_axis:
        ax.set_xlabel(heatmap.col_axis)
    if heatmap.row_axis:
        ax.set_ylabel(heatmap.row_axis)
    if heatmap.annotations is not None:
        for i, line in enumerate(grid):
            for j, v in enumerate(line):
                text = heatmap.annotations[i][j]
                if math.isnan(v) or not text:
                    continue
                color = "black" if v > heatmap.light_above * top else "white"
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color=color)
    fig.colorbar(image, ax=ax, label=heatmap.unit)
    if heatmap.title:
        ax.set_title(textwrap.fill(heatmap.title, int(width * 11)), fontsize=10)
    fig.tight_layout()
    return fig


def write_heatmap(heatmap: Heatmap, path: Path, *, dpi: int = DPI, fmt: str | None = None) -> Path:
    """Draw the heatmap into `path` (its format from its suffix unless `fmt` names one)."""
    draw_heatmap(heatmap).savefig(path, format=fmt, dpi=dpi)
    return path
