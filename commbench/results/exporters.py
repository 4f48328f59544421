"""A run's rows as a table document (`tables.Document`), written by `--format`'s writer.

`table` and `md` share one table builder, so the human table and the markdown a CI job
posts always show the same columns. `csv` and `json` are the stable machine formats. Which
formats there are, and their writers, is the registry's (`commbench.formats.FORMATS`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from commbench.formats import Choice, Writes, choices
from commbench.formats import writer as registry_writer
from commbench.results.csv_rows import csv_columns, csv_record
from commbench.results.schema import SCHEMA_VERSION, Keyed, ResultRow
from commbench.sizes import format_size
from commbench.tables import (
    Block,
    Document,
    Notes,
    TitledTable,
    csv_document,
    fixed,
    json_document,
    markdown_document,
    text_document,
)

if TYPE_CHECKING:
    Format = Choice
else:
    Format = choices(Writes.TABLES)
"""The formats of a run's rows and every other table document (`--format` of the commands
that print them): those of the registry (`commbench.formats.FORMATS`) that write a
`tables.Document`, with their `human` and `markdown`."""


def _num(value: float | None, digits: int = 2) -> str:
    """Fixed decimals, never an exponent, never a small non-zero bandwidth rounded to 0.00."""
    return fixed(value, digits)


def _spread(row: ResultRow) -> str:
    """The gate's robust spread (`Stats.spread`) as a percentage of the median."""
    spread = row.stats.spread()
    return "-" if spread is None else f"{spread:.0%}"


def group_title(row: Keyed) -> str:
    """A series' title (its key but the size): `all_reduce  float32  op=sum  2 ranks`."""
    op, strategy, dtype, reduce_op, world_size, _, in_place, skew = row.key
    parts = [op]
    if strategy:
        parts.append(f"strategy={strategy}")
    if dtype:  # none for an op that carries no data (a replayed barrier), as reduce_op
        parts.append(dtype)
    if reduce_op:
        parts.append(f"op={reduce_op}")
    # the world size in words: a bare `n=2` read as the iteration count
    parts.append(f"{world_size} rank" + ("s" if world_size != 1 else ""))
    if in_place:
        parts.append("in-place")
    if skew:
        parts.append(f"skew={skew}")
    return "  ".join(parts)


HEADERS = ["size", "count", "time_us", "algbw_GB/s", "busbw_GB/s", "spread", "iters", "check"]
"""`count` is elements (as nccl-tests names it), `time_us` the median, `spread` the robust
spread the noise warning and the gate judge by (IQR / 1.349 median, `Stats.spread`), `iters`
the timed iterations."""


SKEW_HEADER = "max/mean"
"""After `busbw_GB/s` in the table of an op that takes a skew (all_to_allv): the busiest rank's
bytes over the mean (`ResultRow.skew_ratio`), the factor its algbw carries beside S / t."""


def row_cells(row: ResultRow) -> list[str]:
    """One point's cells under `HEADERS` (with `SKEW_HEADER` after busbw when the row has
    a skew)."""
    check = row.check + (" *" if row.note else "")
    skew = [_num(row.skew_ratio) + "x" if row.skew_ratio is not None else "-"] if row.skew else []
    return [
        format_size(row.size_bytes) if row.op != "barrier" else "-",
        str(row.count),
        _num(row.time_us),
        _num(row.algbw_gbps),
        _num(row.busbw_gbps),
        *skew,
        _spread(row),
        str(row.stats.n),
        check,
    ]


def format_time(us: float) -> str:
    """Microseconds in the unit a person reads: `850.20 us`, `12.34 ms`, `2.95 s`."""
    if not math.isfinite(us):
        return "-"
    for limit, unit, factor in ((1e3, "us", 1.0), (1e6, "ms", 1e3)):
        if abs(us) < limit:
            return f"{us / factor:.2f} {unit}"
    return f"{us / 1e6:.2f} s"


def point_line(row: ResultRow, *, two_forms: bool = False) -> str:
    """One point on one line, as a log streams it: the series, size, median time, busbw,
    spread and check (`commbench collectives` prints one per point as it is measured).
    `two_forms`: the op has an in-place and an out-of-place form, and the line says which
    (in-place rows always say so), as `--in-place both` streams them one after the other."""
    size = format_size(row.size_bytes) if row.op != "barrier" else "-"
    title = group_title(row).replace("  ", " ")
    if two_forms and not row.in_place:
        title += " out-of-place"
    parts = [title, size, f"time {format_time(row.time_us)}"]
    if row.busbw_gbps is not None:
        parts.append(f"busbw {_num(row.busbw_gbps)} GB/s")
    if row.skew_ratio is not None:
        parts.append(f"{SKEW_HEADER} {_num(row.skew_ratio)}x")
    parts += [f"spread {_spread(row)}", row.check + (f" ({row.note})" if row.note else "")]
    return "  ".join(parts)


@dataclass(frozen=True, slots=True)
class TableGroup:
    """One table of a run: a series (op, strategy, dtype, reduce op, world size) over sizes."""

    title: str
    headers: list[str]
    cells: list[list[str]]
    op: str
    strategy: str


FORM_HEADERS = ["time_us", "algbw_GB/s", "busbw_GB/s", "spread", "check"]
"""The columns of one form when out-of-place and in-place stand side by side."""
BOTH_HEADERS = [
    "size",
    "count",
    *(f"out {h}" for h in FORM_HEADERS),
    *(f"in {h}" for h in FORM_HEADERS),
]
"""nccl-tests' layout for an op measured both ways: per size, the out-of-place columns then
the in-place ones (`--in-place both`); `out`/`in` prefix each so no column is ambiguous."""


def _form_cells(row: ResultRow | None) -> list[str]:
    if row is None:
        return ["-"] * len(FORM_HEADERS)
    cells = row_cells(row)
    return [cells[2], cells[3], cells[4], cells[5], cells[7]]


def _series_key(row: ResultRow) -> tuple[str, str, str, str, int, str]:
    return (row.op, row.strategy, row.dtype, row.reduce_op, row.world_size, row.skew)


def build_tables(rows: list[ResultRow]) -> list[TableGroup]:
    """Rows -> one table per op/strategy/dtype group, in the order measured. An op measured
    both out of place and in place gets one table with the two forms side by side."""
    forms: dict[tuple[str, str, str, str, int, str], set[bool]] = {}
    for row in rows:
        forms.setdefault(_series_key(row), set()).add(row.in_place)
    tables: dict[str, TableGroup] = {}
    paired: dict[str, dict[int, dict[bool, ResultRow]]] = {}
    for row in rows:
        if len(forms[_series_key(row)]) == 2:
            base = group_title(replace(row, in_place=False))
            title = f"{base}  out-of-place | in-place"
            if title not in tables:
                tables[title] = TableGroup(title, list(BOTH_HEADERS), [], row.op, row.strategy)
                paired[title] = {}
            paired[title].setdefault(row.size_bytes, {})[row.in_place] = row
            continue
        title = group_title(row)
        if title not in tables:
            headers = [*HEADERS[:5], SKEW_HEADER, *HEADERS[5:]] if row.skew else list(HEADERS)
            tables[title] = TableGroup(title, headers, [], row.op, row.strategy)
        tables[title].cells.append(row_cells(row))
    for title, by_size in paired.items():
        for both in by_size.values():
            first = both.get(False) or both[True]
            size = format_size(first.size_bytes) if first.op != "barrier" else "-"
            tables[title].cells.append(
                [
                    size,
                    str(first.count),
                    *_form_cells(both.get(False)),
                    *_form_cells(both.get(True)),
                ]
            )
    return list(tables.values())


_ROUNDED = re.compile(r"^rounded from \d+ B (to .+)$")


def _notes(rows: list[ResultRow]) -> list[str]:
    """The footnotes: one line per op and rounding rule (a sweep rounds most of its sizes
    the same way), one per other note."""
    groups: dict[tuple[str, str], list[ResultRow]] = {}
    for row in rows:
        if row.note:
            match = _ROUNDED.match(row.note)
            rule = match.group(1) if match else row.note
            groups.setdefault((row.strategy or row.op, rule), []).append(row)
    out = []
    for (name, rule), group in groups.items():
        first = group[0]
        if len(group) > 1 and rule != first.note:
            out.append(f"{name}: {len(group)} sizes rounded {rule} (the size column is what moved)")
        else:
            out.extend(
                f"{name} {format_size(r.requested_bytes or r.size_bytes)}: {r.note}" for r in group
            )
    return out


def rows_document(rows: list[ResultRow], *, p2p: bool = False) -> Document:
    """A run's rows in every format: a table per series and the footnotes for people; for
    tools results.csv's flat columns (`p2p`: a p2p run's header before it has a row) and
    results.json's shape (versioned), without the per-iteration samples."""
    blocks: list[Block] = [TitledTable(t.title, t.headers, t.cells) for t in build_tables(rows)]
    notes = _notes(rows)
    if notes:
        blocks.append(Notes([f"* {n}" for n in notes]))
    return Document(
        blocks,
        records=[csv_record(r) for r in rows],
        columns=csv_columns(rows, p2p=p2p),
        data={"schema_version": SCHEMA_VERSION, "rows": [r.to_dict(samples=False) for r in rows]},
    )


def to_table(rows: list[ResultRow]) -> str:
    return text_document(rows_document(rows))


def to_markdown(rows: list[ResultRow]) -> str:
    return markdown_document(rows_document(rows))


def rows_to_csv(rows: list[ResultRow], *, p2p: bool = False) -> str:
    """results.csv: every run kind's flat columns (`csv_rows.csv_columns`); `p2p` gives a p2p
    run's header before it has a row."""
    return csv_document(rows_document(rows, p2p=p2p))


def to_json(rows: list[ResultRow]) -> str:
    """results.json's shape (versioned), without the per-iteration samples."""
    return json_document(rows_document(rows))


def writer(fmt: str) -> Callable[[Document], str]:
    """`fmt`'s writer of table documents (a name, or a member of `Format`)."""
    return registry_writer(Writes.TABLES, fmt)


def write(doc: Document, fmt: str) -> str:
    """A renderer's document in `fmt`."""
    return writer(fmt)(doc)


def export(rows: list[ResultRow], fmt: str) -> str:
    return write(rows_document(rows), fmt)


__all__ = [
    "BOTH_HEADERS",
    "HEADERS",
    "Format",
    "TableGroup",
    "build_tables",
    "export",
    "format_time",
    "point_line",
    "row_cells",
    "rows_document",
    "rows_to_csv",
    "write",
    "writer",
]
