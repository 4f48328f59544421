"""Every message commbench's processes exchange round-trips through its encoding, and a bad
encoding (malformed, oversized, of another kind, from a newer commbench) is refused with a
`ProtocolError` that a reader turns into one warning per kind and reason, never a crash."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from commbench.launch.protocol import (
    MESSAGES,
    Done,
    Failed,
    FleetSummary,
    GroupSummary,
    Health,
    HealthGathered,
    HeartbeatReader,
    Message,
    MusterResult,
    MusterSignIn,
    NodeDigest,
    NodeSilence,
    ProtocolError,
    RankBeat,
    RankState,
    RollCallAnswer,
    RollCallResult,
    RollCallView,
    Skips,
    read_beat,
    read_heartbeats,
)
from commbench.results.store import atomic_write

RANK = RankState(
    rank=9, local_rank=1, node=1, host="n1", pid=42, point=3, phase="timed",
    iteration=7, ticks=11, state="stopped", quiet_s=2.5, error="",
)  # fmt: skip
SAMPLES: list[Message] = [
    RankBeat(rank=3, local_rank=1, node=1, host="n1", pid=12, point=4, phase="timed",
             iteration=2, ticks=5, time=1.7e9),
    Health(phase="before", node=2, host="n2", snapshot={"gpus": [], "nics": []}, nics=[]),
    HealthGathered(phase="after", node=0, nodes=(Health(phase="after", node=1, host="n1"),)),
    Done(),
    Failed(rank=2, error="RuntimeError: boom"),
    NodeDigest(node=1, host="n1", seq=4, time=1.7e9, ranks=(RANK,)),
    FleetSummary(
        seq=3, time=1.7e9, interval=0.5, nnodes=4, reporting=3, progress=9, furthest=(3, 8),
        problems=(RANK,), silent_nodes=(NodeSilence(node=3, host="n3", quiet_s=9, never=True),),
        behind=(RankState(rank=4, node=2, point=2),), behind_count=1, truncated=0,
    ),
    GroupSummary(
        group=2, first=256, nnodes=128, seq=5, time=1.7e9, reporting=127, progress=4,
        furthest=(3, 8), running=1015, behind_count=2, problems=(RANK,),
        silent_nodes=(NodeSilence(node=300, quiet_s=20),), slowest=(RankState(rank=4, point=2),),
    ),
    RollCallAnswer(node=5, host="n5", rank=40),
    RollCallResult(nnodes=8, missing=(3,), counter=0),
    RollCallView(rank=3, error="lost peer", peers=("10.0.0.2",), answered=(0, 1), store_lost=None),
    MusterSignIn(node=1, host="n1"),
    MusterResult(expected=4, missing=(1, 3), joined=(MusterSignIn(node=0, host="n0"),)),
]  # fmt: skip


def test_every_message_kind_has_a_sample() -> None:
    assert {type(m) for m in SAMPLES} == set(MESSAGES.values())


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: m.KIND)
def test_each_message_round_trips_as_strict_json(message: Message) -> None:
    raw = message.to_json()
    assert b"\n" not in raw
    doc = json.loads(raw)  # strict: no NaN, type and version first
    assert list(doc)[:2] == ["type", "version"] and doc["type"] == message.KIND
    assert type(message).from_json(raw) == message
    assert MESSAGES[message.KIND].from_json(raw.decode()) == message


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: m.KIND)
def test_each_message_refuses_a_bad_encoding(message: Message) -> None:
    cls = type(message)
    doc = json.loads(message.to_json())

    def refused(raw: bytes | str) -> str:
        with pytest.raises(ProtocolError) as info:
            cls.from_json(raw)
        assert info.value.kind == cls.KIND
        return info.value.reason

    assert refused(b"{not json") == "malformed"
    assert refused(b"[1, 2]") == "malformed"
    assert refused(b'{"type": "%s", "version": NaN}' % cls.KIND.encode()) == "malformed"
    assert refused(json.dumps({**doc, "version": cls.VERSION + 1})) == "newer"
    assert refused(json.dumps({**doc, "version": "1"})) == "malformed"
    assert refused(json.dumps({**doc, "type": "something-else"})) == "kind"
    assert refused(b" " * (cls.MAX_BYTES + 1)) == "oversized"
    # every field this kind requires is checked for its type
    for key, value in doc.items():
        if key in ("type", "version"):
            continue
        bad = {**doc, key: {"nested": [value]}}
        try:
            cls.from_json(json.dumps(bad))
        except ProtocolError as exc:
            assert exc.reason == "malformed", (key, exc)
        else:
            assert key in ("snapshot", "nics"), f"{cls.KIND}.{key} took a dict"  # free-form


def test_a_producer_cannot_exceed_the_bound() -> None:
    with pytest.raises(ProtocolError) as info:
        RollCallAnswer(node=1, host="x" * RollCallAnswer.MAX_BYTES, rank=1).to_json()
    assert info.value.reason == "oversized"


def test_out_of_range_values_are_refused() -> None:
    bad_state = {**json.loads(RANK.to_json()), "state": "asleep"}
    with pytest.raises(ProtocolError):
        RankState.from_json(json.dumps(bad_state))
    with pytest.raises(ProtocolError):  # a node that cannot answer a roll of 8
        RollCallResult.from_json(
            json.dumps({"type": "rollcall-result", "version": 1, "nnodes": 8, "missing": [8],
                        "counter": 0})
        )  # fmt: skip
    with pytest.raises(ProtocolError):
        RankBeat.from_json(json.dumps({"type": "heartbeat", "version": 1, "rank": -1}))


def test_skips_warn_once_per_kind_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    """Kept once per kind and reason for the run's record, which the command says at its
    end; nothing is logged as it happens (issue 43, item 6: each kind reached stderr twice,
    the first time as a bare line between the points)."""
    skips = Skips()
    with caplog.at_level(logging.DEBUG):
        for _ in range(5):
            assert skips.decode(NodeDigest, b"garbage") is None
            assert skips.decode(NodeDigest, b'{"type": "digest", "version": 99}') is None
            assert skips.decode(FleetSummary, b"x" * (FleetSummary.MAX_BYTES + 10)) is None
    assert len(skips.warnings) == 3, skips.warnings
    assert caplog.records == []
    assert any("newer commbench" in w for w in skips.warnings)
    assert skips.decode(NodeDigest, None) is None and len(skips.warnings) == 3
    good = SAMPLES[5]
    assert skips.decode(NodeDigest, good.to_json()) == good


def test_heartbeat_files_are_read_bounded_and_refused_quietly(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.json").write_bytes(RankBeat(rank=0, pid=12, point=4).to_json())
    (ranks / "rank1.json").write_text('{"rank": 1, "pid": 5}')  # no type: not a heartbeat
    (ranks / "rank2.json").write_text('{"type": "heartbeat", "ver')  # torn
    huge = ranks / "rank3.json"
    with open(huge, "wb") as fh:  # sparse: 8 GiB that a whole read would try to load
        fh.write(b'{"type": "heartbeat", "version": 1, "rank": 3, "phase": "')
        fh.seek(8 << 30)
        fh.write(b'"}')
    skips = Skips()
    assert read_beat(huge, skips) is None
    beats = read_heartbeats(tmp_path, skips)
    assert sorted(beats) == [0] and beats[0].beat.point == 4 and beats[0].mtime > 0
    assert {w.split(" (")[1].split(")")[0] for w in skips.warnings} == {"oversized", "malformed"}
    os.unlink(huge)


def test_a_poll_decodes_only_the_heartbeats_that_changed(tmp_path: Path) -> None:
    """The launcher reads its ranks' heartbeats every 0.1 s and they change every 0.5 s: a
    read that finds no file changed gives the same dict, a rewritten file (replaced whole,
    as a rank writes it) a new `Sighting` for it and the same for the others."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in range(3):
        atomic_write(ranks / f"rank{r}.json", RankBeat(rank=r, point=1).to_json(), durable=False)
    reader = HeartbeatReader(tmp_path)
    first = reader.read()
    assert sorted(first) == [0, 1, 2] and reader.read() is first
    atomic_write(ranks / "rank1.json", RankBeat(rank=1, point=2).to_json(), durable=False)
    second = reader.read()
    assert second is not first and second[1].beat.point == 2
    assert second[0] is first[0] and second[2] is first[2]
    (ranks / "rank2.json").unlink()
    assert sorted(reader.read()) == [0, 1]


def test_the_fast_rank_reader_agrees_with_the_checked_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The aggregator's fast path for RankState accepts nothing the checked reader refuses,
    and reads what it accepts the same way."""
    from commbench.launch import protocol

    good = json.loads(RANK.to_json())
    docs = [
        good,
        {"type": "rank", "version": 1, "rank": 0, "state": "running"},
        {**good, "host": None, "pid": None, "quiet_s": 3},
        {**good, "phase": "p" * 900},
        {**good, "rank": True},
        {**good, "rank": 1 << 40},
        {**good, "point": -2},
        {**good, "quiet_s": -1.0},
        {**good, "state": "asleep"},
        {**good, "host": 5},
        {**good, "extra": 1},
    ]
    fast = []
    for doc in docs:
        try:
            fast.append(RankState.from_doc(doc))
        except ProtocolError:
            fast.append(None)
    monkeypatch.setattr(protocol, "_rank_state_fast", lambda d: None)
    for doc, got in zip(docs, fast, strict=True):
        try:
            checked = RankState.from_doc(doc)
        except ProtocolError:
            checked = None
        assert got == checked, doc
    assert fast[0] == RANK and fast[4] is None and fast[10] is not None
