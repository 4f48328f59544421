"""Plots: the data handed to matplotlib (figure specs), and the files written from it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.report.figures import (
    Figure,
    all_figures,
    context_title,
    op_figures,
    p2p_figures,
    peak_text,
    strategies_figure,
    topology_peak,
)
from commbench.report.plots import (
    BAND_LABEL,
    draw,
    format_time_us,
    size_ticks,
    write_run_plots,
)
from commbench.results.runs import load_run
from commbench.results.runs import load_run as load_run_any
from tests.factories import one_op_copy, write_meta, write_run

RUNS = Path(__file__).parent / "fixtures" / "runs"
GOLDEN = RUNS / "h100x8-golden"
NCCL_LOGS = Path(__file__).parent / "fixtures" / "nccl_tests"


def test_one_figure_per_op_with_busbw_and_latency_panels() -> None:
    run = load_run(GOLDEN)
    figures = op_figures([run])
    assert [f.name for f in figures] == ["all_reduce", "all_gather", "reduce_scatter"]
    ar = figures[0]
    assert ar.title == "all_reduce — NVIDIA H100 80GB HBM3 x8 · nccl 2.21.5 · world size 8"
    lat, bus = ar.panels
    # both log-log: a linear busbw axis hides everything below ~128K
    assert (lat.title, lat.ylabel, lat.ylog, lat.ytime) == ("latency", "time per call", True, True)
    assert (bus.title, bus.ylabel, bus.ylog, bus.ytime) == (
        "bus bandwidth",
        "bus bandwidth (GB/s)",
        True,
        False,
    )
    (series,) = bus.series
    rows = sorted(
        (r for r in run.rows if r.op == "all_reduce" and not r.strategy), key=lambda r: r.size_bytes
    )
    assert series.x == [r.size_bytes for r in rows]
    assert series.y == [r.busbw_gbps for r in rows]
    assert lat.series[0].y == [r.time_us for r in rows]
    assert series.label == "h100x8-golden"
    # the interquartile band around each line: the noise to read a gap against
    assert lat.series[0].band == [(r.stats.q1, r.stats.q3) for r in rows]
    low, high = series.band[-1]
    big = rows[-1]
    assert low == pytest.approx(big.busbw_gbps * big.time_us / big.stats.q3)
    assert high == pytest.approx(big.busbw_gbps * big.time_us / big.stats.q1)
    assert low <= big.busbw_gbps <= high


def test_several_runs_give_one_line_per_run() -> None:
    runs = [load_run(RUNS / "cpu-gloo-a"), load_run(RUNS / "cpu-gloo-b")]
    figures = op_figures(runs)
    assert [f.name for f in figures] == ["all_reduce", "all_gather", "reduce_scatter"]
    for figure in figures:
        assert [s.label for s in figure.panels[0].series] == ["cpu-gloo-a", "cpu-gloo-b"]
        assert figure.title.endswith("CPU · gloo · world size 2")
    a, b = figures[0].panels[0].series
    assert a.x == b.x and a.y != b.y


def test_runs_from_different_machines_are_named_by_their_context(tmp_path: Path) -> None:
    runs = [load_run(GOLDEN), load_run(RUNS / "cpu-gloo-a")]
    (figure, *_) = op_figures(runs)
    labels = [s.label for s in figure.panels[0].series]
    assert labels == [
        "h100x8-golden (NVIDIA H100 80GB HBM3 x8 · nccl 2.21.5 · world size 8)",
        "cpu-gloo-a (CPU · gloo · world size 2)",
    ]
    assert " vs " in figure.title


def test_imported_nccl_tests_run_plots_both_placements(tmp_path: Path) -> None:
    from commbench.importers.nccl_tests import import_log

    run = load_run(import_log(NCCL_LOGS / "h100x16_2nodes_all_reduce.log", tmp_path))
    (figure,) = op_figures([run])
    labels = [s.label for s in figure.panels[1].series]
    assert labels == ["out-of-place", "in-place"]
    assert figure.panels[1].series[0].y[-1] == 338.82
    assert "(2 nodes)" in figure.title


def test_strategies_figure_has_each_strategy_and_the_plain_op_dashed() -> None:
    figure = strategies_figure([load_run(GOLDEN)])
    assert figure is not None
    # latency beside bandwidth: small messages are where strategies differ 2-5x
    lat, bus = figure.panels
    assert (lat.title, lat.ytime, bus.title, bus.ytime) == ("latency", True, "bus bandwidth", False)
    for panel in (lat, bus):
        assert [(s.label, s.dashed) for s in panel.series] == [
            ("direct", False),
            ("reduce_scatter_all_gather", False),
            ("ring", False),
            ("all_reduce (plain)", True),
        ]
    run = load_run(GOLDEN)
    ring = sorted((r for r in run.rows if r.strategy == "ring"), key=lambda r: r.size_bytes)
    assert lat.series[2].y == [r.time_us for r in ring]
    assert bus.series[2].y == [r.busbw_gbps for r in ring]
    assert strategies_figure([load_run(RUNS / "cpu-gloo-a")]) is None


def p2p_row(src: int, dst: int, size: int, gbps: float, mode: str = "sequential") -> dict:
    """A stored P2PRow (commbench.p2p.schema), as `commbench p2p` writes one."""
    ms = size / (gbps * 1e9) * 1e3
    return {
        **dict.fromkeys(("peak_gbps", "ceiling_gbps", "expected_gbps", "efficiency", "p2p")),
        **dict.fromkeys(("min_ms", "q1_ms", "q3_ms", "p95_ms", "max_ms", "mean_ms"), ms),
        "step": 0,
        "test": "bandwidth",
        "mode": mode,
        "direction": "uni",
        "copy": "p2p",
        "src": src,
        "dst": dst,
        "pair": f"{src}->{dst}",
        "size_bytes": size,
        "dtype": "float32",
        "time_ms": ms,
        "bw_gbps": gbps,
        "link": "NV4",
        "nvlinks": 4,
        "path": "nvlink",
        "suspicious": False,
        "diagnosis": "",
        "check": "ok",
        "stddev_ms": 0.0,
        "cv": 0.0,
        "n": 3,
        "samples_ms": [ms] * 3,
    }


def test_p2p_heatmap_from_a_p2p_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "p2p"
    run_dir.mkdir()
    context = {"device": "cuda", "device_names": ["NVIDIA A100-SXM4-80GB"] * 3, "device_count": 3}
    write_meta(run_dir, {"kind": "p2p", "status": "complete", "context": context})
    rows = [
        p2p_row(s, d, size, 10.0 * s + d + size / 1e9)
        for s in range(3)
        for d in range(3)
        if s != d
        for size in (1 << 20, 1 << 30)
    ]
    rows.append(p2p_row(0, 1, 1 << 30, 999.0, mode="concurrent"))  # not the link alone
    (run_dir / "results.json").write_text(json.dumps({"schema_version": 1, "rows": rows}))
    run = load_run_any(run_dir)
    assert op_figures([run]) == []  # copies are not an op curve
    (figure,) = p2p_figures([run])
    heatmap = figure.heatmap
    assert heatmap is not None and heatmap.row_labels == ["cuda:0", "cuda:1", "cuda:2"]
    assert heatmap.col_labels == heatmap.row_labels and heatmap.title == figure.title
    assert heatmap.values[0][0] is None
    assert heatmap.values[2][1] == pytest.approx(21 + (1 << 30) / 1e9)  # largest size, alone
    assert heatmap.values[0][1] == pytest.approx(1 + (1 << 30) / 1e9)
    assert "A100" in figure.title
    result = CliRunner().invoke(app, ["plot", str(run_dir), "-o", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["p2p.png", "p2p.svg"]
    assert (tmp_path / "f" / "p2p.png").read_bytes().startswith(b"\x89PNG")


def test_size_ticks_are_powers_of_two_and_thinned() -> None:
    assert size_ticks(1024, 8192) == [1024, 2048, 4096, 8192]
    ticks = size_ticks(8, 8 << 30)
    assert len(ticks) <= 12 and ticks[0] == 8 and all(t & (t - 1) == 0 for t in ticks)


def test_context_title_of_a_cpu_run() -> None:
    assert context_title(load_run(RUNS / "cpu-gloo-a").context) == "CPU · gloo · world size 2"


def test_plot_command_writes_png_and_svg(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["plot", str(GOLDEN), "--out", str(tmp_path / "figs")])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    stems = ["all_gather", "all_reduce", "reduce_scatter", "strategies"]
    assert names == sorted(f"{s}.{ext}" for s in stems for ext in ("png", "svg"))
    png = (tmp_path / "figs" / "all_reduce.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    svg = (tmp_path / "figs" / "all_reduce.svg").read_text()
    assert "<svg" in svg and "H100" in svg  # the title is in the drawing
    assert sorted(result.stdout.split()) == sorted(str(tmp_path / "figs" / n) for n in names)


def test_plot_defaults_to_the_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "cpu-gloo-a", run)
    result = CliRunner().invoke(app, ["plot", str(run), "--formats", "png"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (run / "plots").iterdir()) == [
        "all_gather.png",
        "all_reduce.png",
        "reduce_scatter.png",
    ]


def test_plot_refuses_bad_input(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    write_run(empty, [], {"kind": "collectives", "status": "failed", "context": {}})
    result = CliRunner().invoke(app, ["plot", str(empty)])
    assert result.exit_code == 2 and "nothing to plot" in result.stderr
    assert CliRunner().invoke(app, ["plot", str(tmp_path / "missing")]).exit_code == 2
    bad = CliRunner().invoke(app, ["plot", str(GOLDEN), "-o", str(tmp_path), "--formats", "gif"])
    assert bad.exit_code == 2 and "gif" in bad.stderr


def test_write_run_plots_never_raises(tmp_path: Path) -> None:
    plots = write_run_plots(tmp_path / "nothing-here")
    assert plots.problem is not None and plots.written == []
    assert str(plots).startswith("no plots:")
    assert all_figures([]) == []


@pytest.mark.integration
def test_a_finished_collectives_run_writes_its_plots(tmp_path: Path) -> None:
    args = ["collectives", "--ops", "all_reduce,barrier", "--sizes", "1K,64K", "--min-time", "0.02"]
    result = CliRunner().invoke(app, [*args, "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (run_dir,) = tmp_path.iterdir()
    # barrier moves no bytes: no size axis to plot it on
    assert sorted(p.name for p in (run_dir / "plots").iterdir()) == [
        "all_reduce.png",
        "all_reduce.svg",
    ]
    assert "plot(s) in" in result.stderr


# -- axes, units, peaks and labels, read off the matplotlib Figure the core draws ------------


def drawn(figure: Figure) -> Any:
    """The matplotlib Figure for a spec, laid out so its tick labels exist."""
    fig = draw(figure)
    fig.draw_without_rendering()
    return fig


def texts(fig: Any) -> list[str]:
    """Every piece of text in a drawn figure: titles, axis labels, ticks, legends, notes."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def peak_lines(ax: Any) -> list[float]:
    return [line.get_ydata()[0] for line in ax.get_lines() if line.get_gid() == "peak"]


def test_op_figure_axes_are_log_log_with_size_and_time_labels() -> None:
    (figure, *_) = op_figures([load_run(GOLDEN)])
    fig = drawn(figure)
    try:
        lat, bus = fig.axes
        assert [ax.get_xscale() for ax in (lat, bus)] == ["log", "log"]
        assert [ax.get_yscale() for ax in (lat, bus)] == ["log", "log"]
        for ax in (lat, bus):
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            assert ticks == [
                "1K",
                "4K",
                "16K",
                "64K",
                "256K",
                "1M",
                "4M",
                "16M",
                "64M",
                "256M",
                "1G",
            ]
            assert ax.get_xlabel() == "message size"
        times = [t.get_text() for t in lat.get_yticklabels() if t.get_text()]
        assert "20 µs" in times and "1 ms" in times
        assert all(t.endswith((" µs", " ms")) for t in times), times
        assert lat.get_ylabel() == "time per call" and bus.get_ylabel() == "bus bandwidth (GB/s)"
        words = " ".join(texts(fig))
        assert "µs" in words and not re.search(r"\bus\b", words)
    finally:
        plt_close(fig)


def test_time_labels_change_unit_with_the_decade() -> None:
    assert [format_time_us(v) for v in (0.5, 20, 500, 2000, 5e6)] == [
        "500 ns",
        "20 µs",
        "500 µs",
        "2 ms",
        "5 s",
    ]


def plt_close(fig: Any) -> None:
    """Nothing to close: commbench's figures are in no pyplot registry (see commbench.drawing)."""
    del fig


def test_peak_from_the_run_topology_is_the_slowest_link_among_its_gpus() -> None:
    run = load_run(GOLDEN)
    assert topology_peak(run) == 450.0  # NV18 x 25 GB/s between every pair of the 8 H100s
    (figure, *_) = op_figures([run])
    lat, bus = figure.panels
    assert [(p.gbps, p.label) for p in bus.peaks] == [(450.0, "peak 450 GB/s")]
    assert lat.peaks == []  # a bandwidth is not a time
    fig = drawn(figure)
    try:
        assert peak_lines(fig.axes[1]) == [450.0] and peak_lines(fig.axes[0]) == []
        assert "peak 450 GB/s" in texts(fig)
        low, high = fig.axes[1].get_ylim()
        assert low < 450.0 < high
    finally:
        plt_close(fig)
    strategies = strategies_figure([run])
    assert strategies is not None and strategies.panels[1].peaks[0].gbps == 450.0


def test_peak_of_a_run_on_two_dgx1v_gpus_is_their_link(tmp_path: Path) -> None:
    """cuda:0 and cuda:3 are NV2 (50 GB/s), cuda:0 and cuda:5 SYS: the slowest link counts."""
    from commbench.topology import parse_nvidia_smi

    smi = (
        Path(__file__).parent / "fixtures/topology/smi_dgx1v_v100_hybrid_cube_mesh.txt"
    ).read_text()
    snapshot = parse_nvidia_smi(smi, gpu="Tesla V100-SXM2-16GB").to_dict()

    def on(devices: list[str], **extra: Any) -> float | None:
        run_dir = tmp_path / "-".join(devices).replace(":", "")
        shutil.copytree(RUNS / "cpu-gloo-a", run_dir)
        data = json.loads((run_dir / "run.json").read_text())
        data["context"].update(
            topology=snapshot,
            device="cuda",
            ranks=[{"rank": i, "device": d} for i, d in enumerate(devices)],
            world_size=len(devices),
            group_size=len(devices),
            **extra,
        )
        (run_dir / "run.json").write_text(json.dumps(data))
        return topology_peak(load_run(run_dir))

    assert on(["cuda:0", "cuda:3"]) == 50.0
    assert on(["cuda:0", "cuda:3", "cuda:5"]) == pytest.approx(15.754, abs=1e-3)
    assert peak_text(15.754) == "peak 15.8 GB/s" and peak_text(0.125) == "peak 0.125 GB/s"
    assert on(["cuda:0"]) is None  # one GPU: no link between GPUs
    assert on(["cuda:1", "cuda:2"], nnodes=2) is None  # the network is not in the snapshot


def test_no_peak_line_on_a_cpu_run_unless_given() -> None:
    run = load_run(RUNS / "cpu-gloo-a")
    assert topology_peak(run) is None
    figures = op_figures([run])
    assert all(p.peaks == [] for f in figures for p in f.panels)
    fig = drawn(figures[0])
    try:
        assert all(peak_lines(ax) == [] for ax in fig.axes)
        assert not any(t.startswith("peak") for t in texts(fig))
    finally:
        plt_close(fig)
    (given, *_) = op_figures([run], peak_gbps=12.5)
    assert [p.label for p in given.panels[1].peaks] == ["peak 12.5 GB/s"]
    fig = drawn(given)
    try:
        assert peak_lines(fig.axes[1]) == [12.5] and "peak 12.5 GB/s" in texts(fig)
    finally:
        plt_close(fig)


def test_labels_name_the_legend_entries() -> None:
    runs = [load_run(RUNS / "cpu-gloo-a"), load_run(RUNS / "cpu-gloo-b")]
    (figure, *_) = op_figures(runs, labels=["before", "after"])
    assert [s.label for p in figure.panels for s in p.series] == ["before", "after"] * 2
    fig = drawn(figure)
    try:
        (legend,) = fig.legends
        # the runs, then what their shaded bands are
        assert [t.get_text() for t in legend.get_texts()] == ["before", "after", BAND_LABEL]
    finally:
        plt_close(fig)


def test_a_label_that_starts_with_an_underscore_is_in_the_legend() -> None:
    """matplotlib's own legend list drops labels that start with "_" (its mark for a line
    kept out): a run labelled "_canary" (or a host named so) is still named."""
    runs = [load_run(RUNS / "cpu-gloo-a"), load_run(RUNS / "cpu-gloo-b")]
    (figure, *_) = op_figures(runs, labels=["_canary", "main"])
    fig = drawn(figure)
    try:
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == ["_canary", "main", BAND_LABEL]
    finally:
        plt_close(fig)


def test_plot_label_and_peak_through_the_cli(tmp_path: Path) -> None:
    # all_reduce alone (the one figure read), under the fixtures' names
    runs = [str(one_op_copy(RUNS / name, tmp_path / name)) for name in ("cpu-gloo-a", "cpu-gloo-b")]
    out = tmp_path / "figs"
    args = ["plot", *runs, "-o", str(out), "--formats", "svg", "--peak", "2.5"]
    result = CliRunner().invoke(app, [*args, "--label", "before", "--label", "after"])
    assert result.exit_code == 0, result.output
    svg = (out / "all_reduce.svg").read_text()  # matplotlib keeps each text in a comment
    assert "before" in svg and "after" in svg and "peak 2.5 GB/s" in svg
    assert "cpu-gloo-a" not in svg


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--label", "only-one"], "1 --label for 2 run(s): give one per run, in order"),
        (["--label", "a", "--label", "b", "--label", "c"], "3 --label for 2 run(s)"),
        (["--label", "a", "--label", " "], "--label must be printable text, not empty"),
        (["--peak", "fast"], "--peak: expected a number (digits 0-9), got 'fast'"),
        (["--peak", "0"], "--peak must be a bandwidth in GB/s"),
        (["--peak", "1e9"], "--peak must be a bandwidth in GB/s"),
    ],
)
def test_plot_bad_label_or_peak_is_one_line_and_exit_2(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    runs = [str(RUNS / "cpu-gloo-a"), str(RUNS / "cpu-gloo-b")]
    result = CliRunner().invoke(app, ["plot", *runs, "-o", str(tmp_path / "f"), *extra])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "f").exists()


def test_suite_runs_are_named_by_their_entries(tmp_path: Path) -> None:
    from commbench.results.record import Entry, RunStatus, SuiteRecord
    from commbench.results.store import SuiteDir

    suite = tmp_path / "suite"
    suite.mkdir()
    # all_reduce alone: the one figure read
    one_op_copy(RUNS / "cpu-gloo-a", suite / "20240611-090000-gloo-a")
    one_op_copy(RUNS / "cpu-gloo-b", suite / "20240611-090100-gloo-b")
    done = RunStatus.COMPLETE
    entries = [
        Entry(name="baseline", section="collectives", path="20240611-090000-gloo-a", status=done),
        Entry(name="tuned", section="collectives", path="20240611-090100-gloo-b", status=done),
    ]
    SuiteDir(suite).write_record(SuiteRecord(name="demo", status=done, entries=entries))
    runs = [load_run(suite / e.path) for e in entries if e.path]
    (figure, *_) = op_figures(runs)
    assert [s.label for s in figure.panels[0].series] == ["baseline", "tuned"]
    # a run directory given alone, outside its suite, keeps its folder name
    assert (
        op_figures([load_run(RUNS / "cpu-gloo-a"), load_run(RUNS / "cpu-gloo-b")])[0]
        .panels[0]
        .series[0]
        .label
        == "cpu-gloo-a"
    )
    # through the CLI, the suite directory stands for its runs: --label counts them
    result = CliRunner().invoke(app, ["plot", str(suite), "--formats", "svg"])
    assert result.exit_code == 0, result.output
    assert "tuned" in (suite / "plots" / "all_reduce.svg").read_text()
    bad = CliRunner().invoke(app, ["plot", str(suite), "--label", "one"])
    assert bad.exit_code == 2 and "1 --label for 2 run(s)" in bad.stderr


def test_runs_with_different_peaks_name_theirs() -> None:
    runs = [load_run(GOLDEN), load_run(RUNS / "cpu-gloo-a")]
    (figure, *_) = op_figures(runs)
    assert [p.label for p in figure.panels[1].peaks] == ["peak 450 GB/s (h100x8-golden)"]
    (named, *_) = op_figures(runs, labels=["h100", "laptop"])
    assert [p.label for p in named.panels[1].peaks] == ["peak 450 GB/s (h100)"]


def test_a_labelled_run_is_named_even_alone_in_its_figure() -> None:
    """`--label` on one run, or an op only one of several runs measured: the single line is
    still named in a legend (a figure without one would not say whose line it is)."""
    run = load_run(RUNS / "cpu-gloo-a")
    (alone, *_) = op_figures([run])
    fig = drawn(alone)
    try:
        # one run, not named: no other line to tell it from (the legend says only what the
        # shaded band is)
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == [BAND_LABEL]
    finally:
        plt_close(fig)
    (named, *_) = op_figures([run], labels=["baseline"])
    fig = drawn(named)
    try:
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == ["baseline", BAND_LABEL]
    finally:
        plt_close(fig)


MATHTEXT = ["$\\frac{$", "run $x^$ b", "a_b^c $x$", "\\alpha$"]


def test_user_text_is_drawn_literally_never_parsed_as_mathtext(tmp_path: Path) -> None:
    """A run directory's name and a --label reach matplotlib as titles and legend entries:
    mathtext in them once raised a parse error. Each is drawn as written: the figures in
    SVG, which holds the text to check, and the heatmap in PNG, so both backends draw it.
    One run per text, all in one figure, named by their directories and then by labels
    (runs of all_reduce alone: the one figure read)."""
    runs = [
        str(one_op_copy(RUNS / ("cpu-gloo-a", "cpu-gloo-b")[i % 2], tmp_path / f"run {text}"))
        for i, text in enumerate(MATHTEXT)
    ]
    for labels in ([], [arg for text in MATHTEXT for arg in ("--label", text)]):
        out = tmp_path / f"figs{len(labels)}"
        args = ["plot", *runs, "-o", str(out), "--formats", "svg"]
        result = CliRunner().invoke(app, [*args, *labels])
        assert result.exit_code == 0, result.output
        svg = (out / "all_reduce.svg").read_text()
        for text in MATHTEXT:  # verbatim, in a comment
            assert text.replace("&", "&amp;").replace("<", "&lt;") in svg, (labels, text)
    # the p2p and diagnose heatmaps draw through the same literal text
    from commbench.heatmap import Heatmap, write_heatmap

    n = len(MATHTEXT)
    title = " ".join(MATHTEXT)
    heatmap = Heatmap(
        values=[[1.0] * n] * n, row_labels=MATHTEXT, col_labels=MATHTEXT, title=title, unit=title
    )
    write_heatmap(heatmap, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0


def test_drawing_leaves_the_users_matplotlib_as_it_was(tmp_path: Path) -> None:
    """The Python API draws inside a user's process (a notebook, a GUI): commbench's figures
    change neither the backend, nor rcParams, nor pyplot's list of open figures."""
    import matplotlib
    import matplotlib.pyplot as plt

    before_backend = matplotlib.get_backend()
    before = dict(matplotlib.rcParams)
    open_before = plt.get_fignums()
    write_run_plots(one_op_copy(RUNS / "cpu-gloo-a", tmp_path / "run"))
    assert list((tmp_path / "run" / "plots").glob("*.png"))
    assert matplotlib.get_backend() == before_backend
    assert dict(matplotlib.rcParams) == before
    assert plt.get_fignums() == open_before
