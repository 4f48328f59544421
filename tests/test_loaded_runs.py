"""Every verb that takes a run takes a path or a loaded run (issue 43, item 3): `report_run`
and `export_run` raised `UserError: run: expected a path, got Run` where `compare_runs` took
the same objects."""

from __future__ import annotations

import json
from pathlib import Path

import commbench
from tests.factories import one_op_copy

GOLDEN = Path(__file__).parent / "fixtures" / "runs" / "h100x8-golden"


def test_report_run_takes_a_loaded_run_as_it_takes_its_path() -> None:
    run = commbench.load_run(GOLDEN)
    by_path = commbench.report_run(GOLDEN, images="none").text
    loaded = commbench.report_run(run, images="none", baseline=run).text
    assert by_path.splitlines()[0] == loaded.splitlines()[0]
    assert "PASS" in loaded  # the gate against the loaded baseline is in it


def test_export_run_takes_a_loaded_run_and_a_loaded_baseline() -> None:
    run = commbench.load_run(GOLDEN)
    text = commbench.export_run(run, fmt="nccl-tests-json", op="all_reduce")
    assert json.loads(text) == json.loads(
        commbench.export_run(GOLDEN, fmt="nccl-tests-json", op="all_reduce")
    )
    assert commbench.export_run(run, baseline=run).startswith("# HELP")


def test_compare_runs_takes_both_too() -> None:
    run = commbench.load_run(GOLDEN)
    assert commbench.compare_runs(run, GOLDEN).passed


def test_plot_run_takes_loaded_runs(tmp_path: Path) -> None:
    # one figure (all_reduce of a CPU run): what is plotted is not the question here
    source = one_op_copy(GOLDEN.parent / "cpu-gloo-a", tmp_path / "cpu-gloo-a")
    run = commbench.load_run(source)
    plotted = commbench.plot_run([run, source], out=tmp_path / "plots")
    assert plotted.written and all(f.is_file() for f in plotted.written)
