"""The pair bandwidths of a diagnosis as heatmaps: node pairs, and GPU pairs inside nodes."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from commbench.diagnose.stages import GPU_PAIRS, Layout

if TYPE_CHECKING:
    from commbench.diagnose.run import Diagnosis


def write_heatmaps(diagnosis: Diagnosis, layout: Layout) -> list[str]:
    """One PNG per stage with pair tests (RUN_DIR/heatmap-<stage>.png); the names written."""
    from commbench.drawing import pyplot

    plt = pyplot()

    written = []
    for stage, pairs in diagnosis.pair_gbps.items():
        units = sorted({u for pair in pairs for u in pair})
        index = {u: i for i, u in enumerate(units)}
        matrix = [[math.nan] * len(units) for _ in units]
        for (a, b), value in pairs.items():
            matrix[index[a]][index[b]] = matrix[index[b]][index[a]] = value
        g = layout.gpus_per_node or 1
        labels = [
            f"{layout.hosts[u // g]}:{u % g}" if stage == GPU_PAIRS else layout.hosts[u]
            for u in units
        ]
        size = max(4.0, 0.45 * len(units) + 2)
        fig, ax = plt.subplots(figsize=(size, size * 0.85))
        image = ax.imshow(matrix, cmap="viridis")
        ax.set_xticks(range(len(units)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(units)), labels, fontsize=7)
        ax.set_title(f"{stage}: all_reduce bus bandwidth per pair (GB/s)")
        fig.colorbar(image, ax=ax)
        fig.tight_layout()
        name = f"heatmap-{stage}.png"
        fig.savefig(diagnosis.path / name, dpi=100)
        plt.close(fig)
        written.append(name)
    return written
