"""Per-rank evidence in a collectives run: each member rank's own times (`RankTimes`), the rank
the others waited for (`ResultRow.straggler`), its host (`results.stragglers`), and where they
show (results.json, `commbench collectives`, `commbench report`, `Run.stragglers()`).

The naming logic is tested on hand-made rows; the real runs (gloo on CPU, tiny sizes) only
check that the data is there and consistent, never which rank was late: on a shared 2-core
machine that is the scheduler's choice.
"""

from __future__ import annotations

import json
import math
import re
import socket
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.launch.launcher import run_collectives
from commbench.report.blocks import Block, Bullets, Heading, Para
from commbench.report.document import build_report
from commbench.report.options import Images
from commbench.results.csv_rows import CSV_COLUMNS
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus
from commbench.results.runs import Run, load_run
from commbench.results.schema import STRAGGLER_MIN_SHARE, RankTimes, ResultRow, Straggler
from commbench.results.store import new_run_dir
from commbench.results.stragglers import (
    RankWaits,
    WaitedFor,
    describe,
    format_us,
    summarise,
    summary_lines,
    waited_for,
)
from tests.factories import collectives_settings, make_row, write_run

REPO = Path(__file__).parents[1]
V1_RUN = REPO / "results" / "reference" / "cpu-gloo-w4-strategies" / "20261121-060313-collectives"
GOLDEN = REPO / "tests" / "fixtures" / "runs" / "h100x8-golden"
HOSTS = [{"rank": 0, "host": "n1"}, {"rank": 1, "host": "n2"}, {"rank": 2, "host": "n3"}]


def times(waits: list[float], ranks: list[int] | None = None) -> RankTimes:
    ranks = list(range(len(waits))) if ranks is None else ranks
    return RankTimes(
        ranks=ranks,
        median_us=[100.0 - w for w in waits],
        p95_us=[120.0 - w for w in waits],
        wait_us=waits,
    )


def row(
    waits: list[float] | None,
    size: int = 1 << 20,
    time_us: float = 100.0,
    ranks: list[int] | None = None,
    op: str = "all_reduce",
) -> ResultRow:
    return make_row(
        size,
        [time_us] * 3,
        op=op,
        reduce_op="",
        world_size=len(waits) if waits else 3,
        ranks=None if waits is None else times(waits, ranks),
    )


# -- the straggler of one point ----------------------------------------------------------------


def test_the_straggler_is_the_rank_whose_wait_stands_out() -> None:
    # rank 1 arrived last: the others waited 40 us of a 100 us iteration for it
    assert row([0.0, 40.0, 3.0]).straggler == Straggler(rank=1, wait_us=40.0, share=0.4)
    # the share is of the point's median time (the max over ranks), whatever the size
    assert row([0.0, 40.0], time_us=400.0).straggler == Straggler(rank=1, wait_us=40.0, share=0.1)


@pytest.mark.parametrize(
    ("waits", "time_us", "why"),
    [
        ([10.0, 14.0, 12.0], 100.0, "every rank has noise slack: none stands out by 5%"),
        ([0.0, 4.9], 100.0, "the wait is under 5% of the iteration"),
        ([0.0, 0.9], 5.0, "18% of the iteration, but under a microsecond"),
        ([0.0, 30.0, 30.0], 100.0, "two ranks equally late: no one rank held the others"),
        ([0.0, 0.0, 0.0], 100.0, "nobody waited"),
        ([50.0], math.nan, "no time: the point did not run"),
    ],
)
def test_no_straggler_without_a_meaningful_wait(
    waits: list[float], time_us: float, why: str
) -> None:
    assert row(waits, time_us=time_us).straggler is None, why


def test_the_threshold_is_the_documented_one() -> None:
    floor = STRAGGLER_MIN_SHARE * 100.0
    assert row([0.0, floor]).straggler is not None
    assert row([0.0, floor - 0.01]).straggler is None
    assert row([2.0, floor + 2.0]).straggler is not None  # the margin counts, not the wait
    assert row([2.0, floor + 1.99]).straggler is None
    assert row(None).straggler is None  # no per-rank times (imported, stored before, p2p)


def test_a_subgroup_lists_its_members_only() -> None:
    # `--ranks 0,2` at world 3: rank 1 took no part and has no entry
    point = row([0.0, 25.0], ranks=[0, 2])
    assert point.ranks is not None and point.ranks.ranks == [0, 2]
    assert point.straggler == Straggler(rank=2, wait_us=25.0, share=0.25)
    (found,) = waited_for([point], HOSTS)
    assert (found.rank, found.host) == (2, "n3")


def test_rank_times_refuses_lists_that_do_not_match() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        RankTimes(ranks=[0, 1], median_us=[1.0], p95_us=[1.0, 2.0], wait_us=[0.0, 0.0])
    with pytest.raises(ValueError, match="listed twice"):
        RankTimes(ranks=[1, 1], median_us=[1.0] * 2, p95_us=[1.0] * 2, wait_us=[0.0] * 2)


# -- stored ------------------------------------------------------------------------------------


def make_run(tmp_path: Path, rows: list[ResultRow], hosts: list[dict] | None = None) -> Run:
    record = RunRecord(
        kind=RunKind.COLLECTIVES,
        status=RunStatus.COMPLETE,
        context=RunContext(world_size=3, backend="gloo", ranks=hosts or HOSTS),
        points_total=len(rows),
        points_done=len(rows),
    )
    return load_run(write_run(new_run_dir(tmp_path / "runs", "collectives"), rows, record))


def test_rank_times_round_trip_through_results_json_not_csv(tmp_path: Path) -> None:
    rows = [row([0.0, 40.0, 3.0]), row([1.5, 0.0], ranks=[0, 2]), row(None)]
    run = make_run(tmp_path, rows)
    stored = json.loads((run.path / "results.json").read_text())
    assert stored["schema_version"] == 2
    assert stored["rows"][0]["ranks"] == {
        "ranks": [0, 1, 2],
        "median_us": [100.0, 60.0, 97.0],
        "p95_us": [120.0, 80.0, 117.0],
        "wait_us": [0.0, 40.0, 3.0],
    }
    assert "ranks" not in stored["rows"][2]  # optional: absent, not null
    assert [r.ranks for r in run.rows] == [r.ranks for r in rows]
    assert run.rows[2].ranks is None
    header = (run.path / "results.csv").read_text().splitlines()[0]
    assert header.split(",") == CSV_COLUMNS  # the per-rank times are not CSV columns


GOOD = {"ranks": [0, 1], "median_us": [1, 1], "p95_us": [1, 1], "wait_us": [0, 0]}


@pytest.mark.parametrize(
    ("ranks", "fragment"),
    [
        ({**GOOD, "median_us": [1.0]}, "ranks.median_us: 1 items for 2 ranks"),
        ({**GOOD, "ranks": [0, 0]}, "ranks.ranks: a rank is listed twice"),
        ({**GOOD, "wait_us": [0, -1]}, "ranks.wait_us[1]: -1 is outside"),
        ({**GOOD, "ranks": [-1, 0]}, "ranks.ranks[0]: -1 is outside"),
        ({k: v for k, v in GOOD.items() if k != "wait_us"}, "ranks.wait_us: missing"),
        ({**GOOD, "median_us": None}, "ranks.median_us: missing"),
        ({**GOOD, "p95_us": [None, 1]}, "ranks.p95_us[0]: expected a number"),
        ({**GOOD, "ranks": list(range(3))}, "ranks.median_us: 2 items for 3 ranks"),
        ([1, 2], "rows[0].ranks: expected an object"),
    ],
)
def test_a_bad_ranks_record_is_one_clear_error(
    tmp_path: Path, ranks: object, fragment: str
) -> None:
    run = make_run(tmp_path, [row([0.0, 1.0])])
    data = json.loads((run.path / "results.json").read_text())
    assert data["rows"][0]["ranks"].keys() == GOOD.keys()
    data["rows"][0]["ranks"] = ranks
    (run.path / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"rows\[0\]\.ranks") as info:
        load_run(run.path)
    assert fragment in str(info.value)


def test_a_version_1_run_loads_without_rank_times() -> None:
    run = load_run(V1_RUN)
    assert run.rows and all(r.ranks is None and r.straggler is None for r in run.rows)
    assert run.stragglers() == [] and run.straggler_summary() == []


# -- across a run ------------------------------------------------------------------------------


def test_a_rank_late_at_most_points_is_one_finding(tmp_path: Path) -> None:
    late = [row([0.0, 30.0 + i, 1.0], size=1 << (10 + 2 * i)) for i in range(4)]
    other = row([0.0, 0.0, 41.0], size=16 << 20, op="broadcast")
    quiet = row([2.0, 3.0, 2.5], size=1 << 30)
    run = make_run(tmp_path, [*late, other, quiet])
    assert [(p.rank, p.host) for p in run.stragglers()] == [(1, "n2")] * 4 + [(2, "n3")]
    first, second = run.straggler_summary()
    assert isinstance(first, RankWaits) and isinstance(second, WaitedFor)
    assert (first.rank, first.host, len(first.points), first.measured) == (1, "n2", 4, 6)
    assert first.median_wait_us == 31.5 and first.median_share == pytest.approx(0.315)
    assert summary_lines(run.straggler_summary()) == [
        "rank 1 on n2 was waited for at 4 of 6 points (median 31.5 us, 32% of the iteration)",
        "rank 2 on n3: the others waited 41 us for it at broadcast 16M, 41% of the iteration",
    ]


def test_points_are_listed_longest_wait_first_and_cut_to_the_limit() -> None:
    rows = [row([0.0, 10.0 * (i + 1), 0.0], size=1024 << i) for i in range(2)]
    rows += [row([0.0, 0.0, 15.0], size=1 << 20), row([60.0, 0.0, 0.0], op="barrier")]
    findings = summarise(rows, [{"rank": 1, "host": "a"}])  # ranks 0 and 2: no host known
    assert [(f.rank, round(f.share, 2)) for f in findings if isinstance(f, WaitedFor)] == [
        (0, 0.6), (1, 0.2), (2, 0.15), (1, 0.1),
    ]  # fmt: skip
    assert (
        describe(findings[0])
        == "rank 0: the others waited 60 us for it at barrier, 60% of the iteration"
    )
    assert describe(findings[1]).startswith(
        "rank 1 on a: the others waited 20 us for it at all_reduce 2K"
    )
    lines = summary_lines(findings, limit=3)
    assert len(lines) == 3 and lines[-1] == "... and 2 more (`commbench report` lists them)"
    assert summary_lines(findings, limit=4) == summary_lines(findings)  # all fit: none cut


def test_durations_read_as_a_person_writes_them() -> None:
    assert [format_us(v) for v in (0.85, 12.34, 1800.0, 2_050_000.0)] == [
        "850 ns", "12.3 us", "1.8 ms", "2.05 s",
    ]  # fmt: skip


# -- shown -------------------------------------------------------------------------------------


def _section(path: Path) -> list[Block] | None:
    """The report's "Waited-for ranks" section (heading, meaning, findings), None without."""
    blocks = build_report(path, Images.none)
    at = next((i for i, b in enumerate(blocks) if b == Heading(2, "Waited-for ranks")), None)
    return None if at is None else blocks[at : at + 3]


def test_the_report_has_the_section_only_with_per_rank_times(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from commbench.cli import app

    late = make_run(tmp_path, [row([0.0, 40.0, 3.0]), row(None)])
    section = _section(late.path)
    assert section is not None and section[2] == Bullets(
        ["rank 1 on n2: the others waited 40 us for it at all_reduce 1M, 40% of the iteration"]
    )
    text = CliRunner().invoke(app, ["report", str(late.path), "--images", "none"]).stdout
    assert "\n## Waited-for ranks\n" in text and "- rank 1 on n2: the others waited 40 us" in text
    quiet = make_run(tmp_path, [row([1.0, 1.0, 2.0])])
    assert _section(quiet.path) == [
        Heading(2, "Waited-for ranks"),
        section[1],  # what the section means and the threshold
        Para("No rank kept the others waiting (1 point with per-rank times)."),
    ]
    assert "5% of the iteration" in section[1].text  # type: ignore[union-attr]
    for no_data in (make_run(tmp_path, [row(None)]).path, GOLDEN, V1_RUN):
        assert _section(no_data) is None


def test_the_command_prints_the_findings_after_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from commbench.cli.collectives import STRAGGLER_LINES, report
    from commbench.results.exporters import Format

    rows = [row([0.0, 0.0, 10.0 + i], size=1024 << i) for i in range(8)]
    rows += [row([0.0, 5.0 * (i + 2), 0.0], size=1 << (25 + i)) for i in range(5)]
    report(make_run(tmp_path, rows), Format.table)
    out, err = capsys.readouterr()
    assert "# all_reduce" in out and "waited" not in out
    lines = [ln for ln in err.splitlines() if "wait" in ln or "... and" in ln]
    assert len(lines) == STRAGGLER_LINES
    assert lines[0] == (
        "commbench: rank 2 on n3 was waited for at 8 of 13 points (median 13.5 us, 14% of the "
        "iteration)"
    )
    assert lines[1].startswith("commbench: rank 1 on n2: the others waited 30 us for it at ")
    assert lines[-1] == "commbench: ... and 2 more (`commbench report` lists them)"
    assert err.index("was waited for") < err.index("commbench: complete")


# -- real runs ---------------------------------------------------------------------------------


def _consistent(point: ResultRow, members: list[int]) -> None:
    """What must hold of any run's per-rank times, whatever the scheduler did."""
    ranks = point.ranks
    assert ranks is not None, point
    assert ranks.ranks == members
    n = len(members)
    assert len(ranks.median_us) == len(ranks.p95_us) == len(ranks.wait_us) == n
    slack = 1 + 1e-12  # one rounding of the interpolated quantiles
    for median, p95, wait in zip(ranks.median_us, ranks.p95_us, ranks.wait_us, strict=True):
        # the row's samples are the per-iteration maximum of the ranks' own: never below them
        assert 0 <= median <= p95 * slack and median <= point.time_us * slack
        assert p95 <= point.stats.p95 * slack
        assert 0 <= wait <= point.time_us * slack
    straggler = point.straggler
    if straggler is not None:
        assert straggler.wait_us == max(ranks.wait_us) and straggler.rank in members
        assert straggler.share == pytest.approx(straggler.wait_us / point.time_us)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("nproc", "subgroup"), [(3, None), (3, [0, 2])], ids=["world3", "ranks0,2"]
)
def test_every_measured_point_of_a_real_run_has_each_members_times(
    tmp_path: Path, nproc: int, subgroup: list[int] | None
) -> None:
    settings = collectives_settings(
        ops=["all_reduce", "all_gather", "sendrecv", "barrier"],
        sizes=[1024, 65536],
        nproc=nproc,
        backend="gloo",
        device="cpu",
        ranks=subgroup,
        iters=5,
        warmup=1,
    )
    outcome = run_collectives(settings, tmp_path)
    assert outcome.status == "complete", outcome.failure
    run = load_run(outcome.run_dir)
    members = subgroup or list(range(nproc))
    measured = [r for r in run.rows if r.stats.n]
    assert len(measured) == len(run.rows) == 7
    for point in measured:
        _consistent(point, members)
    host = socket.gethostname()
    for found in run.stragglers():
        assert found.host == host and found.rank in members
        assert found.wait_us == max(found.row.ranks.wait_us)  # type: ignore[union-attr]
    stored = json.loads((run.path / "results.json").read_text())
    assert all(r["ranks"]["ranks"] == members for r in stored["rows"])


@pytest.mark.integration
def test_the_command_names_waited_for_ranks_only_in_its_own_lines(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from commbench.cli import app

    result = CliRunner().invoke(
        app,
        ["collectives", "--nproc", "2", "--ops", "all_reduce,broadcast", "--sizes", "1K,64K",
         "--iters", "5", "--warmup", "1", "--device", "cpu", "--no-plot", "-o", "out"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run = load_run(next((tmp_path / "out").iterdir()))
    for point in run.rows:
        _consistent(point, [0, 1])
    lines = [
        ln for ln in result.stderr.splitlines() if " was waited for " in ln or ": the others" in ln
    ]
    assert lines == [
        f"commbench: {line}" for line in summary_lines(run.straggler_summary(), limit=5)
    ]
    pattern = re.compile(r"commbench: rank [01] on \S+(: the others waited | was waited for at )")
    assert all(pattern.match(ln) for ln in lines), lines
