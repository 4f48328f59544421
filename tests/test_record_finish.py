"""What `commbench record` writes when the job has ended, from what the ranks left (no job is
run here: the directories are crafted, and `finish` and the trace reader read them).

- A world size that a meta file claims and the files do not support is marked in one line,
  and the work is linear in the files there, not in the claim (issue 33, E2).
- The manifest's writer and reader share one limit: the writer never writes what the reader
  refuses; a parameter list that does not fit is left out whole, and counted (issue 33, F1).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

import commbench
from commbench.errors import UserError
from commbench.files import dump_json
from commbench.record.meta import META_FILE, RankMeta, Stepped
from commbench.record.run import finish
from commbench.traces import reader as trace_reader
from commbench.traces import records as trace_records
from commbench.traces import writer as trace_writer
from commbench.traces.names import ELEMENT_BYTES, MAX_WORLD
from commbench.traces.reader import read_manifest, read_trace
from commbench.traces.records import (
    MANIFEST_FILE,
    MAX_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_PARAMETERS,
    RANK_FILE,
    Manifest,
    Parameter,
)
from commbench.traces.writer import write_manifest
from tests.factories import ddp_trace


def meta(rank: int, world: int, **fields: object) -> RankMeta:
    return RankMeta(
        rank=rank, world_size=world, host="node0", pid=100 + rank, torch_version="2.9.0",
        argv=("train.py",), backends=("gloo",), steps=2, calls=4, closed=True, **fields,
    )  # fmt: skip


def write_meta(directory: Path, m: RankMeta) -> None:
    (directory / META_FILE.format(rank=m.rank)).write_text(dump_json(m.payload()))


def rank_files(directory: Path, ranks: range) -> None:
    for rank in ranks:
        (directory / RANK_FILE.format(rank=rank)).touch()


def finished(directory: Path, exit_code: int = 0):  # type: ignore[no-untyped-def]
    return finish(directory, ["python", "train.py"], time.time(), exit_code)


# -- E2: a world the files do not support ------------------------------------------------------


def test_a_claimed_world_of_a_million_is_marked_in_one_line(tmp_path: Path) -> None:
    """The hostile case: rank 0's meta file claims 1,048,576 ranks, beside 20,000 empty rank
    files (timed in the report, not here: it took 247 s when every rank of the claim was
    looked up)."""
    write_meta(tmp_path, meta(0, MAX_WORLD))
    rank_files(tmp_path, range(20_000))
    recorded = finished(tmp_path)
    assert recorded.manifest.world_size == MAX_WORLD and not recorded.manifest.complete
    assert recorded.ranks == tuple(range(20_000))
    assert recorded.notes == (
        "rank(s) 1, 2, 3, 4, 5, 6, 7, 8 and 19991 more left no meta file that could be read: "
        "whether they closed their file is not known, the trace is incomplete",
        "rank(s) 20000, 20001, 20002, 20003, 20004, 20005, 20006, 20007 and 1028568 more of "
        "1048576 wrote no calls: the trace is incomplete",
    )
    assert not read_manifest(tmp_path).complete  # the trace says so too


def test_ranks_that_disagree_on_the_world_are_marked(tmp_path: Path) -> None:
    write_meta(tmp_path, meta(0, 2))
    write_meta(tmp_path, meta(1, 2))
    write_meta(tmp_path, meta(5, 1000))
    rank_files(tmp_path, range(2))
    recorded = finished(tmp_path)
    assert not recorded.manifest.complete
    assert (
        "the ranks disagree on the world size (2 by rank(s) 0, 1, 1000 by rank(s) 5): the "
        "trace is incomplete"
    ) in recorded.notes
    assert len(recorded.notes) == 2  # and the ranks of the larger claim without a file


def test_a_missing_rank_in_the_middle_is_named(tmp_path: Path) -> None:
    for rank in (0, 1, 3):
        write_meta(tmp_path, meta(rank, 4))
    rank_files(tmp_path, range(4))
    (tmp_path / RANK_FILE.format(rank=2)).unlink()
    (tmp_path / "rank-07.jsonl").touch()  # not rank 7's name: not counted
    recorded = finished(tmp_path)
    assert recorded.ranks == (0, 1, 3)
    assert recorded.notes == ("rank(s) 2 of 4 wrote no calls: the trace is incomplete",)


def test_a_thousand_claims_and_errors_are_a_line_each(tmp_path: Path) -> None:
    for rank in range(1000):
        write_meta(tmp_path, meta(rank, 1000 + rank, error=f"RuntimeError: {rank}"))
    rank_files(tmp_path, range(1000))
    notes = finished(tmp_path).notes
    assert len(notes) == 3  # the claims, the ranks without a file, the capture's errors
    assert notes[0].endswith(" and 996 more sizes): the trace is incomplete")
    assert notes[2] == "rank 0: the capture stopped early: RuntimeError: 0 (and 999 more ranks)"


def test_a_rank_without_a_readable_meta_file_makes_it_incomplete(tmp_path: Path) -> None:
    write_meta(tmp_path, meta(0, 2))
    rank_files(tmp_path, range(2))
    recorded = finished(tmp_path)
    assert not recorded.manifest.complete
    assert recorded.notes == (
        "rank(s) 1 left no meta file that could be read: whether they closed their file is "
        "not known, the trace is incomplete",
    )
    (tmp_path / META_FILE.format(rank=1)).mkdir()  # and one that cannot be read
    notes = finished(tmp_path).notes
    assert len(notes) == 2 and "rank-1.meta.json: is a directory" in notes[0]


def test_a_rank_file_past_the_world_makes_it_incomplete_and_unreplayable(tmp_path: Path) -> None:
    """A rank that left calls past the world the others claim, and no meta file: the writer
    called the trace complete, and replay played the world alone, that rank's calls left out
    without a word. The writer marks it incomplete; the reader refuses it in one line."""
    for rank in range(2):
        write_meta(tmp_path, meta(rank, 2))
    rank_files(tmp_path, range(2))
    (tmp_path / RANK_FILE.format(rank=5)).write_text("")
    recorded = finished(tmp_path)
    assert not recorded.manifest.complete
    assert recorded.notes == (
        "rank(s) 5 left no meta file that could be read: whether they closed their file is "
        "not known, the trace is incomplete",
    )
    with pytest.raises(UserError, match=r"holds rank-5\.jsonl, past the manifest's world size 2"):
        read_trace(tmp_path)
    (tmp_path / RANK_FILE.format(rank=5)).unlink()
    (tmp_path / "rank-05.jsonl").write_text("")  # not a rank file's name: not the trace's
    read_trace(tmp_path)


def test_another_directory_in_the_traces_place_is_no_trace(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    made = trace.stat()
    write_meta(trace, meta(0, 1))
    rank_files(trace, range(1))
    trace.rename(tmp_path / "moved")  # kept, so that the new one cannot reuse its inode
    trace.mkdir()
    recorded = finish(trace, ["x"], time.time(), 0, made=(made.st_dev, made.st_ino))
    assert recorded.lost == (
        f"{trace} is another directory than the one the trace was written into (replaced "
        "while the job ran): no trace is left"
    )
    assert list(trace.iterdir()) == []  # nothing written into it


def test_thousands_of_unreadable_meta_files_are_one_line(tmp_path: Path) -> None:
    write_meta(tmp_path, meta(0, 1))
    rank_files(tmp_path, range(1))
    for rank in range(1, 3001):
        (tmp_path / META_FILE.format(rank=rank)).write_text("")
    notes = finished(tmp_path).notes
    assert len(notes) == 1
    assert notes[0].endswith("(and 2999 more rank meta files that could not be read)")


def test_a_rank_file_that_is_a_directory_is_not_a_rank_file(tmp_path: Path) -> None:
    write_meta(tmp_path, meta(0, 2))
    write_meta(tmp_path, meta(1, 2))
    rank_files(tmp_path, range(1))
    (tmp_path / RANK_FILE.format(rank=1)).mkdir()
    recorded = finished(tmp_path)
    assert recorded.ranks == (0,) and not recorded.manifest.complete


def test_a_whole_trace_is_complete(tmp_path: Path) -> None:
    """The control: what the cases above take away, a whole trace has."""
    for rank in range(3):
        write_meta(tmp_path, meta(rank, 3))
    rank_files(tmp_path, range(3))
    recorded = finished(tmp_path)
    assert recorded.manifest.complete and recorded.notes == () and recorded.lost is None
    assert read_manifest(tmp_path).complete


@pytest.mark.parametrize(
    ("ended", "complete"),
    [("exit", True), ("exception RuntimeError", False), ("SIGTERM", False), (None, False)],
)
def test_a_job_that_failed_at_exit_after_every_rank_ended_is_said_so(
    tmp_path: Path, ended: str | None, complete: bool
) -> None:
    """Issue 43: a job whose ranks all ran their program to its end and closed their files,
    then exited non-zero (an abort in torch's teardown at exit), left a trace of every call:
    it says so, with the count, instead of "the trace is incomplete". A rank that died of an
    exception or a signal (its file is closed too, by atexit or the handler) left less."""
    for rank in range(2):
        write_meta(tmp_path, meta(rank, 2, ended=ended if rank else "exit"))
    rank_files(tmp_path, range(2))
    recorded = finished(tmp_path, exit_code=1)
    assert recorded.manifest.complete is complete
    (note,) = recorded.notes
    if complete:
        assert "failed at exit" in note and "holds all 8 calls" in note, note
    else:
        assert note == "the job exited with status 1: the trace is incomplete"


# -- F1: one limit for the manifest's writer and reader --------------------------------------


def params(n: int, numel: int = 4096) -> tuple[Parameter, ...]:
    return tuple(Parameter(numel=numel + i % 7, dtype="bfloat16") for i in range(n))


def test_a_hundred_thousand_parameters_are_written_and_read_back(tmp_path: Path) -> None:
    """The hostile case: 100,000 stepped parameters, refused by the reader (4 MiB) after the
    writer had written them (11 MB) and called the trace complete."""
    many = params(100_000)
    manifest = Manifest(argv=("x",), world_size=1, parameters=many, complete=True)
    written = write_manifest(tmp_path, manifest)
    assert written.parameters == many and written.parameters_left_out == 0
    back = read_manifest(tmp_path)
    assert back.parameters == many and back.complete


def test_the_longest_list_a_trace_takes_fits_its_manifest(tmp_path: Path) -> None:
    """MAX_PARAMETERS parameters of the longest numel and dtype name fit MAX_MANIFEST_BYTES
    as they are written: the two limits agree, so the count alone leaves a list out."""
    longest = max(ELEMENT_BYTES, key=len)
    listed = tuple(Parameter(numel=MAX_BYTES, dtype=longest) for _ in range(MAX_PARAMETERS))
    written = write_manifest(tmp_path, Manifest(argv=("x",), world_size=1, parameters=listed))
    assert len(written.parameters) == MAX_PARAMETERS and written.parameters_left_out == 0
    assert (tmp_path / MANIFEST_FILE).stat().st_size <= MAX_MANIFEST_BYTES


SMALL_PARAMETERS = 1000
SMALL_BYTES = 120_000
"""The limits the pair is tested at below (the same code, read from the same constants):
1,000 parameters of this test's kind take about 64 KB."""


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_records, "MAX_PARAMETERS", SMALL_PARAMETERS)
    for module in (trace_records, trace_writer, trace_reader):  # each reads the shared limit
        monkeypatch.setattr(module, "MAX_MANIFEST_BYTES", SMALL_BYTES)


@pytest.mark.usefixtures("small_limits")
@pytest.mark.parametrize(
    ("parameters", "argv_bytes", "kept"),
    [
        (SMALL_PARAMETERS, 0, True),  # the most a trace lists
        (SMALL_PARAMETERS + 1, 0, False),  # past the count the readers take
        (SMALL_PARAMETERS, 60_000, False),  # counted in, but with the rest past the bytes
    ],
)
def test_the_writer_never_writes_what_the_reader_refuses(
    tmp_path: Path, parameters: int, argv_bytes: int, kept: bool
) -> None:
    listed = params(parameters)
    argv = ("x", "y" * argv_bytes) if argv_bytes else ("x",)
    manifest = Manifest(argv=argv, world_size=1, parameters=listed, complete=True)
    written = write_manifest(tmp_path, manifest)
    assert (tmp_path / MANIFEST_FILE).stat().st_size <= SMALL_BYTES
    back = read_manifest(tmp_path)  # never refused
    assert back.complete and back.argv == argv
    if kept:
        assert back.parameters == listed and back.parameters_left_out == 0
    else:  # left out whole (a part would advise wrong buckets), and counted
        assert back.parameters == () and back.parameters_left_out == parameters
    assert written == back


@pytest.mark.usefixtures("small_limits")
def test_a_manifest_too_large_without_its_parameters_is_refused_unwritten(tmp_path: Path) -> None:
    argv = ("x", "y" * SMALL_BYTES)
    with pytest.raises(UserError, match=f"more than the {SMALL_BYTES} a reader reads"):
        write_manifest(tmp_path, Manifest(argv=argv, world_size=1))
    assert list(tmp_path.iterdir()) == []


def test_the_reader_refuses_past_the_shared_limit(tmp_path: Path) -> None:
    doc = Manifest(argv=("x",), world_size=1).payload()
    text = json.dumps(doc)
    (tmp_path / MANIFEST_FILE).write_text(text + " " * (MAX_MANIFEST_BYTES + 1 - len(text)))
    with pytest.raises(UserError, match="larger than 32 MiB"):
        read_manifest(tmp_path)


@pytest.mark.usefixtures("small_limits")
def test_rank_0s_parameter_file_keeps_what_its_reader_reads(tmp_path: Path) -> None:
    for n in (SMALL_PARAMETERS, SMALL_PARAMETERS + 1):
        Stepped.of(params(n)).write(tmp_path)
        back = Stepped.read(tmp_path)
        assert back is not None
        assert (len(back.parameters), back.left_out) == (
            (n, 0) if n <= SMALL_PARAMETERS else (0, n)
        )


def test_finish_lists_the_parameters_or_says_they_were_left_out(tmp_path: Path) -> None:
    listed = tmp_path / "listed"
    listed.mkdir()
    write_meta(listed, meta(0, 1))
    Stepped.of(params(5000)).write(listed)
    rank_files(listed, range(1))
    recorded = finished(listed)
    assert recorded.manifest.complete and read_manifest(listed).parameters == params(5000)
    left = tmp_path / "left"
    left.mkdir()
    write_meta(left, meta(0, 1))
    Stepped((), MAX_PARAMETERS + 1).write(left)
    rank_files(left, range(1))
    recorded = finished(left)
    assert read_manifest(left).parameters_left_out == MAX_PARAMETERS + 1
    assert recorded.notes == (
        f"the trace does not list the job's {MAX_PARAMETERS + 1} parameters (a trace lists at "
        f"most {MAX_PARAMETERS}, in a manifest of at most 32 MiB): replay --rebucket cannot "
        "advise on it",
    )


def test_replay_rebucket_says_the_parameters_were_left_out(tmp_path: Path) -> None:
    trace = ddp_trace(tmp_path / "trace", world=2, steps=2)
    manifest = read_manifest(trace)
    write_manifest(trace, dataclasses.replace(manifest, parameters_left_out=300_000))
    with pytest.raises(UserError, match="does not list the job's 300000 parameters"):
        commbench.replay_trace(trace=trace, dry_run=True, rebucket="25", device="cpu")


def test_a_killed_jobs_calls_are_counted_from_its_files(tmp_path: Path) -> None:
    """Issue 43, item 5: after a SIGKILL, `record` said `0 calls from 2 of 2 ranks`: the
    ranks' meta files, rewritten at most once a second, still said 0, while rank-0.jsonl held
    every call of the closed steps. The summary counts what the files hold: a closed rank's
    own count, and the whole lines of the others (a torn last line is no call)."""
    ddp_trace(tmp_path, world=3, steps=2)  # 9 calls per rank
    (tmp_path / RANK_FILE.format(rank=1)).open("a").write('{"rank": 1, "seq": 9, "op"')
    for rank in (0, 1):
        write_meta(tmp_path, dataclasses.replace(meta(rank, 3), calls=0, closed=False))
    write_meta(tmp_path, dataclasses.replace(meta(2, 3), calls=9))
    recorded = finished(tmp_path, exit_code=137)
    assert recorded.calls == 27 and recorded.ranks == (0, 1, 2)
    assert not recorded.manifest.complete
    assert sum(len(c) for c in read_trace(tmp_path).calls.values()) == 27
