"""The regression gate: golden run directories, and copies degraded by scaling their samples.

Never a timing assertion: every run here is a stored fixture or derived from one (asv-style).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from commbench.cli import app
from commbench.compare import (
    Comparison,
    GateSettings,
    Mark,
    compare_runs,
    context_mismatches,
    mann_whitney_greater,
    parse_fraction,
)
from commbench.errors import UserError
from commbench.results.record import RunRecord
from commbench.results.runs import Run, load_run
from commbench.results.schema import CHECK_FAILED, ResultRow
from tests.factories import make_row, rescaled, write_run

RUNS = Path(__file__).parent / "fixtures" / "runs"
GOLDEN = RUNS / "h100x8-golden"


def derive(
    tmp_path: Path,
    name: str,
    change: Callable[[ResultRow], ResultRow | None],
    context: Callable[[dict], None] | None = None,
    source: Path = GOLDEN,
) -> Path:
    """A copy of a fixture run with each row passed through `change` (None drops it)."""
    run = load_run(source)
    rows = [r2 for r in run.rows if (r2 := change(r)) is not None]
    meta = run.record.to_dict()
    meta["run_id"] = name
    if context:
        context(meta["context"])
    return write_run(tmp_path / name, rows, RunRecord.from_dict(meta, name))


def bandwidth_bound(row: ResultRow) -> bool:
    return row.size_bytes >= 16 << 20


def compare(base: Path, new: Path, **settings: Any) -> Comparison:
    return compare_runs(load_run(base), load_run(new), GateSettings(**settings))


# -- statistics --------------------------------------------------------------------------------


def test_mann_whitney_by_hand() -> None:
    # U = 9 of 9 pairs, mean 4.5, variance 9/12 * 7: z = (9 - 4.5 - 0.5) / sqrt(5.25)
    p = mann_whitney_greater([4, 5, 6], [1, 2, 3])
    assert p == pytest.approx(0.5 * math.erfc(4 / math.sqrt(5.25) / math.sqrt(2)))
    assert mann_whitney_greater([1, 2, 3], [4, 5, 6]) > 0.95


def test_mann_whitney_all_tied_is_no_evidence() -> None:
    assert mann_whitney_greater([2.0] * 5, [2.0] * 7) == 1.0


def test_mann_whitney_matches_scipy_with_ties() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    x = [3, 3, 4, 5, 5, 5, 8, 9, 1, 2]
    y = [1, 1, 2, 3, 3, 4, 4, 4, 6]
    expected = scipy_stats.mannwhitneyu(x, y, alternative="greater", method="asymptotic").pvalue
    assert mann_whitney_greater(x, y) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "value"), [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), (0.2, 0.2)]
)
def test_parse_fraction(text: str, value: float) -> None:
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "150%", "-1%", "five", True])
def test_parse_fraction_refuses(text: object) -> None:
    with pytest.raises(UserError):
        parse_fraction(text)  # type: ignore[arg-type]


# -- verdicts ----------------------------------------------------------------------------------


def test_identical_runs_pass() -> None:
    result = compare(GOLDEN, GOLDEN)
    assert result.exit_code == 0
    assert {p.mark for p in result.points} == {Mark.same}
    assert result.verdict.startswith("PASS")


def test_twenty_percent_slower_at_bandwidth_bound_sizes_fails(tmp_path: Path) -> None:
    new = derive(tmp_path, "slow", lambda r: rescaled(r, 0.8) if bandwidth_bound(r) else r)
    result = compare(GOLDEN, new)
    assert result.exit_code == 1
    worse = {(p.op, p.strategy, p.size_bytes) for p in result.marked(Mark.worse)}
    expected = {
        (r.op, r.strategy, r.size_bytes) for r in load_run(GOLDEN).rows if bandwidth_bound(r)
    }
    assert worse == expected
    point = result.marked(Mark.worse)[0]
    assert point.ratio == pytest.approx(0.8, rel=1e-6)
    assert point.p_value is not None and point.p_value < 1e-6 and not point.latency_bound


def test_small_drops_and_latency_noise_pass(tmp_path: Path) -> None:
    # 10% slower at small (latency-bound) sizes, 3% slower elsewhere: within tolerance.
    def change(r: ResultRow) -> ResultRow:
        return rescaled(r, 0.90 if r.size_bytes <= 64 << 10 else 0.97)

    result = compare(GOLDEN, derive(tmp_path, "meh", change))
    assert result.exit_code == 0
    small = [p for p in result.points if p.size_bytes <= 64 << 10]
    assert small and all(p.latency_bound and p.threshold == 0.15 for p in small)


def test_latency_bound_points_fail_beyond_their_own_tolerance(tmp_path: Path) -> None:
    new = derive(tmp_path, "lat", lambda r: rescaled(r, 0.7) if r.size_bytes == 1024 else r)
    result = compare(GOLDEN, new)
    assert result.exit_code == 1
    assert all(p.size_bytes == 1024 and p.latency_bound for p in result.regressions)


def test_faster_is_better_and_passes(tmp_path: Path) -> None:
    result = compare(GOLDEN, derive(tmp_path, "fast", lambda r: rescaled(r, 1.25)))
    assert result.exit_code == 0
    assert {p.mark for p in result.points} == {Mark.better}


def test_a_single_noisy_point_warns_instead_of_failing(tmp_path: Path) -> None:
    target = ("all_reduce", "", 256 << 20)

    def change(r: ResultRow) -> ResultRow:
        if (r.op, r.strategy, r.size_bytes) == target:
            return rescaled(r, 0.8, spread=15.0)  # 20% slower, cv ~0.3
        return r

    result = compare(GOLDEN, derive(tmp_path, "noisy", change))
    assert result.exit_code == 0
    (noisy,) = result.marked(Mark.noisy)
    assert (noisy.op, noisy.strategy, noisy.size_bytes) == target
    assert noisy.new_cv is not None and noisy.new_cv > 0.2 and "spread" in noisy.reason
    assert "warnings" in result.verdict


def test_a_drop_that_is_not_significant_warns(tmp_path: Path) -> None:
    def change(r: ResultRow) -> ResultRow:
        if (r.op, r.strategy, r.size_bytes) != ("all_gather", "", 1 << 30):
            return r
        # Three samples, one of them fast: 50% slower median, but not significant.
        return ResultRow.measured(
            samples_us=[r.time_us * 0.9, r.time_us * 2, r.time_us * 2.1],
            size_bytes=r.size_bytes,
            busbw_factor=r.busbw_gbps / r.algbw_gbps,  # type: ignore[operator]
            **{k: getattr(r, k) for k in ("op", "dtype", "reduce_op", "world_size", "count")},
            check=r.check,
        )

    result = compare(GOLDEN, derive(tmp_path, "few", change), noisy_cv=10.0)
    assert result.exit_code == 0
    (point,) = result.marked(Mark.noisy)
    assert point.p_value is not None and point.p_value >= 0.01
    assert "not significant" in point.reason


def test_a_missing_point_fails(tmp_path: Path) -> None:
    gone = ("reduce_scatter", 64 << 20)
    new = derive(tmp_path, "gap", lambda r: None if (r.op, r.size_bytes) == gone else r)
    result = compare(GOLDEN, new)
    assert result.exit_code == 1
    (missing,) = result.marked(Mark.missing)
    assert (missing.op, missing.size_bytes) == gone
    assert "missing" in result.verdict


def test_a_failed_check_in_the_new_run_counts_as_missing(tmp_path: Path) -> None:
    def change(r: ResultRow) -> ResultRow:
        if (r.op, r.size_bytes) == ("all_gather", 1024):
            r.check = CHECK_FAILED
        return r

    result = compare(GOLDEN, derive(tmp_path, "wrong", change))
    assert result.exit_code == 1
    assert [p.reason for p in result.marked(Mark.missing)] == ["wrong result in the new run"]


def test_points_only_in_the_new_run_are_shown_not_judged(tmp_path: Path) -> None:
    base = derive(tmp_path, "fewer", lambda r: r if r.op != "all_gather" else None)
    result = compare(base, GOLDEN)
    assert result.exit_code == 0
    assert len(result.marked(Mark.new)) == 11


@pytest.mark.parametrize(
    ("edit", "label"),
    [
        (lambda c: c.update(device_names=["NVIDIA A100-SXM4-80GB"]), "GPU model"),
        (lambda c: c.update(world_size=4, group_size=4, ranks=c["ranks"][:4]), "world size"),
        (lambda c: c.update(backend="gloo"), "backend"),
        (lambda c: [p.update(link="PIX") for p in c["topology"]["pairs"]], "topology"),
    ],
)
def test_mismatched_contexts_are_refused(tmp_path: Path, edit: Callable, label: str) -> None:
    other = derive(tmp_path, "elsewhere", lambda r: r, context=edit)
    with pytest.raises(UserError, match=label):
        compare(GOLDEN, other)
    allowed = compare(GOLDEN, other, allow_mismatch=True)
    assert allowed.exit_code == 0 and any(label in m for m in allowed.mismatches)


def test_unknown_context_on_one_side_is_not_a_mismatch() -> None:
    base = load_run(GOLDEN).context
    assert context_mismatches(base, replace(base, topology=None, device_names=[])) == []


def test_a_real_repeat_on_a_noisy_machine_passes_both_ways() -> None:
    # Two real runs of the same sweep on a shared 2-core VM: medians differ up to 3.6x.
    a, b = RUNS / "cpu-gloo-a", RUNS / "cpu-gloo-b"
    for base, new in ((a, b), (b, a)):
        result = compare(base, new)
        assert result.exit_code == 0, result.verdict
        assert result.noisy_baseline
        assert any("baseline is noisy" in n for n in result.notes)
    # ... while the same drops on a quiet baseline would have failed.
    strict = compare(a, b, noisy_cv=10.0)
    assert strict.exit_code == 1


def test_a_noisy_baseline_still_fails_on_missing_points(tmp_path: Path) -> None:
    a = RUNS / "cpu-gloo-a"
    new = derive(tmp_path, "gap", lambda r: None if r.size_bytes == 1024 else r, source=a)
    assert compare(a, new).exit_code == 1


# -- the command -------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["compare", *args])


def test_cli_exit_codes(tmp_path: Path) -> None:
    slow = derive(tmp_path, "slow", lambda r: rescaled(r, 0.8) if bandwidth_bound(r) else r)
    other = derive(tmp_path, "a100", lambda r: r, context=lambda c: c.update(device_names=["A100"]))
    ok = invoke(str(GOLDEN), str(GOLDEN))
    assert ok.exit_code == 0 and "PASS" in ok.stdout
    bad = invoke(str(GOLDEN), str(slow))
    assert bad.exit_code == 1 and "x WORSE" in bad.stdout and "REGRESSION" in bad.stdout
    refused = invoke(str(GOLDEN), str(other))
    assert refused.exit_code == 2 and "not comparable" in refused.stderr
    assert invoke(str(GOLDEN), str(other), "--allow-mismatch").exit_code == 0
    assert invoke(str(GOLDEN), str(tmp_path / "nowhere")).exit_code == 2
    assert invoke(str(GOLDEN), str(GOLDEN), "--tolerance", "5").exit_code == 2


def test_cli_tolerance_decides(tmp_path: Path) -> None:
    slow = derive(tmp_path, "slow", lambda r: rescaled(r, 0.8) if bandwidth_bound(r) else r)
    assert invoke(str(GOLDEN), str(slow), "--tolerance", "25%").exit_code == 0


def test_cli_formats(tmp_path: Path) -> None:
    slow = derive(tmp_path, "slow", lambda r: rescaled(r, 0.8) if bandwidth_bound(r) else r)
    as_json = invoke(str(GOLDEN), str(slow), "--format", "json", "--out", str(tmp_path / "c.json"))
    data = json.loads(as_json.stdout)
    assert data["exit_code"] == 1 and data["counts"]["worse"] == 24
    assert json.loads((tmp_path / "c.json").read_text()) == data
    md = invoke(str(GOLDEN), str(slow), "--format", "md").stdout
    assert md.startswith("## ❌ REGRESSION") and "| size | baseline | new |" in md
    csv_text = invoke(str(GOLDEN), str(slow), "--format", "csv").stdout
    assert csv_text.splitlines()[0].startswith("op,strategy,dtype")
    assert len(csv_text.splitlines()) == 1 + 66


def test_cli_reads_run_json_paths_too(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(GOLDEN, copy)
    assert invoke(str(GOLDEN / "run.json"), str(copy)).exit_code == 0


def test_compare_needs_a_measured_baseline(tmp_path: Path) -> None:
    empty = derive(tmp_path, "empty", lambda r: None)
    with pytest.raises(UserError, match="no measured points"):
        compare_runs(load_run(empty), load_run(GOLDEN))
    assert isinstance(load_run(empty), Run)


def _row(samples: list[float], size: int = 256 << 20) -> ResultRow:
    return make_row(size, samples, world_size=8, busbw_factor=1.75)


def _steady(center: float, n: int = 200) -> list[float]:
    return [center * (1 + 0.02 * ((i * 37) % 11 - 5) / 5) for i in range(n)]


def test_one_outlier_does_not_hide_a_real_slowdown() -> None:
    from commbench.compare import compare_rows

    base = _row(_steady(1000.0))
    slow = _row([*_steady(1400.0, 199), 100_000.0])  # 40% slower, and one descheduled iteration
    assert slow.stats.cv > 1  # the plain cv calls this point very noisy ...
    (point,), _, _ = compare_rows([base], [slow], GateSettings())
    assert point.mark == Mark.worse, point.reason  # ... the robust spread does not


def test_a_noisy_point_still_fails_on_a_collapse_but_warns_within_its_spread() -> None:
    from commbench.compare import compare_rows

    bimodal = [1000.0 if i % 2 else 1600.0 for i in range(200)]  # robust cv ~0.35
    base = _row(bimodal)
    quiet = _row(_steady(1000.0), size=128 << 20)  # a steady point keeps the run's floor low
    for factor, mark in ((1.3, Mark.noisy), (3.0, Mark.worse)):
        new = _row([v * factor for v in bimodal])
        points, _, noisy_baseline = compare_rows([base, quiet], [new, quiet], GateSettings())
        assert not noisy_baseline
        point = next(p for p in points if p.size_bytes == 256 << 20)
        assert point.mark == mark, (factor, point.reason)


def test_one_function_decides_each_point_and_the_summary_agrees_on_latency_bound() -> None:
    from commbench.compare import judge_point
    from commbench.results.summary import bandwidth_bound as summary_bandwidth_bound

    base = _row(_steady(1000.0))
    assert judge_point(base, None, GateSettings()).mark == Mark.missing
    slower = _row(_steady(1100.0))  # 9% slower: past 5%, within the latency tolerance of 15%
    peak = 2 * base.busbw_gbps
    assert not summary_bandwidth_bound(base.busbw_gbps, peak * 1.01)
    assert judge_point(base, slower, GateSettings(), peak=peak).mark == Mark.worse
    latency = judge_point(base, slower, GateSettings(), peak=peak * 1.01)
    assert latency.latency_bound and latency.mark == Mark.same


# -- a new run that did not finish ---------------------------------------------------------


def _with_status(run_dir: Path, status: str, failure: str | None) -> Path:
    record = json.loads((run_dir / "run.json").read_text())
    record.update(status=status, failure=failure)
    record.pop("launcher", None)
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir


@pytest.mark.parametrize(
    ("status", "failure", "verdict"),
    [
        ("failed", "worker failure: rank 1 killed by SIGKILL", "FAIL: the new run failed (worker"),
        ("interrupted", "interrupted", "FAIL: the new run was interrupted (interrupted)"),
        ("running", None, "FAIL: the new run has not finished (no launcher is recorded"),
    ],
)
def test_a_new_run_that_did_not_finish_never_passes(
    tmp_path: Path, status: str, failure: str | None, verdict: str
) -> None:
    """Every point it has is as fast as the baseline's: it still must not pass."""
    new = _with_status(derive(tmp_path, "same", lambda r: r), status, failure)
    result = compare(GOLDEN, new)
    assert not result.regressions
    assert result.exit_code == 1 and result.verdict.startswith(verdict), result.verdict
    cli = CliRunner().invoke(app, ["compare", str(GOLDEN), str(new)])
    assert cli.exit_code == 1
    assert cli.stdout.splitlines()[-1] == result.verdict
    assert cli.stderr.splitlines() == [f"commbench: error: {new}: {result.incomplete}"]


def test_an_unfinished_baseline_is_a_note_not_a_failure(tmp_path: Path) -> None:
    base = _with_status(derive(tmp_path, "base", lambda r: r), "failed", "worker failure")
    result = compare(base, GOLDEN)
    assert result.exit_code == 0
    assert "the baseline failed (worker failure)" in result.notes


def test_runs_of_different_kinds_are_not_comparable() -> None:
    """A p2p run's copies are no points of a collectives run: every point was 'missing' and
    the gate said regression (exit 1). It is incomparable (exit 2), whatever --allow-mismatch
    says; an nccl-tests import times the same collectives and stays comparable."""
    from typer.testing import CliRunner

    from commbench.cli import app

    runs = Path(__file__).parent / "fixtures" / "runs"
    for extra in ([], ["--allow-mismatch"]):
        result = CliRunner().invoke(
            app, ["compare", str(runs / "p2p-v1"), str(runs / "cpu-gloo-a"), *extra]
        )
        assert result.exit_code == 2, result.output
        assert "a p2p run and a collectives run measure different things" in result.stderr
    from commbench.compare import _family
    from commbench.results.record import RunKind

    assert _family(RunKind.NCCL_TESTS) is _family(RunKind.COLLECTIVES)
    assert _family(RunKind.P2P) is not _family(RunKind.COLLECTIVES)
