"""Render the gate's decision: a table per series, a mark per point, the verdict last.

One document (`comparison_document`) for every format, as the run exporters build: `json`
is the full decision (every number the gate used), `csv` one line per point.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from commbench.compare import Z_LIMIT, Comparison, Mark, PointResult
from commbench.results.exporters import Format, group_title, write
from commbench.results.schema import ROW_POINT
from commbench.sizes import format_size
from commbench.tables import (
    Document,
    Headline,
    TitledTable,
    csv_document,
    json_document,
    markdown_document,
    text_document,
)

SYMBOLS = {
    Mark.better: "+ better",
    Mark.worse: "x WORSE",
    Mark.same: "= same",
    Mark.noisy: "~ noisy",
    Mark.missing: "! MISSING",
    Mark.new: "* new",
}
HEADERS = ["size", "baseline", "new", "ratio", "p", "limit", "mark", "why"]


def _speed(busbw: float | None, time_us: float | None) -> str:
    """busbw in GB/s where the op has one, else the time (barrier)."""
    if busbw is not None and math.isfinite(busbw):
        return f"{busbw:.3g} GB/s" if busbw < 10 else f"{busbw:.1f} GB/s"
    if time_us is not None and math.isfinite(time_us):
        return f"{time_us:.1f} us"
    return "-"


def _cells(p: PointResult) -> list[str]:
    return [
        format_size(p.size_bytes) if p.op != "barrier" else "-",
        _speed(p.base_busbw_gbps, p.base_time_us),
        _speed(p.new_busbw_gbps, p.new_time_us),
        f"{p.ratio:.2f}x" if p.ratio is not None else "-",
        f"{p.p_value:.2g}" if p.p_value is not None else "-",
        f"{p.threshold:+.0%} {p.basis.value}" if p.threshold is not None and p.basis else "-",
        SYMBOLS[p.mark],
        p.reason,
    ]


def build_tables(comparison: Comparison) -> list[tuple[str, list[list[str]]]]:
    groups: dict[str, list[list[str]]] = {}
    for p in comparison.points:
        groups.setdefault(group_title(p), []).append(_cells(p))
    return list(groups.items())


def summary_lines(comparison: Comparison) -> list[str]:
    lines = [f"baseline: {comparison.baseline}", f"new:      {comparison.new}"]
    noise = [
        f"{label} median spread {value:.3f}"
        for label, value in (
            ("baseline", comparison.baseline_noise),
            ("new", comparison.new_noise),
        )
        if value is not None
    ]
    s = comparison.settings
    lines.append(
        f"limit of each point: the largest of the tolerance {s.tolerance:.0%} (latency-bound "
        f"{s.latency_tolerance:.0%}) and {Z_LIMIT:g} spreads of how far the point's median "
        f"moves between runs, measured from {comparison.reference}"
    )
    lines.append(
        f"significance: one-sided Mann-Whitney on the samples (with a history: the new "
        f"median's z against the history's) at alpha {s.alpha:g}; noisy: a spread (IQR / "
        f"1.349 median) above {s.noisy_cv:g}" + (f"; {', '.join(noise)}" if noise else "")
    )
    lines += [f"allowed mismatch: {m}" for m in comparison.mismatches]
    lines += [f"note: {n}" for n in comparison.notes]
    return lines


WORDS = (5, 6, 7)
"""The columns of words (limit, mark, why): left-aligned."""


def comparison_document(comparison: Comparison, level: int = 2) -> Document:
    """The gate's decision: a table per series, the verdict as the headline (its icon: failed,
    noisy or passed) over the lines it rests on; for tools, one record per point (CSV) and the
    full decision (JSON). `level`: the headline's heading level in markdown, the tables' one
    below it."""
    icon = "❌" if comparison.exit_code else ("⚠️" if comparison.marked(Mark.noisy) else "✅")
    points = comparison.points
    return Document(
        [
            TitledTable(title, HEADERS, cells, left=WORDS, level=level + 1)
            for title, cells in build_tables(comparison)
        ],
        records=[p.to_dict() for p in points],
        columns=csv_columns(points),
        data=comparison.to_dict(),
        headline=Headline(comparison.verdict, summary_lines(comparison), icon, level),
    )


def to_table(comparison: Comparison) -> str:
    return text_document(comparison_document(comparison))


def to_markdown(comparison: Comparison, heading: str = "##") -> str:
    return markdown_document(comparison_document(comparison, len(heading)))


def to_json(comparison: Comparison) -> str:
    return json_document(comparison_document(comparison))


CSV_COLUMNS = [
    *ROW_POINT,
    "in_place",
    "mark",
    "ratio",
    "p_value",
    "threshold",
    "basis",
    "spread",
    "z",
    "latency_bound",
    "base_busbw_gbps",
    "new_busbw_gbps",
    "base_time_us",
    "new_time_us",
    "base_cv",
    "new_cv",
    "confirmed",
    "reason",
]


def csv_columns(points: Iterable[PointResult]) -> list[str]:
    """`CSV_COLUMNS`, with `skew` after `in_place` where a point has one (all_to_allv's):
    two points of one size and two skews are two rows that say which is which."""
    if not any(p.skew for p in points):
        return CSV_COLUMNS
    at = CSV_COLUMNS.index("in_place") + 1
    return [*CSV_COLUMNS[:at], "skew", *CSV_COLUMNS[at:]]


def to_csv(comparison: Comparison) -> str:
    return csv_document(comparison_document(comparison))


def many_document(results: list[tuple[str, Comparison]]) -> Document:
    """Several named comparisons (a suite against its baseline) in one output: each under its
    name for people; for tools, one record per point with its entry's name first, and the
    decisions by name."""
    if len(results) == 1:
        return comparison_document(results[0][1])
    points = [(name, p) for name, c in results for p in c.points]
    return Document(
        records=[{"entry": name, **p.to_dict()} for name, p in points],
        columns=["entry", *csv_columns(p for _, p in points)],
        data={name: c.to_dict() for name, c in results},
        parts=[(name, comparison_document(c, level=3)) for name, c in results],
        empty="",
    )


def render(comparison: Comparison, fmt: Format) -> str:
    return write(comparison_document(comparison), fmt)


def render_many(results: list[tuple[str, Comparison]], fmt: Format) -> str:
    return write(many_document(results), fmt)
