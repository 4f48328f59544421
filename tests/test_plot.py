"""Plots: the data handed to matplotlib (figure specs), and the files written from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.report.figures import (
    all_figures,
    context_title,
    op_figures,
    p2p_figures,
    strategies_figure,
)
from commbench.report.plots import size_ticks, write_run_plots
from commbench.results.record import RunRecord
from commbench.results.runs import load_run
from commbench.results.runs import load_run as load_run_any
from commbench.results.schema import SCHEMA_VERSION
from commbench.results.store import RunDir, write_results


def write_meta(run_dir: Path, meta: dict[str, Any]) -> None:
    """A hand-made run.json, checked as commbench reads one."""
    record = RunRecord.from_dict({"schema_version": SCHEMA_VERSION, **meta}, "test")
    RunDir(run_dir).write_record(record)


RUNS = Path(__file__).parent / "fixtures" / "runs"
GOLDEN = RUNS / "h100x8-golden"
NCCL_LOGS = Path(__file__).parent / "fixtures" / "nccl_tests"


def test_one_figure_per_op_with_busbw_and_latency_panels() -> None:
    run = load_run(GOLDEN)
    figures = op_figures([run])
    assert [f.name for f in figures] == ["all_reduce", "all_gather", "reduce_scatter"]
    ar = figures[0]
    assert ar.title == "all_reduce — NVIDIA H100 80GB HBM3 x8 · nccl 2.21.5 · world size 8"
    bus, lat = ar.panels
    assert (bus.ylabel, bus.ylog, lat.ylabel, lat.ylog) == (
        "busbw (GB/s)",
        False,
        "time (us)",
        True,
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
    labels = [s.label for s in figure.panels[0].series]
    assert labels == ["out-of-place", "in-place"]
    assert figure.panels[0].series[0].y[-1] == 338.82
    assert "(2 nodes)" in figure.title


def test_strategies_figure_has_each_strategy_and_the_plain_op_dashed() -> None:
    figure = strategies_figure([load_run(GOLDEN)])
    assert figure is not None
    (panel,) = figure.panels
    assert [(s.label, s.dashed) for s in panel.series] == [
        ("direct", False),
        ("reduce_scatter_all_gather", False),
        ("ring", False),
        ("all_reduce (plain)", True),
    ]
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
    assert heatmap is not None and heatmap.labels == ["cuda:0", "cuda:1", "cuda:2"]
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
    empty.mkdir()
    write_meta(empty, {"kind": "collectives", "status": "failed", "context": {}})
    write_results(empty, [])
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
