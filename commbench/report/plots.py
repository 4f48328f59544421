"""Draw figure specs with matplotlib (Agg backend), as PNG and SVG files.

matplotlib is imported inside the functions: importing this module costs nothing, and
`commbench --help` stays fast.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.drawing import literal_text, new_figure
from commbench.errors import UserError
from commbench.heatmap import draw_heatmap
from commbench.report.figures import Figure, Panel, all_figures
from commbench.report.requests import PlotRequest, Plotted
from commbench.results.runs import Run, load_run
from commbench.results.store import RunDir, check_output, writing
from commbench.sizes import format_size
from commbench.topology.model import MAX_PEAK_GBPS

FORMATS = ("png", "svg")
DPI = 110
MAX_TICKS = 12


def size_ticks(lo: int, hi: int) -> list[int]:
    """Powers of two spanning [lo, hi], thinned to at most MAX_TICKS."""
    lo_exp = max(0, math.floor(math.log2(max(lo, 1))))
    hi_exp = math.ceil(math.log2(max(hi, 1)))
    exps = list(range(lo_exp, hi_exp + 1))
    step = 1
    while len(exps[::step]) > MAX_TICKS:
        step += 1
    return [2**e for e in exps[::step]]


def format_time_us(us: float) -> str:
    """A time axis label: `500 ns`, `20 µs`, `5 ms`, `2 s` (a log axis spans several)."""
    for scale, unit in ((1e6, "s"), (1e3, "ms"), (1.0, "µs")):
        if us >= scale:
            return f"{us / scale:g} {unit}"
    return f"{us * 1e3:g} ns"


PEAK_GAP_POINTS = 3.0
"""Between a peak line and its label: a label drawn against its line is struck through by
it (the dashes cross the letters' tops)."""
BAND_LABEL = "shaded: q1-q3 of iterations"
"""The legend entry of the bands (`Series.band`): the middle half of the timed iterations,
the noise to hold a gap between two lines against."""


def _draw_peaks(ax: Any, panel: Panel) -> None:
    """Each peak as a grey dashed line across the panel, named at its left end, where the
    bandwidth of small messages leaves the panel empty (not in the legend, which names
    the measured lines), just under its line (above it for every other peak, so two close
    peaks' labels do not sit on each other)."""
    from matplotlib.transforms import blended_transform_factory

    on_line = blended_transform_factory(ax.transAxes, ax.transData)
    for i, peak in enumerate(panel.peaks):
        line = ax.axhline(peak.gbps, color="0.35", linestyle=(0, (6, 3)), linewidth=1.1)
        line.set_gid("peak")
        line.set_label(f"_{peak.label}")  # underscore: kept out of the legend
        below = i % 2 == 0
        text = ax.annotate(
            peak.label,
            xy=(0.02, peak.gbps),
            xycoords=on_line,
            xytext=(0, -PEAK_GAP_POINTS if below else PEAK_GAP_POINTS),
            textcoords="offset points",
            ha="left",
            va="top" if below else "bottom",
            fontsize=8,
            color="0.25",
        )
        text.set_gid("peak-label")


def _draw_panel(ax: Any, panel: Panel) -> dict[str, Any]:
    """Draw one panel; return each series' line by its label, for the figure's legend (not
    matplotlib's own list, which drops a label that starts with "_", such as a host's), and
    under `BAND_LABEL` a band, when one was drawn."""
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        LogLocator,
        NullFormatter,
        NullLocator,
    )

    xs = [x for s in panel.series for x in s.x if x > 0]
    drawn: dict[str, Any] = {}
    for s in panel.series:
        points = [(x, y) for x, y in zip(s.x, s.y) if x > 0]
        if not points:
            continue
        (line,) = ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            markersize=3,
            linewidth=1.4,
            linestyle="--" if s.dashed else "-",
            label=s.label,
        )
        drawn.setdefault(s.label, line)
        if s.band is not None:
            kept = [(x, b) for x, b in zip(s.x, s.band) if x > 0]
            band = ax.fill_between(
                [x for x, _ in kept],
                [lo for _, (lo, _) in kept],
                [hi for _, (_, hi) in kept],
                color=line.get_color(),
                alpha=0.15,
                linewidth=0,
            )
            band.set_gid("band")
            drawn.setdefault(BAND_LABEL, band)
    ax.set_xscale("log", base=2)
    if xs:
        ax.xaxis.set_major_locator(FixedLocator(size_ticks(min(xs), max(xs))))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(round(v))))
    _draw_peaks(ax, panel)
    if panel.ylog:
        ax.set_yscale("log")
        # plain numbers (600, 6000), not 6x10^3: readers compare them with their own logs
        low, high = ax.get_ylim()
        # 1-2-5 per decade reads well over a few decades; over many (a GPU run beside a CPU
        # one) it crowds the axis, so powers of ten alone
        decades = math.log10(high / low) if 0 < low < high else 0.0
        subs = (1.0, 2.0, 5.0) if decades <= 4.5 else (1.0,)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
        if panel.ytime:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_time_us(v)))
        else:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    if panel.peaks:  # the line in view, with room above it
        low, high = ax.get_ylim()
        top = max(p.gbps for p in panel.peaks) * (1.5 if panel.ylog else 1.1)
        ax.set_ylim(low, max(high, top))
    ax.set_xlabel("message size")
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    return drawn


def draw(figure: Figure) -> Any:
    """A matplotlib Figure for the spec (made directly: nothing to close)."""
    if figure.heatmap is not None:  # drawn, titled and laid out as every pair matrix is
        return draw_heatmap(figure.heatmap)
    with literal_text():
        return _draw_panels(figure)


def _draw_panels(figure: Figure) -> Any:
    """The panels side by side, under the title, over one legend for the figure (both panels
    share the lines): the lines' names when there is more than one line (or the runs were
    named), and what the shaded bands are wherever one is drawn.

    Laid out by matplotlib's constrained layout, which puts the legend right under the
    panels' tick labels: a legend placed at the figure's bottom edge with room guessed for
    it floated far below the axes."""
    cols = max(1, len(figure.panels))
    labels = list(dict.fromkeys(s.label for p in figure.panels for s in p.series))
    named = len(labels) > 1 or (figure.legend and len(labels) == 1)
    banded = any(s.band is not None for p in figure.panels for s in p.series)
    entries = (len(labels) if named else 0) + (1 if banded else 0)
    ncol = 2 if entries > 3 else 1
    legend_rows = math.ceil(entries / ncol)
    fig = new_figure((6.2 * cols, 4.6 + 0.22 * legend_rows))
    fig.set_layout_engine("constrained")
    axes = fig.subplots(1, cols, squeeze=False)
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes[0], figure.panels):
        for label, line in _draw_panel(ax, panel).items():
            handles.setdefault(label, line)
    shown = {k: handles[k] for k in (labels if named else []) if k in handles}
    if BAND_LABEL in handles:  # last, in grey: every line's band, not the first line's
        from matplotlib.patches import Patch

        shown[BAND_LABEL] = Patch(facecolor="0.5", alpha=0.3, linewidth=0)
    if shown:
        fig.legend(
            list(shown.values()),
            list(shown),
            loc="outside lower center",
            fontsize=8,
            frameon=False,
            ncol=ncol,
        )
    fig.suptitle(textwrap.fill(figure.title, int(fig.get_figwidth() * 11)), fontsize=11)
    return fig


def png_bytes(figure: Figure) -> bytes:
    buf = io.BytesIO()
    draw(figure).savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def figure_file(out_dir: Path, figure: Figure, fmt: str) -> Path:
    """Where `write_figures` puts `figure` in format `fmt`."""
    return out_dir / f"{figure.name}.{fmt}"


def write_figures(
    figures: Sequence[Figure], out_dir: Path, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """Write every figure in every format; returns the files written."""
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for figure in figures:
        fig = draw(figure)
        for fmt in formats:
            path = figure_file(out_dir, figure, fmt)
            with writing(path):
                fig.savefig(path, format=fmt, dpi=DPI)
            written.append(path)
    return written


def check_peak(peak_gbps: float | None) -> float | None:
    """`--peak`: a bandwidth a link can have, in GB/s (UserError otherwise)."""
    if peak_gbps is None:
        return None
    if not math.isfinite(peak_gbps) or not 0 < peak_gbps <= MAX_PEAK_GBPS:
        raise UserError(f"--peak must be a bandwidth in GB/s, 0 < GBPS <= {MAX_PEAK_GBPS:g}")
    return peak_gbps


def check_labels(labels: Sequence[str] | None, runs: Sequence[Run]) -> list[str] | None:
    """`--label`: one non-empty name per run, in order (UserError otherwise)."""
    if labels is None:
        return None
    if len(labels) != len(runs):
        raise UserError(
            f"{len(labels)} --label for {len(runs)} run(s): give one per run, in order "
            "(a suite counts one per entry that made a run)"
        )
    names = [label.strip() for label in labels]
    if any(not name or not name.isprintable() for name in names):
        raise UserError("--label must be printable text, not empty")
    return names


def plot_runs(
    runs: list[Run],
    out_dir: Path,
    formats: Sequence[str] = FORMATS,
    *,
    peak_gbps: float | None = None,
    labels: Sequence[str] | None = None,
    reads: Sequence[Path] = (),
) -> list[Path]:
    """Write every figure of `runs` into `out_dir`. `peak_gbps` is drawn on the bandwidth
    panels (else each run's topology peak, where known); `labels` names the runs. No figure
    file may be a file of the runs, or of `reads` (the suites they came from), or any run's
    record (`check_output`)."""
    if not formats:  # `--formats ''` would write nothing and look like success
        raise UserError(f"no plot format given; choose from: {', '.join(FORMATS)}")
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise UserError(f"unknown plot format {bad[0]!r}; choose from: {', '.join(FORMATS)}")
    peak = check_peak(peak_gbps)
    names = check_labels(labels, runs)
    figures = all_figures(runs, peak_gbps=peak, labels=names)
    if not figures:
        shown_names = ", ".join(str(r.path) for r in runs)
        raise UserError(f"nothing to plot: no measured points in {shown_names}")
    files = [figure_file(out_dir, figure, fmt) for figure in figures for fmt in formats]
    check_output(files, [*reads, *(r.path for r in runs)])
    return write_figures(figures, out_dir, formats)


@dataclass(frozen=True, slots=True)
class RunPlots:
    """What plotting a finished run did: the files, or why there are none."""

    run_dir: Path
    written: list[Path]
    problem: str | None = None

    def __str__(self) -> str:
        if self.problem is not None:
            return f"no plots: {self.problem}"
        figures = len({p.stem for p in self.written})
        return f"{figures} plot(s) in {RunDir(self.run_dir).plots_dir}"


def write_run_plots(run_dir: Path) -> RunPlots:
    """Plot a finished run into RUN_DIR/plots, never raising for a plotting problem: a run
    that measured fine must not fail on its pictures."""
    try:
        run = load_run(run_dir).held_here()
        written = plot_runs([run], RunDir(run_dir).plots_dir, ("png", "svg"))
    except UserError as exc:
        return RunPlots(run_dir, [], str(exc))
    except (OSError, ValueError, RuntimeError) as exc:  # a matplotlib or disk problem
        return RunPlots(run_dir, [], f"{type(exc).__name__}: {exc}")
    return RunPlots(run_dir, written)


def plot_request(request: PlotRequest) -> Plotted:
    """`plot_run`'s work: a suite stands for its runs, the figures go where `out` says or
    beside the one run (suite) drawn, and every unfinished run drawn is a warning. A run whose
    launcher died, drawn as its readers take it, is settled where figures went into its
    directory (or its suite's): the command writes there anyway (`settle_written`)."""
    runs, out, formats = request.runs, request.out, request.formats
    peak, labels = request.peak, request.labels or None
    from commbench.lists import split_list
    from commbench.numbers import parse_number
    from commbench.results.lifecycle import settle_written
    from commbench.results.runs import is_suite, load_suite, stored_at
    from commbench.results.runs import load_run as load_one
    from commbench.results.store import PLOTS_DIR

    given: Sequence[Any] = runs if isinstance(runs, list | tuple) else [runs]
    paths = [stored_at(r) for r in given]
    peak_gbps = None
    if peak is not None:
        peak_gbps = check_peak(parse_number(str(peak), "--peak"))
    expanded: list[Path] = []
    for path in paths:  # a suite directory stands for every run it holds
        if is_suite(path):
            expanded += [path / e.path for e in load_suite(path).entries if e.path]
        else:
            expanded.append(path)
    loaded = [load_one(p).held_here() for p in expanded]
    warnings = [f"{run.path} {run.unfinished}" for run in loaded if run.unfinished]
    single = paths[0] if len(paths) == 1 else None  # one run, or one suite
    target = Path(out) if out is not None else None
    if target is None:
        target = single / PLOTS_DIR if single is not None else Path(PLOTS_DIR)
    names = check_labels(list(labels) if labels else None, loaded)
    fmts = split_list(formats, "--formats") if isinstance(formats, str) else list(formats)
    written = plot_runs(loaded, target, fmts, peak_gbps=peak_gbps, labels=names, reads=paths)
    # figures written into a run (RUN_DIR/plots) end it there too, if its launcher died
    settle_written(written, [*paths, *(r.path for r in loaded)], "commbench plot")
    return Plotted(written=list(written), warnings=warnings)
