"""What a run of both forms and several dtypes looks like from the outside: the streamed lines
and the summary name each form, `compare` pairs points by form and dtype, an nccl-tests log
(which measures both forms) reads side by side. Real torchrun gloo workers at world 2 on CPU
through the real CLI, tiny sizes and iteration counts; nothing here asserts a timing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.compare import GateSettings, Mark, compare_runs
from commbench.results.exporters import to_table
from commbench.results.runs import load_run
from commbench.results.store import write_results
from commbench.results.summary import render, summarise

pytestmark = pytest.mark.integration

runner = CliRunner()
FAST = ["--nproc", "2", "--device", "cpu", "--iters", "3", "--warmup", "1", "--no-plot"]
NCCL_LOG = Path(__file__).parent / "fixtures" / "nccl_tests" / "h100x16_2nodes_all_reduce.log"


@pytest.fixture(scope="module")
def both_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One run of all_reduce and all_gather in two dtypes, all_gather both ways: its
    directory and what it streamed on stderr."""
    here = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("both"))
    try:
        result = runner.invoke(
            app,
            [
                "collectives",
                *FAST,
                "--ops",
                "all_reduce,all_gather",
                "--sizes",
                "1K-4K",
                "--in-place",
                "both",
                "--dtype",
                "float32,bfloat16",
                "-o",
                "out",
            ],
        )
        assert result.exit_code == 0, result.output
        (run_dir,) = [p.resolve() for p in Path("out").iterdir() if p.is_dir()]
        return run_dir, result.stderr
    finally:
        os.chdir(here)


def test_streamed_lines_name_each_form_of_a_two_form_op(both_run: tuple[Path, str]) -> None:
    _, err = both_run
    gather = [ln for ln in err.splitlines() if "all_gather float32" in ln]
    assert len(gather) == 6  # 3 sizes x 2 forms: the sweep out of place, then in place
    assert ["out-of-place" in ln for ln in gather] == [True] * 3 + [False] * 3
    assert all(" in-place " in ln for ln in gather[3:])
    # all_reduce has one form (torch writes into its input): it never says out-of-place
    reduce = [ln for ln in err.splitlines() if "all_reduce float32" in ln]
    assert len(reduce) == 3 and not any("out-of-place" in ln for ln in reduce)


def test_the_summary_names_each_form_per_dtype(both_run: tuple[Path, str]) -> None:
    run = load_run(both_run[0])
    labels = [ln.split("  ")[0] for ln in render(summarise(run.rows)).splitlines()]
    for dtype in ("float32", "bfloat16"):
        assert f"all_gather {dtype} 2 ranks out-of-place" in labels
        assert f"all_gather {dtype} 2 ranks in-place" in labels
        assert f"all_reduce {dtype} sum 2 ranks in-place" in labels
    assert not any(lb.startswith("all_reduce") and "out-of-place" in lb for lb in labels)


def test_compare_pairs_points_by_form_and_dtype(both_run: tuple[Path, str], tmp_path: Path) -> None:
    base_dir = both_run[0]
    base = load_run(base_dir)
    gone = ("all_gather", "bfloat16", False, 2048)
    new_dir = tmp_path / "new"
    shutil.copytree(base_dir, new_dir)
    kept = [r for r in base.rows if (r.op, r.dtype, r.in_place, r.size_bytes) != gone]
    write_results(new_dir, kept)
    result = compare_runs(base, load_run(new_dir), GateSettings())
    # every other point found its twin (same op, size, dtype and form); the dropped one alone
    # is missing: a key without the form or the dtype would have paired it with another
    (missing,) = result.marked(Mark.missing)
    assert (missing.op, missing.dtype, missing.in_place, missing.size_bytes) == gone


def test_an_nccl_tests_log_reads_side_by_side_and_a_lost_form_is_dashes(tmp_path: Path) -> None:
    """nccl-tests measures all_reduce both ways: the import gets the two column groups; a size
    whose in-place row is absent keeps its out-of-place cells, dashes in place."""
    result = runner.invoke(app, ["import", "nccl-tests", str(NCCL_LOG), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = load_run(Path(result.stdout.strip())).rows
    dropped = max(r.size_bytes for r in rows)
    rows = [r for r in rows if not (r.in_place and r.size_bytes == dropped)]
    lines = to_table(rows).splitlines()
    assert lines[0] == "# all_reduce  float32  op=sum  16 ranks  out-of-place | in-place"
    last = lines[1 + len({r.size_bytes for r in rows})].split()
    assert last[-5:] == ["-"] * 5 and last[6] == "ok"
