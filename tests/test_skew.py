"""all_to_allv's splits from a named skew (`commbench.skew`): their sums, their shapes, their
reproducibility, the names `--skew` refuses, and what the rows of a skew carry: their label
in the key the gate joins on, in the tables and the exporters, and their busiest-rank algbw.
No process is started here; tests/test_integration_skew.py runs the op on gloo ranks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import OPS, plan_size
from commbench.compare import GateSettings, Mark, compare_rows
from commbench.errors import UserError
from commbench.results.csv_rows import csv_columns
from commbench.results.exporters import Format, export, point_line
from commbench.results.schema import SKEWED_OPS, ResultRow
from commbench.results.summary import render, summarise
from commbench.results.versions import rows_from_stored
from commbench.skew import DEFAULT_SEED, Skew, weights
from tests.factories import collectives_settings, make_row

SKEWS = ["uniform", "zipf:1.2", "zipf:0.5", "zipf:16", "hot:2", "hot:1.5", "hot:1000000"]
WORLDS = [1, 2, 3, 4, 7, 8, 16]
COUNTS = [0, 1, 3, 1000, 4096, 1 << 20, (1 << 40) + 7]


def _matrix(skew: Skew, count: int, n: int) -> list[list[int]]:
    return [skew.send(r, count, n) for r in range(n)]


# -- the splits ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", SKEWS)
@pytest.mark.parametrize("n", WORLDS)
def test_every_rank_sends_exactly_its_count_and_knows_what_it_receives(text: str, n: int) -> None:
    skew = Skew.parse(text, seed=7)
    for count in COUNTS:
        sends = _matrix(skew, count, n)
        assert all(sum(row) == count and min(row) >= 0 for row in sends), (count, sends)
        for r in range(n):  # computed by r alone, with no exchange: the column of the matrix
            assert skew.recv(r, count, n) == [sends[s][r] for s in range(n)], (count, r)
        most = max(count, *(sum(sends[s][r] for s in range(n)) for r in range(n)))
        assert skew.busiest(count, n) == most
        assert skew.ratio(count, n) == (most / count if count else 1.0)


@pytest.mark.parametrize("text", SKEWS[1:])
@pytest.mark.parametrize("n", [2, 5, 16])
def test_each_split_is_within_one_element_of_its_exact_share(text: str, n: int) -> None:
    skew = Skew.parse(text)
    for count in (997, 1 << 20):
        for src in range(n):
            w = weights(skew, src, n)
            exact = [count * x / sum(w) for x in w]
            got = skew.send(src, count, n)
            assert all(abs(g - e) < 1 for g, e in zip(got, exact, strict=True)), (src, got)


def test_uniform_is_all_to_all_where_n_divides_the_count() -> None:
    uniform = Skew.parse("uniform")
    for n in (2, 3, 8):
        count = plan_size("all_to_allv", 4 << 20, "float32", n).count
        assert count % n == 0  # all_to_allv rounds its sizes as all_to_all does
        assert _matrix(uniform, count, n) == [[count // n] * n] * n
        assert uniform.ratio(count, n) == 1.0
    # otherwise the cumulative rounding spreads the rest: ranks receive one element more or less
    assert _matrix(uniform, 1000, 3) == [[333, 333, 334]] * 3


def test_zipf_gives_each_source_the_weights_in_its_own_order() -> None:
    skew, n, count = Skew.parse("zipf:1.2"), 8, 1 << 30
    shares = [1 / (k + 1) ** 1.2 for k in range(n)]
    exact = sorted((count * s / sum(shares) for s in shares), reverse=True)
    orders = set()
    for src in range(n):
        row = skew.send(src, count, n)
        assert all(abs(a - b) < 1 for a, b in zip(sorted(row, reverse=True), exact, strict=True))
        orders.add(tuple(sorted(range(n), key=lambda d, row=row: -row[d])))
    assert len(orders) > 1  # a permutation per source, not one ranking for all
    assert skew.ratio(count, n) > 1.05  # some rank is the favourite of more than one source


def test_hot_sends_f_times_more_to_one_destination_the_same_for_every_source() -> None:
    skew, n, count = Skew.parse("hot:3"), 6, 8000  # weights 3,1,1,1,1,1: 3000 and 1000 each
    rows = _matrix(skew, count, n)
    hot = rows[0].index(max(rows[0]))
    assert all(row == rows[0] for row in rows)
    assert rows[0][hot] == 3000 and sorted(rows[0])[:-1] == [1000] * 5
    assert skew.busiest(count, n) == n * 3000
    assert skew.ratio(count, n) == pytest.approx(3 * n / (n - 1 + 3))


def test_the_same_skew_and_seed_give_the_same_splits_anywhere() -> None:
    """Pinned: a stored run is reproducible only while these stay what they were (the draw
    hashes its seed with SHA-512, the weights are decimal arithmetic: no PYTHONHASHSEED, no
    libm in them)."""
    assert _matrix(Skew.parse("zipf:1.2"), 1000, 4) == [
        [100, 528, 141, 231],
        [100, 141, 528, 231],
        [230, 528, 100, 142],
        [528, 141, 100, 231],
    ]
    assert _matrix(Skew.parse("hot:2", seed=0), 500, 4) == [[100, 200, 100, 100]] * 4
    assert _matrix(Skew.parse("zipf:1.2", seed=3), 1000, 4) != _matrix(
        Skew.parse("zipf:1.2"), 1000, 4
    )


def test_a_skew_names_itself_and_its_seed_where_the_seed_shapes_it() -> None:
    assert Skew.parse("zipf:1.20").label == f"zipf:1.2 seed={DEFAULT_SEED}"
    assert Skew.parse("HOT:2.0", seed=5).label == "hot:2 seed=5"
    assert Skew.parse("uniform", seed=5).label == "uniform"  # the seed plays no part
    assert Skew.parse("zipf:1e-1").spec == "zipf:0.1"
    for text in ("zipf:1.2", "hot:2"):
        skew = Skew.parse(text, seed=9)
        assert Skew.from_label(skew.label) == skew
    assert Skew.from_label("uniform").label == "uniform"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("zipf:abc", "--skew zipf:S: expected a number (digits 0-9), got 'abc'"),
        ("zipf:nan", "expected a number"),
        ("zipf:1e400", "must be a finite number"),
        ("zipf:0", "zipf:S needs 0 < S <= 16, got 'zipf:0'"),
        ("zipf:-1", "zipf:S needs 0 < S <= 16"),
        ("zipf:17", "zipf:S needs 0 < S <= 16"),
        ("zipf", "zipf needs its exponent S, e.g. zipf:1.2"),
        ("hot:0", "hot:F needs 1 <= F <= 1000000 (the hot destination gets F times"),
        ("hot:0.5", "hot:F needs 1 <= F"),
        ("hot:", "hot needs its factor F, e.g. hot:2"),
        ("uniform:2", "uniform takes no parameter"),
        ("zipfian", "unknown skew 'zipfian'; did you mean zipf?"),
        ("unifrom", "did you mean uniform?"),
        ("normal", "unknown skew 'normal' (choose from: uniform, zipf:S, hot:F)"),
        ("", "--skew is empty"),
    ],
)
def test_a_bad_skew_is_one_line_naming_the_flag(text: str, fragment: str) -> None:
    with pytest.raises(UserError) as caught:
        Skew.parse(text)
    message = str(caught.value)
    assert fragment in message and "\n" not in message and message.startswith("--skew")


@pytest.mark.parametrize("label", ["zipf:1.2", "zipf:1.20 seed=0", "uniform seed=0", "hot:2 seed="])
def test_a_label_commbench_would_not_write_is_refused(label: str) -> None:
    with pytest.raises(UserError, match="skew"):
        Skew.from_label(label)


# -- the settings and the command line ---------------------------------------------------------


def _settings(**kw: Any) -> CollectivesSettings:
    base: dict[str, Any] = dict(
        ops=["all_to_allv"], sizes=[4096], nproc=2, backend="gloo", device="cpu"
    )
    return collectives_settings(**{**base, **kw})


def test_settings_record_the_skew_and_seed_and_read_old_ones_as_uniform() -> None:
    s = _settings(skew="zipf:1.20", seed=3)
    assert (s.to_dict()["skew"], s.to_dict()["seed"]) == ("zipf:1.2", 3)
    assert s.splits == Skew("zipf", "1.2", 3)
    old = {k: v for k, v in s.to_dict().items() if k not in ("skew", "seed")}
    assert CollectivesSettings.from_dict(old).splits == Skew("uniform")
    with pytest.raises(UserError, match="which --ops does not include"):
        _settings(ops=["all_reduce"], skew="hot:2")
    with pytest.raises(UserError, match="--seed must be >= 0"):
        _settings(seed=-1)


def test_only_all_to_allv_takes_a_skew() -> None:
    assert {name for name, spec in OPS.items() if spec.skewed} == set(SKEWED_OPS)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--skew", "zipf:abc"], "--skew zipf:S: expected a number"),
        (["--skew", "hot:0"], "hot:F needs 1 <= F"),
        (["--skew", "zipfy"], "did you mean zipf?"),
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--seed", "x"], "--seed: expected a whole number"),
        (["--ops", "all_reduce", "--skew", "hot:2"], "which --ops does not include"),
    ],
)
def test_bad_skew_flags_are_one_line_and_exit_2(
    args: list[str], fragment: str, tmp_path: Path
) -> None:
    base = ["collectives", "--device", "cpu", "--nproc", "2", "--ops", "all_to_allv"]
    result = CliRunner().invoke(app, [*base, "--sizes", "4K", "--out", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert not list(tmp_path.iterdir())


# -- the rows ------------------------------------------------------------------------------------


def _v_row(size: int, skew: str, ratio: float, samples: tuple[float, ...] = (10.0,) * 5) -> Any:
    return make_row(
        size,
        samples,
        op="all_to_allv",
        reduce_op="",
        busbw_factor=0.5,
        skew=skew,
        skew_ratio=ratio,
    )


def test_algbw_is_the_busiest_ranks_bytes_over_the_time() -> None:
    row = _v_row(1 << 20, "zipf:1.2 seed=0", 1.25)
    assert row.algbw_gbps == pytest.approx((1 << 20) * 1.25 / 10e-6 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 0.5)  # alltoall's (n-1)/n


def test_a_skewed_row_keeps_its_skew_through_json_and_csv() -> None:
    row = _v_row(4096, "hot:2 seed=1", 1.5)
    back = ResultRow.from_dict(json.loads(json.dumps(row.to_dict())))
    assert (back.skew, back.skew_ratio, back.key) == (row.skew, 1.5, row.key)
    assert row.key[-1] == "hot:2 seed=1"
    plain = make_row(4096)
    assert "skew" not in plain.to_dict() and plain.key[-1] == ""  # rows as before
    assert csv_columns([plain]) == csv_columns([]) and "skew" not in csv_columns([plain])
    assert csv_columns([plain, row])[-2:] == ["skew", "skew_ratio"]
    csv = export([plain, row], Format.csv).splitlines()
    assert csv[0].endswith(",skew,skew_ratio") and csv[2].endswith(",hot:2 seed=1,1.5")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"skew": ""}, "rows[0].skew: missing (all_to_allv's rows name their skew)"),
        ({"skew": "zipf:1.2"}, "is not a skew's label"),
        ({"skew": "zipf:99 seed=0"}, "zipf:S needs 0 < S <= 16"),
        ({"op": "all_to_all"}, "but all_to_all splits evenly"),
        ({"skew_ratio": 0.5}, "rows[0].skew_ratio"),
    ],
)
def test_a_stored_skew_is_checked_like_the_flag(change: dict[str, Any], fragment: str) -> None:
    data = {**_v_row(4096, "zipf:1.2 seed=0", 1.3).to_dict(), **change}
    with pytest.raises(UserError) as caught:
        rows_from_stored({"schema_version": 2, "rows": [data]}, "results.json")
    assert fragment in str(caught.value)


def test_tables_and_lines_name_the_skew_and_its_ratio() -> None:
    rows = [_v_row(4096, "zipf:1.2 seed=0", 1.39), _v_row(8192, "zipf:1.2 seed=0", 1.4)]
    table = export(rows, Format.table)
    assert "# all_to_allv  float32  2 ranks  skew=zipf:1.2 seed=0" in table
    assert "max/mean" in table.splitlines()[1] and "1.39x" in table
    assert "skew=zipf:1.2 seed=0" in point_line(rows[0]) and "max/mean 1.39x" in point_line(rows[0])
    assert "all_to_allv float32 2 ranks skew=zipf:1.2 seed=0" in render(summarise(rows))
    plain = export([make_row(4096)], Format.table)
    assert "skew" not in plain and "max/mean" not in plain


def test_the_gate_never_pairs_points_of_two_skews() -> None:
    sizes = (4096, 8192)
    uniform = [_v_row(s, "uniform", 1.0) for s in sizes]
    zipf = [_v_row(s, "zipf:1.2 seed=0", 1.4) for s in sizes]
    other_seed = [_v_row(s, "zipf:1.2 seed=1", 1.3) for s in sizes]
    a2a = [make_row(s, op="all_to_all", reduce_op="", busbw_factor=0.5) for s in sizes]
    for base, new in ((uniform, zipf), (zipf, other_seed)):
        points, _ = compare_rows(base + a2a, new + a2a, GateSettings())
        marks = {(p.op, p.skew, p.size_bytes): p.mark for p in points}
        for r in base:
            assert marks[(r.op, r.skew, r.size_bytes)] is Mark.missing
        for r in new:
            assert marks[(r.op, r.skew, r.size_bytes)] is Mark.new
        assert all(marks[("all_to_all", "", s)] is Mark.same for s in sizes)
    points, _ = compare_rows(zipf, zipf, GateSettings())
    assert {p.mark for p in points} == {Mark.same} and {p.skew for p in points} == {zipf[0].skew}


def test_a_row_stored_before_skews_keys_as_it_always_did() -> None:
    old = make_row(4096).to_dict()
    assert "skew" not in old
    (row,) = rows_from_stored({"schema_version": 2, "rows": [old]}, "results.json")
    assert row.key == (*make_row(4096).key[:-1], "")
    points, _ = compare_rows([row], [make_row(4096)], GateSettings())
    assert [p.mark for p in points] == [Mark.same]


def test_the_busiest_rank_is_what_the_preflight_holds_memory_for() -> None:
    from commbench.launch.preflight import BUFFERS_PER_RANK, rank_buffers

    even = _settings(sizes=[1 << 20])
    assert rank_buffers(even, 4) == BUFFERS_PER_RANK << 20
    hot = _settings(sizes=[1 << 20], skew="hot:1000")
    busiest = Skew.parse("hot:1000").busiest((1 << 20) // 4, 4) * 4
    assert rank_buffers(hot, 4) == 2 * (1 << 20) + busiest > BUFFERS_PER_RANK << 20
    assert math.isclose(busiest / (1 << 20), 4 * 1000 / 1003, rel_tol=1e-3)


def _run_of(tmp_path: Path, rows: list[ResultRow]) -> Any:
    from commbench.results.runs import load_run
    from tests.factories import write_run

    record = {
        "kind": "collectives",
        "status": "complete",
        "context": {"world_size": 2, "backend": "gloo", "device": "cpu"},
    }
    return load_run(write_run(tmp_path / "run", rows, record))


def test_openmetrics_labels_a_skewed_series_with_its_skew(tmp_path: Path) -> None:
    from commbench.results.openmetrics import point_families

    a2a = make_row(4096, op="all_to_all", reduce_op="", busbw_factor=0.5)
    run = _run_of(tmp_path, [a2a, _v_row(4096, "zipf:1.2 seed=0", 1.4)])
    (busbw,) = [f for f in point_families(run) if f.name == "commbench_busbw_bytes_per_second"]
    labels = [dict(s.labels) for s in busbw.samples]
    assert [(d["op"], d.get("skew")) for d in labels] == [
        ("all_to_all", None),  # an even op's series keeps the labels it always had
        ("all_to_allv", "zipf:1.2 seed=0"),
    ]


def test_nccl_tests_json_refuses_uneven_splits_it_has_no_program_for(tmp_path: Path) -> None:
    from commbench.importers.nccl_tests.export import to_nccl_tests_json

    a2a = make_row(4096, op="all_to_all", reduce_op="", busbw_factor=0.5)
    v = _v_row(4096, "zipf:1.2 seed=0", 1.4)
    both = _run_of(tmp_path, [a2a, v])
    assert '"alltoall_perf"' in to_nccl_tests_json(both)  # the even op alone: nothing to choose
    with pytest.raises(
        UserError, match=r"all_to_allv's splits are uneven \(skew zipf:1.2 seed=0\)"
    ):
        to_nccl_tests_json(both, "all_to_allv")
    with pytest.raises(UserError, match="nccl-tests has no program for them"):
        to_nccl_tests_json(_run_of(tmp_path / "v", [v]))


def test_a_comparisons_csv_names_the_skew_of_each_point() -> None:
    from commbench.compare import Comparison
    from commbench.report.comparison import CSV_COLUMNS, render

    uniform = [_v_row(4096, "uniform", 1.0)]
    zipf = [_v_row(4096, "zipf:1.2 seed=0", 1.4)]
    points, _ = compare_rows(uniform, zipf, GateSettings())
    comparison = Comparison(baseline="a", new="b", settings=GateSettings(), points=points)
    lines = render(comparison, Format.csv).splitlines()
    assert lines[0].split(",")[6:8] == ["in_place", "skew"]
    assert [ln.split(",")[7] for ln in lines[1:]] == ["uniform", "zipf:1.2 seed=0"]
    plain, _ = compare_rows([make_row(4096)], [make_row(4096)], GateSettings())
    even = Comparison(baseline="a", new="b", settings=GateSettings(), points=plain)
    assert render(even, Format.csv).splitlines()[0].split(",") == CSV_COLUMNS  # as before
