"""p2p output: measured rows and dry-run expectations, as documents every format writes.

Rows of one concurrent step form one table (they were timed together); sequential rows of a
size form one table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from commbench.p2p.expect import Expectation, StepExpectation
from commbench.p2p.heatmap import copies
from commbench.results.csv_rows import csv_columns, csv_record
from commbench.results.exporters import Format, write
from commbench.results.schema import P2PCopy, ResultRow
from commbench.tables import Block, Document, TitledTable

Table = tuple[str, list[str], list[list[str]]]


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value != 0 and abs(value) < 10**-digits:
        return f"{value:.2g}"
    return f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0%}"


def _p2p(value: bool | None, path: str) -> str:
    if path in ("host", "local", "total"):
        return "-"
    return "?" if value is None else ("yes" if value else "no")


def size_words(size: int) -> str:
    """`400,000,000 B (10^8 float32)`, `4 B`."""
    text = f"{size:,} B"
    if size % 4 == 0 and size >= 1 << 20:
        count = size // 4
        exp = round(math.log10(count))
        text += f" ({'10^' + str(exp) if 10**exp == count else f'{count:,}'} float32)"
    return text


def _title(test: str, mode: str, direction: str, size: int, label: str) -> str:
    both = ", both ways at once" if direction == "bi" else ""
    if test == "latency":
        return f"latency: small copies, one at a time{both}"
    if mode == "concurrent":
        return f"concurrent {label}: all copies at once{both}, {size_words(size)} each"
    return f"sequential: one {'pair' if both else 'copy'} at a time{both}, {size_words(size)}"


def _group_key(test: str, mode: str, direction: str, size: int, step: int) -> tuple[Any, ...]:
    if mode == "concurrent":
        return ("step", step)
    if test == "latency":
        return (test, direction)
    return (test, mode, direction, size)


# --- expectations ------------------------------------------------------------------------------

EXPECT_HEADERS = [
    "pair",
    "link",
    "nvl",
    "p2p",
    "peak_GB/s",
    "ceiling_GB/s",
    "expect_GB/s",
    "expect_ms",
    "diagnosis",
]


def _expect_cells(e: Expectation) -> list[str]:
    return [
        e.pair,
        e.link or "-",
        str(e.nvlinks) if e.path not in ("total", "host", "local") else "-",
        _p2p(e.p2p, e.path),
        _num(e.peak_gbps),
        _num(e.ceiling_gbps),
        _num(e.expected_gbps),
        _num(e.expected_ms, 2),
        e.diagnosis,
    ]


def expectation_tables(expectations: Sequence[StepExpectation]) -> list[Table]:
    groups: dict[tuple[Any, ...], Table] = {}
    for i, se in enumerate(expectations):
        s = se.step
        key = _group_key(s.test, s.mode, s.direction, s.size_bytes, i)
        if key not in groups:
            title = _title(s.test, s.mode, s.direction, s.size_bytes, s.label)
            headers = list(EXPECT_HEADERS)
            if s.test == "latency":
                headers[4:8] = ["size", "", "", ""]
            groups[key] = (title, headers, [])
        cells = groups[key][2]
        for e in [*se.copies, *([se.total] if se.total else [])]:
            row = _expect_cells(e)
            if s.test == "latency":
                row[4:8] = [f"{s.size_bytes:,} B", "", "", ""]
            cells.append(row)
    return [_drop_empty(t) for t in groups.values()]


def _expectation_records(expectations: Sequence[StepExpectation]) -> list[dict[str, Any]]:
    out = []
    for i, se in enumerate(expectations):
        s = se.step
        for e in [*se.copies, *([se.total] if se.total else [])]:
            out.append(
                {
                    "step": i,
                    "test": s.test,
                    "mode": s.mode,
                    "direction": s.direction,
                    "size_bytes": s.size_bytes,
                    **e.to_dict(),
                }
            )
    return out


def expectations_document(expectations: Sequence[StepExpectation]) -> Document:
    """A dry run's expectations: a table per step for people, a record per copy for tools
    (CSV without the list of copies a copy shares its links with)."""
    records = _expectation_records(expectations)
    return Document(
        _blocks(expectation_tables(expectations)),
        records=records,
        columns=[k for k in records[0] if k != "shared_with"] if records else [],
        data=records,
    )


def render_expectations(expectations: Sequence[StepExpectation], fmt: Format) -> str:
    return write(expectations_document(expectations), fmt)


# --- measured rows -----------------------------------------------------------------------------

ROW_HEADERS = [
    "pair",
    "link",
    "nvl",
    "p2p",
    "time_ms",
    "min_ms",
    "max_ms",
    "GB/s",
    "peak",
    "expect",
    "eff",
    "check",
    "diagnosis",
]
LATENCY_HEADERS = ["pair", "link", "size", "time_us", "min_us", "max_us", "check", "diagnosis"]


def _row_cells(r: ResultRow, c: P2PCopy) -> list[str]:
    s = r.stats
    if c.test == "latency":
        return [
            c.pair,
            c.link or "-",
            f"{r.size_bytes:,} B",
            _num(s.median, 2),
            _num(s.min, 2),
            _num(s.max, 2),
            r.check,
            c.diagnosis,
        ]
    return [
        c.pair,
        c.link or "-",
        str(c.nvlinks) if c.path not in ("total", "host", "local") else "-",
        _p2p(c.peer_access, c.path),
        _num(s.median / 1e3, 2),
        _num(s.min / 1e3, 2),
        _num(s.max / 1e3, 2),
        _num(r.busbw_gbps) + ("!" if c.suspicious else ""),
        _num(c.peak_gbps),
        _num(c.expected_gbps),
        _pct(c.efficiency),
        r.check,
        c.diagnosis,
    ]


def row_tables(rows: Sequence[ResultRow]) -> list[Table]:
    groups: dict[tuple[Any, ...], Table] = {}
    pairs = copies(rows)
    for r, c in pairs:
        key = _group_key(c.test, c.mode, c.direction, r.size_bytes, c.step)
        if key not in groups:
            label = c.pair
            if c.mode == "concurrent":
                label = next(
                    (x.pair for _, x in pairs if x.step == c.step and x.copy == "total"), c.pair
                )
            title = _title(c.test, c.mode, c.direction, r.size_bytes, label)
            headers = LATENCY_HEADERS if c.test == "latency" else ROW_HEADERS
            groups[key] = (title, list(headers), [])
        groups[key][2].append(_row_cells(r, c))
    return list(groups.values())


def rows_document(rows: Sequence[ResultRow]) -> Document:
    """p2p rows: a table per step or size for people; json and csv hold results.csv's flat
    p2p columns."""
    records = [csv_record(r) for r in rows]
    return Document(
        _blocks(row_tables(rows)),
        records=records,
        columns=csv_columns(list(rows), p2p=True),
        data=records,
    )


def render_rows(rows: Sequence[ResultRow], fmt: Format) -> str:
    return write(rows_document(rows), fmt)


# --- shared table builder ----------------------------------------------------------------------


def _drop_empty(table: Table) -> Table:
    """Leave out columns that are empty in every row (the latency tables' figures)."""
    title, headers, cells = table
    keep = [i for i, h in enumerate(headers) if h or any(c[i] for c in cells)]
    return title, [headers[i] for i in keep], [[c[i] for i in keep] for c in cells]


def _blocks(tables: Sequence[Table]) -> list[Block]:
    # the pair and the diagnosis are words
    return [TitledTable(t, h, c, left=(0, len(h) - 1)) for t, h, c in tables]
