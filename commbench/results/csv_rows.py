"""results.csv: the flat columns of every run kind's rows (`csv_columns`) and a row as
them (`csv_record`): the stats beside the other fields, a p2p copy's in milliseconds."""

from __future__ import annotations

from typing import Any

from commbench.results.schema import ROW_POINT, TOP_NAMES, ResultRow
from commbench.stats import TIMES

CSV_COLUMNS = [
    *ROW_POINT,
    "count",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "check",
    "min_us",
    "q1_us",
    "q3_us",
    "p95_us",
    "max_us",
    "mean_us",
    "stddev_us",
    "cv",
    "n",
    "outliers",
    "warmup",
    "in_place",
    "requested_bytes",
    "note",
]

# A p2p run's results.csv: the copy first, then its verdict, then the stats in milliseconds.
P2P_CSV_COLUMNS = [
    "step",
    "test",
    "mode",
    "direction",
    "copy",
    "src",
    "dst",
    "pair",
    "size_bytes",
    "dtype",
    "time_ms",
    "bw_gbps",
    "peak_gbps",
    "ceiling_gbps",
    "expected_gbps",
    "efficiency",
    "link",
    "nvlinks",
    "p2p",
    "path",
    "suspicious",
    "check",
    "diagnosis",
    "min_ms",
    "q1_ms",
    "q3_ms",
    "p95_ms",
    "max_ms",
    "mean_ms",
    "stddev_ms",
    "cv",
    "n",
    "outliers",
    "warmup",
]


REPLAY_CSV_COLUMNS = [*CSV_COLUMNS, "calls"]
"""A replay's results.csv: the collectives columns, then the recorded calls of each row."""
SKEW_CSV_COLUMNS = ["skew", "skew_ratio"]
"""Added after the others where a row names its skew (all_to_allv)."""
ISSUE_CSV_COLUMNS = ["issue_ops_per_s"]
"""Added last where a row has its host's issue rate (`ResultRow.issue_ops_per_s`): every
row commbench measures now, none it stored before or imported."""


def csv_columns(rows: list[ResultRow], *, p2p: bool = False) -> list[str]:
    """The results.csv header of these rows: a p2p run's (also when it has no row yet), a
    replay's when any row counts recorded calls, with the skew's columns when any row names
    one or has uneven ranks (a replay's all_to_allv), and the host's issue rate last when any
    row has it."""
    if p2p or any(r.p2p is not None for r in rows):
        return P2P_CSV_COLUMNS
    columns = REPLAY_CSV_COLUMNS if any(r.calls is not None for r in rows) else CSV_COLUMNS
    skewed = any(r.skew or r.skew_ratio is not None for r in rows)
    issued = any(r.issue_ops_per_s is not None for r in rows)
    return [
        *columns,
        *(SKEW_CSV_COLUMNS if skewed else []),
        *(ISSUE_CSV_COLUMNS if issued else []),
    ]


def csv_record(row: ResultRow) -> dict[str, Any]:
    """The row as results.csv's flat columns: the stats beside the other fields, a p2p copy's
    in milliseconds under the names its CSV has always had."""
    s = row.stats
    if row.p2p is None:
        return {
            **{name: getattr(row, name) for name in TOP_NAMES},
            **{f"{name}_us": getattr(s, name) for name in TIMES if name != "median"},
            "time_us": s.median,
            "cv": s.cv,
            "n": s.n,
            "outliers": s.outliers,
            "calls": row.calls,
            "skew": row.skew,
            "skew_ratio": row.skew_ratio,
            "issue_ops_per_s": row.issue_ops_per_s,
        }
    copy = row.p2p.to_dict()
    copy["p2p"] = copy.pop("peer_access")
    # divided, not multiplied by 1e-3: a float32 time from CUDA survives ms -> us -> ms exactly
    ms = {name: getattr(s, name) / 1000 for name in TIMES}
    return {
        **copy,
        "size_bytes": row.size_bytes,
        "dtype": row.dtype,
        "time_ms": ms["median"],
        "bw_gbps": row.busbw_gbps,
        "check": row.check,
        **{f"{name}_ms": ms[name] for name in TIMES if name != "median"},
        "cv": s.cv,
        "n": s.n,
        "outliers": s.outliers,
        "warmup": row.warmup,
    }
