"""What a diagnosis writes and reads back, through typed records (commbench.diagnose.journal
and .verdict): a test's line of events.jsonl, a baseline read from an earlier run (its
unreadable lines counted and said), and diagnosis.json. In-process: nothing is launched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.diagnose.expectations import load_expectations
from commbench.diagnose.journal import GPU_PAIRS, INTER, RecordedTest
from commbench.diagnose.settings import DiagnoseSettings
from commbench.diagnose.stages import Layout
from commbench.diagnose.verdict import (
    DEGRADED,
    Diagnosis,
    NodeVerdict,
    StageSummary,
    Suspect,
    load_diagnosis,
)
from commbench.errors import UserError
from commbench.files import dump_json
from commbench.health.findings import Finding, FindingKind
from commbench.results.record import RunStatus


def journal_line(stage: str = INTER, samples: list[float] | None = None) -> dict[str, Any]:
    return RecordedTest(
        stage=stage,
        round=0,
        probe=(0,),
        fillers=(1,),
        ranks=(0, 1),
        samples_gbps=tuple(samples or [10.0, 12.0, 11.0]),
    ).to_dict()


def test_a_test_line_reads_back_and_a_bad_one_names_its_field() -> None:
    line = journal_line()
    assert list(line) == ["type", "stage", "round", "probe", "fillers", "ranks", "samples_gbps"]
    back = RecordedTest.from_event(json.loads(json.dumps(line)), "events.jsonl: line 1")
    assert back is not None and back.to_dict() == line
    assert RecordedTest.from_event({"type": "row"}, "x") is None
    with pytest.raises(UserError, match=r"line 3\.samples_gbps\[1\]: expected a number"):
        RecordedTest.from_event({**line, "samples_gbps": [1.0, "x"]}, "line 3")


def write_run(tmp_path: Path, lines: list[str]) -> Path:
    run = tmp_path / "good-run"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text("".join(f"{line}\n" for line in lines))
    return run


def test_a_baseline_run_counts_and_says_the_lines_it_skips(tmp_path: Path) -> None:
    run = write_run(
        tmp_path,
        [
            json.dumps({"type": "context"}),
            json.dumps(journal_line(INTER, [10.0, 20.0, 30.0])),
            '{"type": "diagnose", "stage": "inter-no',  # cut short by a kill
            "[1, 2]",
            "",
            json.dumps(journal_line(GPU_PAIRS, [4.0])),
            json.dumps({**journal_line(), "stage": "outer"}),
        ],
    )
    expected = load_expectations(run)
    assert expected.gbps == {INTER: 20.0, GPU_PAIRS: 4.0}
    assert len(expected.notes) == 2
    assert "skipped 2 of 6 line(s)" in expected.notes[0] and "not JSON objects" in expected.notes[0]
    assert "skipped 1 test line(s)" in expected.notes[1] and "'outer'" in expected.notes[1]
    clean = load_expectations(write_run(tmp_path / "c", [json.dumps(journal_line())]))
    assert clean.notes == []


def test_a_baseline_run_with_nothing_readable_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path, ["not json", "{cut"])
    with pytest.raises(UserError, match="none of its 2 line"):
        load_expectations(run)


def test_the_notes_go_to_stderr_and_never_into_run_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = write_run(tmp_path, ["garbage", json.dumps(journal_line())])
    seen: list[DiagnoseSettings] = []

    def run_diagnose(settings: DiagnoseSettings, *args: Any, **kw: Any) -> Diagnosis:
        seen.append(settings)
        return Diagnosis(
            path=tmp_path,
            status=RunStatus.COMPLETE,
            nodes=[NodeVerdict(host="n0", node=0)],
            stages=[],
            notes=list(settings.baseline_notes),
        )

    monkeypatch.setattr("commbench.diagnose.run.run_diagnose", run_diagnose)
    result = CliRunner().invoke(
        app, ["diagnose", "--device", "cpu", "--baseline", str(run), "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert settings.expected_gbps == {INTER: 11.0}
    assert "baseline_notes" not in settings.to_dict()
    (note,) = [line for line in result.stderr.splitlines() if "--baseline" in line]
    assert note.startswith("commbench: warning: --baseline: skipped 1 of 2 line(s)")
    assert "garbage" not in result.stdout


def a_diagnosis(path: Path) -> Diagnosis:
    node = NodeVerdict(
        host="n1",
        node=1,
        verdict=DEGRADED,
        evidence=["gpu-pairs: n1 GPU 3: 1 GB/s, expected 40 GB/s (2%)"],
        gpus=[Suspect("n1 GPU 3", ["gpu-pairs: n1 GPU 3: 1 GB/s"])],
        health=[Finding(subject="GPU3", kind=FindingKind.DOWNTRAINED, message="GPU3: x8", node=1)],
    )
    return Diagnosis(
        path=path,
        status=RunStatus.COMPLETE,
        nodes=[NodeVerdict(host="n0", node=0), node],
        stages=[StageSummary(GPU_PAIRS, 3, 12)],
    )


def test_diagnosis_json_reads_back_as_it_was_written(tmp_path: Path) -> None:
    written = a_diagnosis(tmp_path)
    (tmp_path / "diagnosis.json").write_text(dump_json(written.to_dict()))
    back = load_diagnosis(tmp_path)
    assert back.to_dict() == written.to_dict() and back.verdict == DEGRADED
    assert back.nodes[1].gpus[0].unit == "n1 GPU 3" and back.stages[0].tests == 12


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"verdict": "healthy"}, "verdict: 'healthy', but its nodes and status make it 'degraded'"),
        ({"schema_version": 2}, "schema_version: 2, from a newer commbench"),
        ({"stages": [{"name": "x", "rounds": -1, "tests": 0}]}, r"stages\[0\]\.rounds"),
    ],
)
def test_an_edited_diagnosis_json_is_one_line(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    (tmp_path / "diagnosis.json").write_text(
        dump_json({**a_diagnosis(tmp_path).to_dict(), **change})
    )
    with pytest.raises(UserError, match=message):
        load_diagnosis(tmp_path)


def test_the_layout_reads_the_rank_table() -> None:
    ranks = [
        {"rank": 2, "local_rank": 0, "node": 1, "host": "b", "address": "10.0.0.2"},
        {"rank": 0, "local_rank": 0, "node": 0, "host": "a", "address": ""},
        {"rank": 3, "local_rank": 1, "node": 1, "host": "b"},
        {"rank": 1, "local_rank": 1, "node": 0, "host": "a"},
    ]
    layout = Layout.from_ranks(ranks)
    assert (layout.hosts, layout.ranks, layout.addresses) == (
        ["a", "b"],
        [[0, 1], [2, 3]],
        [None, "10.0.0.2"],
    )
    with pytest.raises(UserError, match=r"ranks\[0\]\.rank: missing"):
        Layout.from_ranks([{"node": 0}])
