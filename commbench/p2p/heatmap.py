"""The `--matrix` heatmap: GB/s per (src, dst) pair, drawn from the stored rows (Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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


def write_heatmap(rows: Sequence[ResultRow], n: int, path: Path) -> None:
    from commbench.drawing import pyplot

    plt = pyplot()

    values, mode = matrix_values(rows, n)
    links = {(c.src, c.dst): c.link for _, c in copies(rows) if c.copy == "p2p"}
    grid = [[float("nan") if v is None else v for v in line] for line in values]
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * n, 0.8 + 0.8 * n))
    image = ax.imshow(grid, cmap="viridis")
    fig.colorbar(image, ax=ax, label="GB/s")
    ax.set_xticks(range(n), [f"cuda:{i}" for i in range(n)])
    ax.set_yticks(range(n), [f"cuda:{i}" for i in range(n)])
    ax.set_xlabel("destination")
    ax.set_ylabel("source")
    ax.set_title(f"p2p copy bandwidth ({mode})")
    top = max((v for line in values for v in line if v is not None), default=0.0)
    for i in range(n):
        for j in range(n):
            v = values[i][j]
            if v is None:
                continue
            color = "black" if v > 0.6 * top else "white"
            label = links.get((i, j), "")
            ax.text(j, i, f"{v:.0f}\n{label}", ha="center", va="center", fontsize=8, color=color)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
