"""`--in-place both` (out-of-place and in-place side by side, as nccl-tests prints them) and
`--dtype A,B` (several dtypes in one launch): the plan, the table, and real gloo runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.collectives.settings import CollectivesSettings, Point, plan_points
from commbench.results.exporters import BOTH_HEADERS, HEADERS, build_tables
from commbench.results.schema import ResultRow
from tests.factories import collectives_settings, make_row


def settings(**kw: object) -> CollectivesSettings:
    base: dict[str, object] = dict(
        ops=["all_gather", "reduce_scatter", "all_reduce", "all_to_all"],
        sizes=[1024, 4096],
        nproc=2,
        backend="gloo",
        device="cpu",
    )
    base.update(kw)
    return collectives_settings(**base)  # type: ignore[arg-type]


def forms_of(points: list[Point], op: str, dtype: str = "float32") -> set[bool]:
    return {p.in_place for p in points if p.op == op and p.dtype == dtype}


def test_both_measures_each_form_of_the_ops_that_have_two() -> None:
    points = plan_points(settings(in_place="both"), 2)
    assert forms_of(points, "all_gather") == {False, True}
    assert forms_of(points, "reduce_scatter") == {False, True}
    assert forms_of(points, "all_reduce") == {True}  # torch's all_reduce is in place
    assert forms_of(points, "all_to_all") == {False}
    assert len(points) == 2 * (2 + 2 + 1 + 1)
    assert forms_of(plan_points(settings(in_place="yes"), 2), "all_gather") == {True}
    assert forms_of(plan_points(settings(), 2), "all_gather") == {False}


def test_dtypes_each_get_the_whole_sweep_in_order() -> None:
    s = settings(dtype="bfloat16", dtypes=["bfloat16", "float32"], ops=["all_reduce"])
    points = plan_points(s, 2)
    assert [p.dtype for p in points] == ["bfloat16"] * 2 + ["float32"] * 2
    assert s.dtype == "bfloat16"  # the first, for readers of one dtype per run


def test_stored_settings_from_before_both_still_load() -> None:
    old = settings().to_dict()
    old.pop("dtypes")
    for stored, expected in ((False, "no"), (True, "yes")):
        old["in_place"] = stored
        loaded = CollectivesSettings.from_dict(old)
        assert loaded.in_place == expected and loaded.dtypes == ["float32"]


def _row(in_place: bool, size: int, busbw: float, op: str = "all_gather") -> ResultRow:
    samples = [size / (2 * busbw * 1e3)] * 5
    return make_row(
        size,
        samples,
        busbw_factor=0.5,
        op=op,
        reduce_op="",
        in_place=in_place,
        requested_bytes=size,
        warmup=1,
    )


def test_a_table_puts_the_two_forms_side_by_side_per_size() -> None:
    rows = [_row(False, 1024, 1.0), _row(False, 4096, 2.0), _row(True, 1024, 3.0)]
    rows.append(_row(True, 1024, 5.0, op="all_reduce"))
    (both, single) = build_tables(rows)
    assert both.title == "all_gather  float32  2 ranks  out-of-place | in-place"
    assert both.headers == BOTH_HEADERS and single.headers == HEADERS
    first, second = both.cells
    assert first[0] == "1K" and first[4] == "1.00" and first[9] == "3.00"
    assert second[0] == "4K" and second[4] == "2.00" and second[7:] == ["-"] * 5  # not measured
    assert single.title.endswith("in-place") and len(single.cells) == 1


def test_the_two_forms_of_a_point_are_two_points_to_compare() -> None:
    from commbench.compare import GateSettings, Mark, compare_rows

    out_of_place, in_place = _row(False, 1024, 1.0), _row(True, 1024, 3.0)
    assert out_of_place.key != in_place.key  # rows keyed by ResultRow.key never collide
    assert out_of_place.key == _row(False, 1024, 2.0).key
    points, _ = compare_rows([out_of_place, in_place], [out_of_place], GateSettings())
    assert sorted((p.in_place, p.mark) for p in points) == [
        (False, Mark.same),
        (True, Mark.missing),
    ]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_real_run_of_both_forms_and_two_dtypes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "collectives",
            "--device",
            "cpu",
            "--nproc",
            "2",
            "--ops",
            "all_gather,reduce_scatter,all_reduce",
            "--sizes",
            "1K,4K",
            "--in-place",
            "both",
            "--dtype",
            "float32,bfloat16",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--no-plot",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr
    (run,) = out.iterdir()
    data = json.loads((run / "results.json").read_text())
    keys = {(r["op"], r["dtype"], r["in_place"], r["size_bytes"]) for r in data["rows"]}
    for dtype in ("float32", "bfloat16"):
        for op in ("all_gather", "reduce_scatter"):
            for form in (False, True):
                assert {(op, dtype, form, 1024), (op, dtype, form, 4096)} <= keys
        assert ("all_reduce", dtype, True, 1024) in keys
        assert ("all_reduce", dtype, False, 1024) not in keys
    assert len(data["rows"]) == 2 * (4 + 4 + 2)
    assert all(r["check"] == "ok" for r in data["rows"])
    settings_file = json.loads((run / "run.json").read_text())["settings"]
    assert settings_file["in_place"] == "both"
    assert settings_file["dtypes"] == ["float32", "bfloat16"]
    table = done.stdout
    assert "# all_gather  bfloat16  2 ranks  out-of-place | in-place" in table
    assert "out busbw_GB/s" in table and "in busbw_GB/s" in table
    assert "# all_reduce  float32  op=sum  2 ranks  in-place" in table
    # the streamed lines say which form each point is
    assert "all_gather bfloat16 2 ranks in-place  4K" in done.stderr
