"""The rows of a p2p run directory as plots, reports and the gate read them.

Collectives runs and nccl-tests imports are `ResultRow`s already. A p2p run
(`commbench p2p`, `kind: "p2p"`) stores `P2PRow`s; each becomes a ResultRow with op `p2p`
and the copy named in `strategy` (`0->1 p2p uni sequential`), its bandwidth as busbw and its
samples in microseconds, so two p2p runs compare point by point like any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commbench.fields import (
    Conv,
    Fields,
    boolean,
    integer_in,
    list_of,
    number_in,
    string,
)
from commbench.files import shown
from commbench.results.schema import MAX_COUNT, MAX_GBPS, MAX_SIZE_BYTES, ResultRow
from commbench.results.store import load_rows

P2P_KIND = "p2p"
P2P_OP = "p2p"

_ms = number_in(0, 1e12)
_gbps = number_in(0, MAX_GBPS)
_count = integer_in(0, MAX_COUNT)
# A p2p results.json row: the fields `p2p_result_row` and the p2p heatmap read, with their
# types; checked once when the file is read (the row's own dataclass is `P2PRow`).
_P2P_FIELDS: dict[str, Conv[Any]] = {
    "step": _count,
    "test": string,
    "mode": string,
    "direction": string,
    "copy": string,
    "src": integer_in(0, 1 << 16),
    "dst": integer_in(0, 1 << 16),
    "pair": string,
    "size_bytes": integer_in(0, MAX_SIZE_BYTES),
    "dtype": string,
    "time_ms": _ms,
    "bw_gbps": _gbps,
    "peak_gbps": _gbps,
    "ceiling_gbps": _gbps,
    "expected_gbps": _gbps,
    "efficiency": number_in(0, 1e9),
    "link": string,
    "nvlinks": _count,
    "p2p": boolean,
    "path": string,
    "suspicious": boolean,
    "diagnosis": string,
    "check": string,
    "min_ms": _ms,
    "q1_ms": _ms,
    "q3_ms": _ms,
    "p95_ms": _ms,
    "max_ms": _ms,
    "mean_ms": _ms,
    "stddev_ms": _ms,
    "cv": number_in(0, 1e12),
    "n": _count,
    "outliers": _count,
    "warmup": _count,
    "samples_ms": list_of(_ms),
}


def raw_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a p2p run's results.json (`path`) as stored (p2p rows carry fields
    ResultRow does not), each checked against the p2p row's field types (null stands for no
    value, as the writer puts it)."""
    rows = load_rows(path) or []
    for i, raw in enumerate(rows):
        f = Fields(raw, f"{shown(path)}: rows[{i}]")
        for key, conv in _P2P_FIELDS.items():
            f.opt(key, conv)
    return rows


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
