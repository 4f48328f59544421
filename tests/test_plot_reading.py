"""The figures as a person reads them (issue 43, item 17), asserted on the artists matplotlib
draws: the legend under the panels, not far below them; the peak's label beside its line,
not struck through by it; the shaded bands named; an imported nccl-tests log drawn without
a line falling off the bottom of its bandwidth panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from commbench.report.figures import Figure, op_figures, strategies_figure
from commbench.report.plots import BAND_LABEL, PEAK_GAP_POINTS, draw
from commbench.results.runs import load_run

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = FIXTURES / "runs"
GOLDEN = RUNS / "h100x8-golden"
NCCL_LOGS = FIXTURES / "nccl_tests"


def drawn(figure: Figure) -> Any:
    """The figure laid out as `savefig` lays it out, on an Agg canvas to measure it on."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = draw(figure)
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig


def legend_texts(fig: Any) -> list[str]:
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def two_runs() -> list[Figure]:
    return op_figures([load_run(RUNS / "cpu-gloo-a"), load_run(RUNS / "cpu-gloo-b")])


@pytest.mark.parametrize(
    "figure",
    [
        pytest.param(lambda: two_runs()[0], id="two-runs"),
        pytest.param(lambda: strategies_figure([load_run(GOLDEN)]), id="strategies"),
        pytest.param(lambda: op_figures([load_run(GOLDEN)])[0], id="one-run"),
    ],
)
def test_the_legend_sits_right_under_the_panels(figure: Any) -> None:
    fig = drawn(figure())
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    # the panels with their tick labels and axis names
    bottom = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes)
    gap_inches = (bottom - box.y1) / fig.dpi
    assert 0 <= gap_inches < 0.15, gap_inches
    left = min(ax.get_position().x0 for ax in fig.axes) * fig.bbox.width
    right = max(ax.get_position().x1 for ax in fig.axes) * fig.bbox.width
    assert left <= box.x0 and box.x1 <= right  # under the panels, centred


def test_the_peak_label_is_beside_its_line_not_on_it() -> None:
    fig = drawn(op_figures([load_run(GOLDEN)])[0])
    renderer = fig.canvas.get_renderer()
    bus = fig.axes[1]
    (line,) = [ln for ln in bus.get_lines() if ln.get_gid() == "peak"]
    (label,) = [t for t in bus.texts if t.get_gid() == "peak-label"]
    assert label.get_text() == "peak 450 GB/s"
    y = bus.transData.transform((1.0, line.get_ydata()[0]))[1]
    box = label.get_window_extent(renderer)
    half_line = line.get_linewidth() / 2 * fig.dpi / 72
    gap_points = min(abs(box.y0 - y), abs(box.y1 - y)) * 72 / fig.dpi
    assert not box.y0 - half_line <= y <= box.y1 + half_line  # the dashes miss the letters
    assert gap_points == pytest.approx(PEAK_GAP_POINTS, abs=0.5)
    assert bus.get_ylim()[0] < box.y0 and box.y1 < bus.bbox.y1  # inside the panel


def test_the_shaded_band_is_named_in_the_legend() -> None:
    (figure, *_) = two_runs()
    assert all(s.band is not None for p in figure.panels for s in p.series)
    fig = drawn(figure)
    assert legend_texts(fig) == ["cpu-gloo-a", "cpu-gloo-b", BAND_LABEL]
    assert BAND_LABEL == "shaded: q1-q3 of iterations"  # Series.band: q1..q3 of the samples
    bands = [c for ax in fig.axes for c in ax.collections if c.get_gid() == "band"]
    assert len(bands) == 4  # two runs, two panels
    # one run, its line not named (nothing to tell it from): the band is still explained
    (alone, *_) = op_figures([load_run(RUNS / "cpu-gloo-a")])
    assert legend_texts(drawn(alone)) == [BAND_LABEL]


def test_no_band_no_band_entry(tmp_path: Path) -> None:
    from commbench.importers.nccl_tests import import_log

    run = load_run(import_log(NCCL_LOGS / "h100x16_2nodes_all_reduce.log", tmp_path))
    (figure,) = op_figures([run])  # nccl-tests prints no quartiles
    assert legend_texts(drawn(figure)) == ["out-of-place", "in-place"]


@pytest.mark.parametrize(
    "log",
    [
        "h100x16_2nodes_all_reduce.log",
        "a100x8_all_gather_old_format.log",
        "gb10x2_all_gather_v2.17.log",
    ],
)
def test_an_imported_nccl_tests_log_draws_no_vertical_drop(tmp_path: Path, log: str) -> None:
    """nccl-tests prints busbw with two decimals: its small sizes read 0.00 GB/s, which a log
    axis puts at minus infinity, and the line fell straight down at the first size that
    prints 0.01 (512 B over 16 GPUs). Each form (out-of-place, in-place) is its own line,
    rising in size, each size once, every point drawable."""
    from commbench.importers.nccl_tests import import_log

    run = load_run(import_log(NCCL_LOGS / log, tmp_path))
    (figure,) = op_figures([run])
    for panel in figure.panels:
        assert len({s.label for s in panel.series}) == len(panel.series)
        for series in panel.series:
            assert all(a < b for a, b in zip(series.x, series.x[1:])), series.label
            assert all(y > 0 for y in series.y), (panel.title, series.label)
    fig = drawn(figure)
    bus = fig.axes[1]
    assert bus.get_yscale() == "log"
    for line in bus.get_lines():
        if line.get_gid() != "peak":
            assert all(y > 0 for y in line.get_ydata()), line.get_label()


def test_a_history_of_one_day_ticks_its_runs_by_time_and_names_its_marks() -> None:
    """Nightly runs all started on 2026-01-01 were ticked `2026-01-01` six times over; the
    grey levels and the red line were named nowhere."""
    from commbench.history.plot import draw as draw_history
    from commbench.history.plot import tick_labels
    from commbench.history.store import Series, Value

    def value(hour: int, gbps: float) -> Value:
        at = f"2026-01-01T{hour:02d}:00:00+0000"
        return Value(
            run_id=f"r{hour}",
            run=f"r{hour}",
            at=at,
            label=None,
            median_us=10.0,
            busbw_gbps=gbps,
            n=5,
            q1_us=None,
            q3_us=None,
            value=gbps,
        )

    values = [value(h, 1.0) for h in range(6)]
    assert tick_labels(values, [0, 2, 4]) == [
        "2026-01-01 00:00",
        "2026-01-01 02:00",
        "2026-01-01 04:00",
    ]
    days = [
        Value(**{**{f: getattr(v, f) for f in v.__slots__}, "at": f"2026-01-0{i + 1}T00:00:00"})
        for i, v in enumerate(values[:3])
    ]
    assert tick_labels(days, [0, 1, 2]) == ["2026-01-01", "2026-01-02", "2026-01-03"]
    series = Series(
        id="s",
        point="all_reduce float32 op=sum 2 ranks 1M",
        machine="2x cpu gloo on vm",
        op="all_reduce",
        strategy="",
        dtype="float32",
        reduce_op="sum",
        world_size=2,
        size_bytes=1 << 20,
        in_place=False,
        skew="uniform",
        runs=6,
        busbw=True,
    )
    fig = draw_history(series, values, [])
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "run",
        "median between change points",
    ]
