"""Pipeline parallel with torch.distributed.pipelining, as a user writes it: each rank wraps
its part of a stack of linears in `PipelineStage` by hand, 2 ranks on gloo, MICRO
microbatches, 3 steps of SGD, then a final barrier. Prints its own truth
(tests/jobs/truth.py), from each schedule's definition (torch 2.13's schedules.py, stage.py):

`--schedule 1f1b`: `Schedule1F1B`, one stage a rank (stage = rank). Stage s runs
`num_stages - s` warm-up forwards, then alternates one backward and one forward, then the
remaining backwards. Its sends and receives go through `_batch_p2p`: a list of only sends or
only receives is issued op by op (`isend`/`irecv`), a mixed one with
`dist.batch_isend_irecv` (its ops in the list's order). With 2 stages and MICRO = 4:
  stage 0: send a0 | batch [send a1, recv g0] | [send a2, recv g1] | [send a3, recv g2] |
           recv g3
  stage 1: recv a0 | batch [send g0, recv a1] | [send g1, recv a2] | [send g2, recv a3] |
           send g3
(a: a microbatch's activation, forward; g: the gradient of the last stage's input, backward).

`--schedule interleaved`: `ScheduleInterleaved1F1B` with 2 stages a rank (4 stages: rank r
holds stages r and r + 2). Its runtime runs a lowered program action by action
(`pipeline_order_with_comms`: the compute actions of Interleaved 1F1B with a SEND_F after
every forward whose next stage is on the other rank, a SEND_B after every backward whose
previous stage is, and each RECV placed in the receiving rank's program by its sender's):
each SEND/RECV one `isend`/`irecv` of a microbatch's activation or gradient, no batches.
The job reads that program from the schedule (it is the schedule's definition of what runs)
and turns each of its communication actions into one call.

`--shapes given` (default) hands each stage its input and output shapes: every stage votes
STATIC. `--shapes inferred` does not: the stages infer them (DYNAMIC), in step 1.

In step 1, before the first microbatch, the stages vote on their inference mode
(`_warmup_forward_vote` from the first stage to the last, `_warmup_backward_result` back):
at each stage boundary across ranks one int32 element goes forward, then one comes back,
each a blocking `dist.send`/`dist.recv`. Inferred shapes then add the metadata exchange:
`_send_meta` of the forward outputs' metadata from each stage to the next across ranks, in
stage order, then of the input gradients' metadata from each stage to the previous, in
reverse order, each `send_object_list(use_batch=True)`: the pickle's length (one int64),
then the pickle (uint8), each in a `batch_isend_irecv` of its own. The pickle's length is
that of `pickle.dumps` of the metadata object, which the job computes from its stage's own
inferred metadata, as `send_object_list` does.

    torchrun --nproc-per-node 2 tests/jobs/pipeline_1f1b_job.py [--schedule 1f1b|interleaved]
"""

import argparse
import io
import pickle

import torch
import torch.distributed as dist
import truth
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B
from torch.distributed.pipelining.schedules import _ComputationType

HIDDEN = 32
BATCH = 16
MICRO = 4
MICROBATCH = BATCH // MICRO
F32, I32, I64 = 4, 4, 8
ACTIVATION = MICROBATCH * HIDDEN * F32


class Counter:
    """The rank's `batch_isend_irecv` calls, numbered from 0 in issue order."""

    def __init__(self) -> None:
        self.next = 0

    def take(self) -> int:
        self.next += 1
        return self.next - 1


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (output - target).square().mean()


def p2p(op: str, step: int, peer: int, nbytes: int, dtype: str, batch: int | None = None) -> None:
    truth.say(op, step, in_bytes=0 if op == "recv" else nbytes, out_bytes=nbytes, dtype=dtype,
              peer=peer, batch=batch)  # fmt: skip


def pickled_bytes(obj: object) -> int:
    """The length of `send_object_list`'s pickle of `obj` (`_object_to_tensor`: a
    `pickle.Pickler` dump)."""
    f = io.BytesIO()
    pickle.Pickler(f).dump(obj)
    return len(f.getvalue())


def warmup_truth(stage_ids: list[int], num_stages: int, world: int, rank: int) -> None:
    """The inference-mode vote: forward over the rank's stages in order, then back."""

    def on(s: int) -> int:  # the rank of stage s (looped placement)
        return s % world

    for s in stage_ids:
        if s > 0 and on(s - 1) != rank:
            p2p("recv", 1, on(s - 1), I32, "int32")
        if s < num_stages - 1 and on(s + 1) != rank:
            p2p("send", 1, on(s + 1), I32, "int32")
    for s in reversed(stage_ids):
        if s < num_stages - 1 and on(s + 1) != rank:
            p2p("recv", 1, on(s + 1), I32, "int32")
        if s > 0 and on(s - 1) != rank:
            p2p("send", 1, on(s - 1), I32, "int32")


def meta_truth(stages: list[PipelineStage], num_stages: int, world: int, rank: int,
               batches: Counter) -> None:  # fmt: skip
    """The inferred shapes: forward metadata across each boundary in stage order, then the
    gradients' back in reverse; each object a length and a pickle, each its own batch."""
    from torch.distributed.pipelining.stage import _StageBackwardMeta, _StageForwardMeta

    def on(s: int) -> int:
        return s % world

    by_index = {stage.stage_index: stage for stage in stages}

    def obj(op: str, peer: int, nbytes: int) -> None:
        p2p(op, 1, peer, I64, "int64", batches.take())
        p2p(op, 1, peer, nbytes, "uint8", batches.take())

    def forward_meta(s: int) -> int:  # what stage s sends forward (its outputs')
        return pickled_bytes(_StageForwardMeta(forward_metas=by_index[s]._stage_meta.outputs))

    def backward_meta(s: int) -> int:  # what stage s sends back (its input grads')
        return pickled_bytes(_StageBackwardMeta(backward_metas=by_index[s]._stage_meta.input_grads))

    for s in sorted(by_index):
        if s > 0 and on(s - 1) != rank:  # the same object the sender pickled
            obj("recv", on(s - 1), pickled_bytes(
                _StageForwardMeta(forward_metas=by_index[s]._stage_meta.inputs)))  # fmt: skip
        if s < num_stages - 1 and on(s + 1) != rank:
            obj("send", on(s + 1), forward_meta(s))
    for s in sorted(by_index, reverse=True):
        if s < num_stages - 1 and on(s + 1) != rank:
            obj("recv", on(s + 1), pickled_bytes(
                _StageBackwardMeta(backward_metas=by_index[s]._stage_meta.output_grads)))  # fmt: skip
        if s > 0 and on(s - 1) != rank:
            obj("send", on(s - 1), backward_meta(s))


def one_f_one_b_truth(step: int, stage: int, num_stages: int, batches: Counter) -> None:
    """Schedule1F1B's sends and receives for one stage (module docstring)."""
    nxt, prev = stage + 1, stage - 1
    first, last = stage == 0, stage == num_stages - 1

    def fwd_send(mb: int) -> list[tuple[str, int]]:
        return [] if last else [("send", nxt)]

    def fwd_recv(mb: int) -> list[tuple[str, int]]:
        return [] if first else [("recv", prev)]

    def bwd_send(mb: int) -> list[tuple[str, int]]:
        return [] if first else [("send", prev)]

    def bwd_recv(mb: int) -> list[tuple[str, int]]:
        return [] if last else [("recv", nxt)]

    def issue(ops: list[tuple[str, int]]) -> None:
        mixed = len({op for op, _ in ops}) > 1
        batch = batches.take() if mixed else None
        for op, peer in ops:
            p2p(op, step, peer, ACTIVATION, "float32", batch)

    warmup = min(MICRO, num_stages - stage)
    fwd = bwd = 0
    sends: list[tuple[str, int]] = []
    for _ in range(warmup):
        issue(fwd_recv(fwd))
        sends = fwd_send(fwd)
        if fwd != warmup - 1:
            issue(sends)
        fwd += 1
    while True:
        issue(sends + bwd_recv(bwd))
        back = bwd_send(bwd)
        bwd += 1
        if fwd == MICRO:
            break
        issue(back + fwd_recv(fwd))
        sends = fwd_send(fwd)
        fwd += 1
    issue(back)
    while bwd < MICRO:
        issue(bwd_recv(bwd))
        issue(bwd_send(bwd))
        bwd += 1


def interleaved_truth(step: int, schedule: ScheduleInterleaved1F1B, rank: int, world: int) -> None:
    """The communication actions of the rank's lowered program, one call each."""

    def on(s: int) -> int:
        return s % world

    ct = _ComputationType
    peers = {ct.SEND_F: ("send", 1), ct.RECV_F: ("recv", -1),
             ct.SEND_B: ("send", -1), ct.RECV_B: ("recv", 1)}  # fmt: skip
    for action in schedule.pipeline_order_with_comms[rank]:
        if action.computation_type in peers:
            op, towards = peers[action.computation_type]
            p2p(op, step, on(action.stage_index + towards), ACTIVATION, "float32")


def build(
    schedule_name: str, shapes: str, rank: int, world: int
) -> tuple[list[PipelineStage], Schedule1F1B | ScheduleInterleaved1F1B, int]:
    per_rank = 1 if schedule_name == "1f1b" else 2
    num_stages = per_rank * world
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU())
              for _ in range(num_stages)]  # fmt: skip
    stages = []
    for s in range(rank, num_stages, world):
        given = {  # the input's gradient is sent back from every stage but the first
            "input_args": torch.empty(MICROBATCH, HIDDEN, requires_grad=s > 0),
            "output_args": torch.empty(MICROBATCH, HIDDEN, requires_grad=True),
        } if shapes == "given" else {}  # fmt: skip
        stages.append(PipelineStage(layers[s], s, num_stages, torch.device("cpu"), **given))
    if schedule_name == "1f1b":
        schedule = Schedule1F1B(stages[0], n_microbatches=MICRO, loss_fn=loss_fn)
    else:
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=MICRO, loss_fn=loss_fn)
    return stages, schedule, num_stages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedule", choices=("1f1b", "interleaved"), default="1f1b")
    parser.add_argument("--shapes", choices=("given", "inferred"), default="given")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    stages, schedule, num_stages = build(args.schedule, args.shapes, rank, world)
    params = [p for stage in stages for p in stage.submod.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.01)
    batches = Counter()
    holds_first = any(stage.is_first for stage in stages)
    holds_last = any(stage.is_last for stage in stages)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step)
        x, target = torch.randn(BATCH, HIDDEN, generator=data), torch.randn(BATCH, HIDDEN)
        kwargs = {"target": target, "losses": []} if holds_last else {}
        schedule.step(*((x,) if holds_first else ()), **kwargs)
        optimizer.step()
        optimizer.zero_grad()
        if step == 1:
            warmup_truth([s.stage_index for s in stages], num_stages, world, rank)
            if args.shapes == "inferred":
                meta_truth(stages, num_stages, world, rank, batches)
        if args.schedule == "1f1b":
            one_f_one_b_truth(step, stages[0].stage_index, num_stages, batches)
        else:
            interleaved_truth(step, schedule, rank, world)
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"pipeline_1f1b_job: {args.schedule}, {args.shapes} shapes, {args.steps} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
