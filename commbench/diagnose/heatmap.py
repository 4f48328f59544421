"""The pair bandwidths of a diagnosis as heatmaps: node pairs, and GPU pairs inside nodes
(drawn by `commbench.heatmap`)."""

from __future__ import annotations

import statistics
from pathlib import Path

from commbench.diagnose.journal import GPU_PAIRS
from commbench.diagnose.stages import Layout
from commbench.heatmap import Heatmap, write_heatmap


def pair_heatmap(stage: str, pairs: dict[tuple[int, int], float], layout: Layout) -> Heatmap:
    """One stage's pair tests as a symmetric matrix of its units (nodes, or a node's GPUs),
    each pair's median bus bandwidth in both of its cells, coloured from 0 and written with
    its share of the median pair: the verdict weighs a pair against its peers, and a gap of a
    few percent must not look like the two ends of the colour scale."""
    units = sorted({u for pair in pairs for u in pair})
    index = {u: i for i, u in enumerate(units)}
    matrix: list[list[float | None]] = [[None] * len(units) for _ in units]
    texts = [[""] * len(units) for _ in units]
    middle = statistics.median(pairs.values()) if pairs else 0.0
    for (a, b), value in pairs.items():
        matrix[index[a]][index[b]] = matrix[index[b]][index[a]] = value
        share = f"\n{value / middle:.0%}" if middle > 0 else ""
        texts[index[a]][index[b]] = texts[index[b]][index[a]] = f"{value:.3g}{share}"
    g = layout.gpus_per_node or 1
    labels = [
        f"{layout.hosts[u // g]}:{u % g}" if stage == GPU_PAIRS else layout.hosts[u] for u in units
    ]
    return Heatmap.square(
        values=matrix,
        labels=labels,
        title=f"{stage}: all_reduce bus bandwidth per pair (GB/s, % of the median pair)",
        unit="GB/s",
        annotations=texts,
    )


def write_heatmaps(
    run_dir: Path, pair_gbps: dict[str, dict[tuple[int, int], float]], layout: Layout
) -> list[str]:
    """One PNG per stage with pair tests (RUN_DIR/heatmap-<stage>.png); the names written."""
    written = []
    for stage, pairs in pair_gbps.items():
        name = f"heatmap-{stage}.png"
        write_heatmap(pair_heatmap(stage, pairs, layout), run_dir / name)
        written.append(name)
    return written
