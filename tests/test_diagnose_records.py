"""What a diagnosis writes and reads back, through typed records (commbench.diagnose.journal
and .verdict): a test's line of events.jsonl and diagnosis.json. In-process: nothing is
launched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from commbench.diagnose.journal import GPU_PAIRS, INTER, RecordedTest
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
