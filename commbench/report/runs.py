"""Load any run directory commbench writes, as the rows plots, reports and the gate read.

Every run kind stores `ResultRow`s: a p2p copy's has op `p2p`, the copy named in `strategy`
(`0->1 p2p uni sequential`), its bandwidth as busbw and its samples in microseconds, so two
p2p runs compare point by point like any other (version-1 p2p rows are migrated on load).
"""

from __future__ import annotations

from pathlib import Path

from commbench.results.store import (
    RUN_FILE,
    Run,
    load_meta,
    result_rows,
    run_dir_of,
)

P2P_KIND = "p2p"


def load_any(path: Path) -> Run:
    """A run directory of any kind (or its run.json). Raises UserError naming what is wrong."""
    run_dir = run_dir_of(path)
    meta = load_meta(run_dir / RUN_FILE)
    context = meta.get("context") or {}
    # what a version-1 p2p row, which did not store it, gets as its world size
    world = int(context.get("device_count") or len(context.get("device_names") or []) or 1)
    rows = result_rows(run_dir, kind=meta.get("kind"), world_size=world)
    return Run(path=run_dir, meta=meta, rows=rows)
