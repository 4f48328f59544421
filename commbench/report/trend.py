"""A run's trend in a runs history (`report --history DB`): where each of its points stands
among the comparable runs of its series, the series' change points, and a figure per op.

Read only: the history is opened for reading (`History.open`), which never writes, and a run
not yet in it is placed against the runs that started before it.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.report.blocks import Block, Heading, Image, Para, Table
from commbench.results.runs import Run
from commbench.sizes import format_size

if TYPE_CHECKING:
    from commbench.history.store import FoundChange, Series, Value

    Plotted = tuple[Series, list[Value], list[FoundChange]]

FIGURE_DPI = 90
RECENT = 5
"""The runs before this one whose median a point is set against in the table."""


@dataclass(frozen=True, slots=True)
class _Point:
    op: str
    size: str
    runs: int
    recent: float | None
    """This run's figure over the median of the `RECENT` runs before it (busbw: below 1 is
    slower); None with no run before it."""
    last_change: str


def trend_blocks(run: Run, history: str, level: int, *, figures: bool = True) -> list[Block]:
    """The section: a table of the run's points against their series, and a figure of the
    largest size of each op (its series over time, change points marked), or a paragraph
    saying the history holds nothing of this run's machine."""
    from commbench.history.identity import machine_of, run_digest, series_digest
    from commbench.history.store import History, Selection

    blocks: list[Block] = [Heading(level, "Trend in the history")]
    machine = machine_of(run)
    with History.open(history) as store:
        own = store.runs("r.digest = ?", (run_digest(run),))
        rows: list[_Point] = []
        largest: dict[str, tuple[int, Plotted]] = {}
        for row in run.rows:
            digest = series_digest(machine, row.key)
            found = store.series(Selection(series=digest))
            if not found:
                continue
            series = found[0]
            values = store.values(series)
            at = own[0].at if own else None
            before = [
                v for v in values if (at is None or v.at < at) and (not own or v.run != own[0].id)
            ]
            mine = row.sample_busbw_gbps() if series.busbw else 1e6 / row.sample_median_us()
            recent = [v.value for v in before[-RECENT:]]
            ratio = mine / statistics.median(recent) if recent and mine else None
            changes = store.changes(series_pk=series.pk)
            last = (
                f"x{changes[-1].ratio:.2f} at {changes[-1].run_id} ({changes[-1].at[:10]})"
                if changes
                else "none"
            )
            rows.append(_Point(row.op, format_size(row.size_bytes), len(values), ratio, last))
            if row.op not in largest or row.size_bytes >= largest[row.op][0]:
                largest[row.op] = (row.size_bytes, (series, values, changes))
        if not rows:
            return [
                *blocks,
                Para(
                    f"The history {history} holds no run of this machine "
                    f"({machine.label}): nothing to set this run against yet."
                ),
            ]
        blocks.append(
            Para(
                f"Each point of this run against the {RECENT} comparable runs before it in "
                f"{history} (busbw, or speed where a point has none: below 1 is slower), and "
                "the last change point of its series (`commbench history changes` says what "
                "changed there)."
            )
        )
        blocks.append(
            Table(
                ["op", "size", "runs", f"vs last {RECENT}", "last change"],
                [[p.op, p.size, str(p.runs), _ratio(p.recent), p.last_change] for p in rows],
            )
        )
        if figures:
            blocks += _figures([v for _, v in largest.values()])
    return blocks


def _ratio(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}x"


def _figures(plotted: Sequence[Plotted]) -> list[Block]:
    from commbench.history.plot import draw

    out: list[Block] = []
    for series, values, changes in plotted:
        fig = draw(series, values, changes)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=FIGURE_DPI)
        out.append(
            Image(alt=f"trend of {series.point}", png=buffer.getvalue(), name=f"trend-{series.id}")
        )
    return out
