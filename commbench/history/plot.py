"""`history plot`: each series over its runs, its change points marked and what changed
written beside them (matplotlib without global state: `commbench.drawing`)."""

from __future__ import annotations

import itertools
import statistics
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from commbench.drawing import literal_text, new_figure
from commbench.history.render import plain
from commbench.history.store import FoundChange, Series, Value
from commbench.results.store import writing
from commbench.tables import fixed

FORMATS = ("png", "svg")
DPI = 110
MAX_TICKS = 8
MAX_CHANGED_LINES = 5
"""Lines of what changed written beside a change point (the rest: `history changes`)."""


def figure_name(series: Series, fmt: str) -> str:
    return f"history-{series.id}.{fmt}"


def _y(series: Series, v: Value) -> float:
    """Busbw where the series has it (higher is better), else the median time (µs)."""
    if series.busbw and v.busbw_gbps is not None:
        return v.busbw_gbps
    return v.median_us


def _note(change: FoundChange) -> str:
    what = "busbw" if change.series.busbw else "speed"
    lines = [
        f"{what} x{fixed(change.ratio)} [{fixed(change.ratio_low)}, {fixed(change.ratio_high)}]"
    ]
    lines.append(f"p={change.p_value:.0e}, at {change.run_id}")
    changed = [f"{k}: {plain(a)} -> {plain(b)}" for k, (a, b) in change.changed.items()]
    if len(changed) > MAX_CHANGED_LINES:
        changed = [
            *changed[: MAX_CHANGED_LINES - 1],
            f"(+{len(changed) - MAX_CHANGED_LINES + 1} more)",
        ]
    lines += changed or ["nothing recorded changed"]
    return "\n".join(textwrap.shorten(line, 48, placeholder="...") for line in lines)


def tick_labels(values: Sequence[Value], ticks: Sequence[int]) -> list[str]:
    """The start of each ticked run: its date, and its time (`2026-01-01 05:00`) when two
    ticks share a date, as nightly runs do (a row of equal dates tells the runs nothing)."""
    dates = [values[i].at[:10] for i in ticks]
    if len(set(dates)) == len(dates):
        return dates
    return [f"{values[i].at[:10]} {values[i].at[11:16]}".rstrip() for i in ticks]


def draw(series: Series, values: Sequence[Value], changes: Sequence[FoundChange]) -> Any:
    """A matplotlib Figure of one series (made directly: nothing to close)."""
    with literal_text():
        fig = new_figure((9.0, 4.6))
        ax = fig.subplots()
        ys = [_y(series, v) for v in values]
        xs = list(range(len(values)))
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.0, color="C0", label="run")
        bounds = [0, *(c.index for c in changes), len(values)]
        for lo, hi in itertools.pairwise(bounds):
            if hi > lo:
                level = statistics.median(ys[lo:hi])
                ax.hlines(
                    level,
                    lo - 0.4,
                    hi - 0.6,
                    colors="0.35",
                    linewidth=1.4,
                    label="median between change points" if lo == 0 else None,
                )
        top = max(ys) if ys else 1.0
        for change in changes:
            x = change.index - 0.5
            line = ax.axvline(
                x,
                color="C3",
                linestyle=(0, (5, 3)),
                linewidth=1.2,
                label="change point" if change is changes[0] else None,
            )
            line.set_gid("change")
            ax.text(
                x,
                top,
                _note(change),
                fontsize=7,
                va="top",
                ha="left",
                color="C3",
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 2},
            )
        step = max(1, -(-len(values) // MAX_TICKS))
        ticks = xs[::step]
        ax.set_xticks(ticks)
        ax.set_xticklabels(tick_labels(values, ticks), rotation=30, fontsize=8)
        ax.set_xlabel(f"run ({len(values)}, by start time)")
        ax.set_ylabel("busbw (GB/s)" if series.busbw else "median time (µs)")
        ax.set_title(textwrap.fill(series.label, 100), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)  # what the grey levels and the red lines are
        fig.tight_layout()
    return fig


def write(
    plotted: Sequence[tuple[Series, Sequence[Value], Sequence[FoundChange]]],
    out_dir: Path,
    formats: Sequence[str],
) -> list[Path]:
    """Every series' figure in every format under `out_dir`; the files written."""
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for series, values, changes in plotted:
        fig = draw(series, values, changes)
        for fmt in formats:
            path = out_dir / figure_name(series, fmt)
            with writing(path):
                fig.savefig(path, format=fmt, dpi=DPI)
            written.append(path)
    return written
