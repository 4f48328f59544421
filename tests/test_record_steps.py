"""The rule that gives a recorded call its step (commbench/record/steps.py), fed the events a
capture sees, without torch; and the writer's rewriting of steps it learns late
(`TraceWriter.restep`). The recorded jobs that check it end to end are in test_record.py
(prestep_job, marked_job, pipeline_job)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench.record.steps import Restep, Steps
from commbench.traces.reader import read_trace
from commbench.traces.records import Call
from commbench.traces.writer import Mark, TraceWriter
from tests.factories import trace_call, write_trace

BROADCAST = ("broadcast", 4096)
ALL_REDUCE = ("all_reduce", 1024)
PARAMS = ("broadcast", 1 << 20)  # DDP's broadcast of the parameters


class Job:
    """A rank's events, as its capture would feed them, and the step each call got."""

    def __init__(self) -> None:
        self.steps = Steps(keep=64)
        self.calls: list[tuple[str, int | None]] = []
        self.resteps: list[Restep] = []

    def call(self, op: str, nbytes: int = 16, site: str | None = None) -> None:
        """A call of `nbytes`, issued at `site` (a line of the job) where given."""
        step, restep = self.steps.call(p2p=op in ("send", "recv"))
        if self.steps.collecting:
            where = None if site is None else ((site, 1),)
            self.steps.remember((op, nbytes), where, (op,))
        self._apply(restep)
        self.calls.append((op, step))

    def forward(self) -> None:
        self._apply(self.steps.begin())

    def marker(self, *, optimizer: bool = False) -> None:
        if self.steps.end(optimizer=optimizer):
            self.calls = [(op, 1 if step is None else step) for op, step in self.calls]

    def optimizer(self, *inside: str, key: int = 0) -> None:
        """An optimizer's step (its pre-hook, the calls it makes, its post-hook: a marker)."""
        self.optimizer_begins(key)
        for op in inside:
            self.call(op)
        self.optimizer_ends(key)

    def optimizer_begins(self, key: int = 0) -> None:
        self.steps.optimizer_begins(key)

    def optimizer_ends(self, key: int = 0) -> None:
        """An optimizer's post-hook: a marker unless its step is inside another's."""
        if self.steps.optimizer_ends(key):
            self.marker(optimizer=True)

    def end(self) -> list[tuple[str, int | None]]:
        """The calls as written when the process ends."""
        return [(op, None if self.steps.after_last(step) else step) for op, step in self.calls]

    def _apply(self, restep: Restep | None) -> None:
        if restep is not None:
            self.resteps.append(restep)
            for seq in restep.seqs:
                self.calls[seq] = (self.calls[seq][0], restep.step)


def test_ddps_start_up_stays_start_up() -> None:
    job = Job()
    job.call("all_gather")
    job.call(*PARAMS)
    for _ in range(2):
        job.forward()
        job.call(*ALL_REDUCE)
        job.marker()
    job.call("barrier")
    assert job.end() == [
        ("all_gather", None), ("broadcast", None), ("all_reduce", 1), ("all_reduce", 2),
        ("barrier", None),
    ]  # fmt: skip


def test_a_per_step_call_before_the_forward_is_its_steps_the_first_included() -> None:
    """Step 1's broadcast is start-up's last call until step 2 repeats it before its own
    forward; DDP's broadcast before it, repeated by no step, stays start-up."""
    job = Job()
    job.call(*PARAMS)
    for _ in range(3):
        job.call(*BROADCAST)
        job.forward()
        job.call(*ALL_REDUCE)
        job.marker()
    job.call("barrier")
    assert job.end() == [
        ("broadcast", None),
        ("broadcast", 1), ("all_reduce", 1),
        ("broadcast", 2), ("all_reduce", 2),
        ("broadcast", 3), ("all_reduce", 3),
        ("barrier", None),
    ]  # fmt: skip
    assert job.resteps == [Restep(range(1, 2), 1)]


def test_a_job_of_one_step_cannot_tell_and_keeps_it_in_start_up() -> None:
    """The final barrier after the only step is no prologue of a step 2: it must not make a
    start-up barrier step 1's."""
    job = Job()
    job.call("barrier")
    job.forward()
    job.call(*ALL_REDUCE)
    job.marker()
    job.call("barrier")
    assert job.end() == [("barrier", None), ("all_reduce", 1), ("barrier", None)]
    assert job.resteps == []


def test_a_send_or_recv_begins_the_first_step() -> None:
    """A pipeline's last stage receives before its first forward: the warm-up, the shapes and
    the first activation are step 1's, as they are on the stage that sends them after its
    forward."""
    stage0, stage1 = Job(), Job()
    stage0.call("send")
    stage0.forward()
    stage0.call("send")
    stage1.call("recv")
    stage1.call("recv")
    stage1.forward()
    for job in (stage0, stage1):
        job.marker()
    assert stage0.end() == [("send", 1), ("send", 1)]
    assert stage1.end() == [("recv", 1), ("recv", 1)]


def test_a_job_without_forward_marks_its_steps_and_has_no_start_up() -> None:
    job = Job()
    for _ in range(2):
        job.call(*ALL_REDUCE)
        job.marker()
    job.call("barrier")
    assert job.end() == [("all_reduce", 1), ("all_reduce", 2), ("barrier", None)]


def test_calls_after_the_last_marker_belong_to_none_even_after_a_forward() -> None:
    """An evaluation after the last optimizer step: its forward does not make it a step."""
    job = Job()
    job.forward()
    job.call(*ALL_REDUCE)
    job.marker()
    job.forward()
    job.call("all_reduce", 4)
    assert job.end() == [("all_reduce", 1), ("all_reduce", None)]


def test_a_job_without_markers_keeps_step_1_after_its_start_up() -> None:
    """Nothing to end a step: the calls after the start-up are step 1's, as before a first
    marker (and nothing of the rank file is rewritten at its end)."""
    job = Job()
    job.call(*PARAMS)
    job.forward()
    job.call(*ALL_REDUCE)
    assert job.end() == [("broadcast", None), ("all_reduce", 1)]


def test_a_batch_of_varying_length_broadcast_before_each_forward_is_each_steps() -> None:
    """Rank 0 broadcasts each step's batch, its shape first: the shape is the same every
    step, the batch's length is not. The same lines of the job issue them: step 1's are
    step 1's, as when they are the same size."""
    job = Job()
    job.call(*PARAMS, site="startup")
    for length in (2048, 3072):
        job.call("broadcast", 24, site="shape")
        job.call("broadcast", length, site="batch")
        job.forward()
        job.call(*ALL_REDUCE)
        job.marker()
    assert job.end() == [
        ("broadcast", None), ("broadcast", 1), ("broadcast", 1), ("all_reduce", 1),
        ("broadcast", 2), ("broadcast", 2), ("all_reduce", 2),
    ]  # fmt: skip


def test_calls_of_other_sizes_from_other_lines_stay_start_up() -> None:
    """A job broadcasts its parameters itself, then each step a batch of another size, of
    the same dtype, from another line: its last parameter is start-up still (the batch is
    step 1's); the same without sites: sizes that differ are other calls."""
    for site in ("parameters", None):
        job = Job()
        for _ in range(2):
            job.call("broadcast", 4096, site=site)
        for length in (2048, 3072):
            job.call("broadcast", length, site=site and "batch")
            job.forward()
            job.marker()
        expected = [None, None, 1, 2] if site else [None, None, None, 2]
        assert [step for _, step in job.end()] == expected


def test_optimizers_stepped_in_turn_end_one_step() -> None:
    """One optimizer a model part (torchtitan's pipeline stages) or a kind of parameter
    (Muon and AdamW), stepped one after the other: one training step, not one per optimizer;
    the calls an optimizer makes in its step (a DTensor's Partial gradient reduced) are that
    step's, the second optimizer's too."""
    job = Job()
    for _ in range(2):
        job.forward()
        job.call(*ALL_REDUCE)
        job.optimizer("all_reduce")
        job.optimizer("all_gather")
    job.call("barrier")
    assert job.end() == [
        ("all_reduce", 1), ("all_reduce", 1), ("all_gather", 1),
        ("all_reduce", 2), ("all_reduce", 2), ("all_gather", 2), ("barrier", None),
    ]  # fmt: skip
    assert job.steps.done == 2


def test_optimizers_with_a_forward_or_a_call_between_end_a_step_each() -> None:
    """A GAN's discriminator and generator each train and step in turn: two steps; so do two
    optimizer steps with a call between, and two `commbench.record.step()` markers."""
    gan = Job()
    gan.forward()
    gan.call(*ALL_REDUCE)
    gan.optimizer()
    gan.forward()
    gan.optimizer()
    gan.call(*ALL_REDUCE)
    gan.optimizer()
    gan.optimizer("all_gather")
    assert gan.end() == [("all_reduce", 1), ("all_reduce", 3), ("all_gather", 3)]
    marked = Job()
    marked.call(*ALL_REDUCE)
    marked.marker()
    marked.marker()
    marked.call("all_gather")
    marked.marker()
    assert marked.end() == [("all_reduce", 1), ("all_gather", 3)]


def zero_step(job: Job) -> None:
    """A training step of ZeroRedundancyOptimizer over DDP: the forward, the gradients'
    all_reduce, ZeRO's step (key 1) with its shard's optimizer's step (key 2) inside it, then
    ZeRO's broadcast of the shards, before its own post-hook."""
    job.forward()
    job.call(*ALL_REDUCE)
    job.optimizer_begins(1)
    job.optimizer_begins(2)
    job.optimizer_ends(2)
    job.call(*BROADCAST)
    job.call(*BROADCAST)
    job.optimizer_ends(1)


def test_an_optimizer_stepped_inside_another_is_the_outer_ones_step() -> None:
    """Hooks fire outer-pre, inner-pre, inner-post, outer-post: only the outermost post is a
    marker, so the broadcasts after the inner step are the step's, and 3 steps are 3."""
    job = Job()
    job.call(*PARAMS)
    for _ in range(3):
        zero_step(job)
    job.call("barrier")
    each = [(op, k) for k in (1, 2, 3) for op in ("all_reduce", "broadcast", "broadcast")]
    assert job.end() == [("broadcast", None), *each, ("barrier", None)]
    assert job.steps.done == 3


def test_nested_optimizers_stepped_in_turn_end_one_step() -> None:
    """Two ZeROs stepped one after the other (the rule of optimizers in turn, at the
    outermost level): one step; the inner pre-hook, nothing between it and the reopening,
    reopens nothing more."""
    job = Job()
    for _ in range(2):
        zero_step(job)
        job.optimizer_begins(3)
        job.optimizer("all_gather", key=4)
        job.optimizer_ends(3)
    assert [step for _, step in job.end()] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert job.steps.done == 2


def test_an_optimizer_step_that_raised_holds_no_later_step_inside_it() -> None:
    """An exception skips an optimizer's post-hook: its next step (or an outer one's end)
    forgets the step left running, and markers go on."""
    job = Job()
    job.forward()
    job.optimizer_begins(1)  # raised: no post-hook; the job caught it and went on
    job.forward()
    job.call(*ALL_REDUCE)
    job.optimizer(key=1)
    job.forward()
    job.call(*ALL_REDUCE)
    job.optimizer_begins(1)
    job.optimizer_begins(2)  # the inner one raised, ZeRO went on
    job.optimizer_ends(1)
    job.call(*ALL_REDUCE)
    job.optimizer(key=1)
    assert [step for _, step in job.end()] == [1, 2, 3]


def test_the_captures_hooks_close_a_step_at_the_outermost_post_only(tmp_path: Path) -> None:
    """The capture's own hooks, fired as ZeroRedundancyOptimizer fires them (its step runs
    its shard's optimizer's step inside): one step per outer step, not two."""
    from commbench.record.capture import Capture

    capture = Capture(tmp_path)
    zero, shard = object(), object()
    for k in (1, 2):
        capture._on_forward(object(), ())  # a forward between: two steps, not two in turn
        capture._before_optimizer_step(zero, (), {})
        capture._before_optimizer_step(shard, (), {})
        capture._on_optimizer_step(shard, (), {})
        assert capture.steps_done == k - 1, "the inner post closed a step"
        capture._on_optimizer_step(zero, (), {})
        assert capture.steps_done == k


def _call(step: int | None) -> Call:
    return trace_call("all_reduce", 64, step=step, ranks=())


def test_the_writer_rewrites_the_steps_it_is_told(tmp_path: Path) -> None:
    """The lines named get the step; the others are kept byte for byte; writing goes on after
    them."""
    trace = write_trace(tmp_path / "t", {0: []})
    writer = TraceWriter(trace, 0)
    for step in (None, None, 1, 1):
        writer.write(_call(step))
    writer.flush()
    before = (trace / "rank-0.jsonl").read_bytes().splitlines(keepends=True)
    tail = writer.mark()
    writer.write(_call(2))
    writer.write(_call(2))
    assert writer.restep(tail, range(tail.seq, writer.written), None)
    assert writer.restep(Mark(offset=0, seq=0), range(1, 2), 1)
    writer.write(_call(3))
    writer.close()
    after = (trace / "rank-0.jsonl").read_bytes().splitlines(keepends=True)
    assert after[0] == before[0] and after[2:4] == before[2:4]
    calls = read_trace(trace).calls[0]
    assert [(c.seq, c.step) for c in calls] == [(0, None), (1, 1), (2, 1), (3, 1), (4, None),
                                                (5, None), (6, 3)]  # fmt: skip


def test_the_writer_rewrites_through_its_handle(tmp_path: Path) -> None:
    """A job that moved its trace directory: the file written is the one rewritten, nothing
    is made where the directory was; a group keeps its ranks."""
    writer = TraceWriter(tmp_path / "t", 0)
    writer.write(trace_call("all_reduce", 64, group="7", ranks=(0, 3)))
    (tmp_path / "t").rename(tmp_path / "moved")
    assert writer.restep(Mark(offset=0, seq=0), range(0, 1), 4)
    writer.close()
    assert not (tmp_path / "t").exists()
    line = (tmp_path / "moved" / "rank-0.jsonl").read_text()
    assert '"step": 4' in line and '"ranks": [0, 3]' in line


def test_the_writer_leaves_more_than_it_may_read_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from commbench.traces import writer as trace_writer

    monkeypatch.setattr(trace_writer, "MAX_RESTEP_BYTES", 100)
    writer = TraceWriter(tmp_path, 0)
    writer.write(_call(1))
    assert not writer.restep(Mark(offset=0, seq=0), range(0, 1), None)
    writer.close()
    assert json.loads((tmp_path / "rank-0.jsonl").read_text())["step"] == 1
