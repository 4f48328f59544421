"""Load any run directory commbench writes, as the rows plots, reports and the gate read.

Collectives runs and nccl-tests imports are `ResultRow`s already. A p2p run
(`commbench p2p`, `kind: "p2p"`) stores `P2PRow`s; each becomes a ResultRow with op `p2p`
and the copy named in `strategy` (`0->1 p2p uni sequential`), its bandwidth as busbw and its
samples in microseconds, so two p2p runs compare point by point like any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.results.schema import ResultRow
from commbench.results.store import (
    RESULTS_JSON,
    RUN_FILE,
    Run,
    load_json,
    load_run,
    recognise_status,
)

P2P_KIND = "p2p"
P2P_OP = "p2p"


def raw_rows(run_dir: Path) -> list[dict[str, Any]]:
    """results.json's rows as stored (p2p rows carry fields ResultRow does not)."""
    path = run_dir / RESULTS_JSON
    if not path.exists():
        return []
    rows = load_json(path).get("rows")
    if not isinstance(rows, list):
        raise UserError(f"{path}: 'rows' must be a list")
    return [r for r in rows if isinstance(r, dict)]


def _ms_to_us(value: Any) -> float:
    return float(value) * 1000 if isinstance(value, int | float) else float("nan")


def p2p_result_row(raw: dict[str, Any], world_size: int) -> ResultRow:
    """One stored P2PRow as a ResultRow: a copy is a point; its name goes in `strategy`."""
    name = " ".join(
        str(raw.get(k)) for k in ("pair", "copy", "direction", "mode") if raw.get(k) is not None
    )
    if raw.get("test") == "latency":
        name += " latency"
    bw = raw.get("bw_gbps")
    size = int(raw.get("size_bytes") or 0)
    cv = raw.get("cv")
    return ResultRow(
        op=P2P_OP,
        strategy=name,
        dtype=str(raw.get("dtype") or "uint8"),
        world_size=world_size,
        size_bytes=size,
        count=size,
        time_us=_ms_to_us(raw.get("time_ms")),
        algbw_gbps=bw,
        busbw_gbps=bw,
        check=str(raw.get("check") or "skipped"),
        min_us=_ms_to_us(raw.get("min_ms")),
        q1_us=_ms_to_us(raw.get("q1_ms")),
        q3_us=_ms_to_us(raw.get("q3_ms")),
        p95_us=_ms_to_us(raw.get("p95_ms")),
        max_us=_ms_to_us(raw.get("max_ms")),
        mean_us=_ms_to_us(raw.get("mean_ms")),
        stddev_us=_ms_to_us(raw.get("stddev_ms")),
        cv=float(cv) if isinstance(cv, int | float) else float("nan"),
        n=int(raw.get("n") or 0),
        outliers=int(raw.get("outliers") or 0),
        warmup=int(raw.get("warmup") or 0),
        requested_bytes=size,
        samples_us=[s * 1000 for s in raw.get("samples_ms") or [] if isinstance(s, int | float)],
    )


def load_any(path: Path) -> Run:
    """A run directory of any kind (or its run.json). Raises UserError naming what is wrong."""
    path = Path(path)
    run_dir = path.parent if path.is_file() else path
    meta_path = run_dir / RUN_FILE
    if not meta_path.exists() or load_json(meta_path).get("kind") != P2P_KIND:
        return load_run(path)
    meta = recognise_status(load_json(meta_path))
    raw_context = meta.get("context")
    context: dict[str, Any] = raw_context if isinstance(raw_context, dict) else {}
    world = int(context.get("device_count") or len(context.get("device_names") or []) or 1)
    rows = [p2p_result_row(raw, world) for raw in raw_rows(run_dir)]
    return Run(path=run_dir, meta=meta, rows=rows)
