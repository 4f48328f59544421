"""The history's reads as documents (`tables.Document`): a table for people, records for CSV,
a JSON value for tools, in every `--format` (`results.exporters.write`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from commbench.fields import pick
from commbench.history.store import FoundChange, Series, StoredRun, Value
from commbench.tables import Document, Notes, TitledTable, fixed

RUN_COLUMNS = ["id", "run_id", "at", "label", "kind", "machine", "points", "path"]
VALUE_COLUMNS = ["run_id", "at", "label", "median_us", "busbw_gbps", "n", "q1_us", "q3_us"]
POINT_COLUMNS = ["series_id", "point", "median_us", "busbw_gbps", "n", "q1_us", "q3_us"]
CHANGE_COLUMNS = [
    "series_id",
    "series",
    "run_id",
    "at",
    "before_run_id",
    "ratio",
    "ratio_low",
    "ratio_high",
    "p_value",
    "changed",
]


def _time(at: str) -> str:
    """`2026-11-21 05:50 UTC`: a person reads minutes."""
    return f"{at[:10]} {at[11:16]} UTC" if len(at) >= 16 else at


def runs_document(runs: Sequence[StoredRun]) -> Document:
    records = [pick(r, *_LISTED) for r in runs]
    rows = [
        [r.id, r.run_id, _time(r.at), r.label or "-", r.kind, r.machine, str(r.points)]
        for r in runs
    ]
    headers = ["id", "run_id", "time", "label", "kind", "machine", "points"]
    return Document(
        [TitledTable(f"{len(runs)} runs", headers, rows, left=(0, 1, 2, 3, 4, 5))],
        records=[{k: v for k, v in r.items() if k in RUN_COLUMNS} for r in records],
        columns=RUN_COLUMNS,
        data=records,
    )


def _value_record(v: Value) -> dict[str, Any]:
    return pick(v, "run_id", "run", "at", "label", "median_us", "busbw_gbps", "n", "q1_us", "q3_us")


def series_document(
    series: Series, values: Sequence[Value], changes: Sequence[FoundChange]
) -> Document:
    """A series' values over its runs, each change point marked at its first run."""
    starts = {c.index: c for c in changes}
    rows = []
    for i, v in enumerate(values):
        mark = f"change x{fixed(starts[i].ratio)}" if i in starts else ""
        rows.append(
            [
                v.run_id,
                _time(v.at),
                v.label or "-",
                fixed(v.median_us),
                fixed(v.busbw_gbps),
                str(v.n),
                mark,
            ]
        )
    headers = ["run_id", "time", "label", "time_us", "busbw_GB/s", "iters", "change"]
    notes = [f"series {series.id}: {len(values)} runs, {len(changes)} change points"]
    notes += [_change_line(c) for c in changes]
    return Document(
        [
            TitledTable(series.label, headers, rows, left=(0, 1, 2, 6)),
            Notes(notes),
        ],
        records=[_value_record(v) for v in values],
        columns=VALUE_COLUMNS,
        data={
            "series": _series_record(series),
            "values": [_value_record(v) for v in values],
            "changes": [c.to_dict() for c in changes],
        },
    )


def _series_record(s: Series) -> dict[str, Any]:
    return pick(
        s,
        "id",
        "label",
        "machine",
        "op",
        "strategy",
        "dtype",
        "reduce_op",
        "world_size",
        "size_bytes",
        "in_place",
        "skew",
        "runs",
    )


def run_document(run: StoredRun, points: Sequence[tuple[Series, Value]]) -> Document:
    """A stored run's points, each with its series id (`history show SERIES`)."""
    rows = [
        [
            s.id,
            s.point,
            fixed(v.median_us),
            fixed(v.busbw_gbps),
            str(v.n),
        ]
        for s, v in points
    ]
    records = [
        {
            "series_id": s.id,
            "point": s.point,
            "median_us": v.median_us,
            "busbw_gbps": v.busbw_gbps,
            "n": v.n,
            "q1_us": v.q1_us,
            "q3_us": v.q3_us,
        }
        for s, v in points
    ]
    about = [
        f"run {run.id}: {run.run_id}, {_time(run.at)}, {run.kind} on {run.machine}",
        f"label: {run.label or '-'}" + (f" (from {run.label_from})" if run.label_from else ""),
        f"path: {run.path}",
        "software: " + (", ".join(f"{k} {v}" for k, v in sorted(run.software.items())) or "-"),
    ]
    if run.env:
        about.append("env: " + ", ".join(f"{k}={v}" for k, v in sorted(run.env.items())))
    headers = ["series", "point", "time_us", "busbw_GB/s", "iters"]
    return Document(
        [Notes(about, gap=True), TitledTable(run.run_id, headers, rows, left=(0, 1))],
        records=records,
        columns=POINT_COLUMNS,
        data={"run": _run_record(run), "points": records},
    )


_LISTED = (
    "id",
    "run_id",
    "at",
    "label",
    "label_from",
    "kind",
    "machine",
    "points",
    "path",
    "software",
    "env",
)
"""A stored run's fields in `history list --format json`; `history show RUN` adds its hosts."""


def _run_record(r: StoredRun) -> dict[str, Any]:
    return {**pick(r, *_LISTED[:7]), "hosts": r.hosts, **pick(r, *_LISTED[7:])}


def _changed_text(changed: dict[str, list[Any]]) -> str:
    return "; ".join(f"{k}: {plain(a)} -> {plain(b)}" for k, (a, b) in changed.items()) or "-"


def plain(value: Any) -> str:
    """A value of what changed, as a line shows it (a list as its items)."""
    if isinstance(value, list):
        return ",".join(map(str, value))
    return "-" if value is None else str(value)


def _change_line(c: FoundChange) -> str:
    what = "busbw" if c.series.busbw else "speed"
    return (
        f"{_time(c.at)} {c.run_id}: {what} x{fixed(c.ratio)} "
        f"[{fixed(c.ratio_low)}, {fixed(c.ratio_high)}] p={c.p_value:.1e}; "
        f"changed: {_changed_text(c.changed)}"
    )


def changes_document(changes: Sequence[FoundChange]) -> Document:
    """Every change point, oldest first: `--format json` is the array tools read."""
    rows = [
        [
            c.series.id,
            c.series.label,
            c.run_id,
            _time(c.at),
            f"x{fixed(c.ratio)}",
            f"{fixed(c.ratio_low)}-{fixed(c.ratio_high)}",
            f"{c.p_value:.1e}",
            _changed_text(c.changed),
        ]
        for c in changes
    ]
    headers = ["series", "point", "first run", "time", "ratio", "95% CI", "p", "changed"]
    records = [
        {**c.to_dict(), "series_id": c.series.id, "changed": _changed_text(c.changed)}
        for c in changes
    ]
    return Document(
        [TitledTable(f"{len(changes)} change points", headers, rows, left=(0, 1, 2, 3, 7))],
        records=records,
        columns=CHANGE_COLUMNS,
        data=[c.to_dict() for c in changes],
    )
