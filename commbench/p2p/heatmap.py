"""The `--matrix` heatmap: GB/s per (src, dst) pair, from the stored rows (drawn by
`commbench.heatmap`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from commbench.heatmap import Heatmap, value_text
from commbench.results.schema import P2PCopy, ResultRow


def copies(rows: Sequence[ResultRow]) -> list[tuple[ResultRow, P2PCopy]]:
    """The p2p rows among `rows`, each with its copy."""
    return [(r, r.p2p) for r in rows if r.p2p is not None]


def matrix_values(rows: Sequence[ResultRow], n: int) -> tuple[list[list[float | None]], str]:
    """GB/s per pair at the largest size: each link alone (sequential) where measured, else
    the concurrent figure; and which of the two it is."""
    pick = [
        (r, c)
        for r, c in copies(rows)
        if c.test == "bandwidth" and c.copy == "p2p" and c.direction == "uni" and r.busbw_gbps
    ]
    mode = "sequential" if any(c.mode == "sequential" for _, c in pick) else "concurrent"
    values: list[list[float | None]] = [[None] * n for _ in range(n)]
    sizes: dict[tuple[int, int], int] = {}
    for r, c in pick:
        if c.mode != mode or c.src is None or c.dst is None:
            continue
        key = (c.src, c.dst)
        if r.size_bytes >= sizes.get(key, -1):
            sizes[key] = r.size_bytes
            values[c.src][c.dst] = r.busbw_gbps
    return values, mode


def matrix_heatmap(rows: Sequence[ResultRow], n: int) -> Heatmap:
    """The `--matrix` figure: GB/s per (src, dst) pair at the largest size, each cell with
    its value and the link it crossed."""
    values, mode = matrix_values(rows, n)
    links = {(c.src, c.dst): c.link for _, c in copies(rows) if c.copy == "p2p"}
    labels = [f"cuda:{i}" for i in range(n)]
    return Heatmap.square(
        values=values,
        labels=labels,
        title=f"p2p copy bandwidth ({mode})",
        unit="GB/s",
        row_axis="source",
        col_axis="destination",
        annotations=value_text(
            values, [[links.get((i, j), "") for j in range(n)] for i in range(n)]
        ),
    )


def write_heatmap(rows: Sequence[ResultRow], n: int, path: Path) -> None:
    from commbench.heatmap import write_heatmap as write

    write(matrix_heatmap(rows, n), path)
