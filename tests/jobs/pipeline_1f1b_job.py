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

`--schedule zbv`: `ScheduleZBVZeroBubble` (zero bubble, backward split into input and weight
parts) with 2 stages a rank in a V: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. Its
runtime and its program are the interleaved one's; between stages 1 and 2, on the same rank,
the activation and the gradient are handed over locally: no call.

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

`--optimizer-per-stage`: one optimizer for each of the rank's stages, each stepped in turn
at the end of a training step (torchtitan's `OptimizersContainer`): a training step is still
one step, however many optimizers it steps.

`--dp 2` (4 ranks) runs two pipelines side by side on a DeviceMesh ("dp", "pp") of (2, 2):
each `PipelineStage` on its "pp" group ({0, 1} or {2, 3}), every call above on that group
with global peers; after each `schedule.step` the job all-reduces each gradient over its
"dp" group ({0, 2} or {1, 3}) itself, in its parameters' order (synchronous).

    torchrun --nproc-per-node 2 tests/jobs/pipeline_1f1b_job.py [--schedule 1f1b|interleaved|zbv]
        [--shapes given|inferred] [--dp N]
"""

import argparse
import io
import pickle
from dataclasses import dataclass

import torch
import torch.distributed as dist
import truth
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleInterleaved1F1B,
    ScheduleZBVZeroBubble,
)
from torch.distributed.pipelining.schedules import _ComputationType, _PipelineScheduleRuntime

Schedule = Schedule1F1B | ScheduleInterleaved1F1B | ScheduleZBVZeroBubble

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


@dataclass(frozen=True)
class Placement:
    """Where the stages are: the rank's pipeline group of `pp` ranks is the `dp`-th of the
    world's (global ranks dp * pp + q), and stage s is on its rank s % pp (looped), or with
    `v` on rank s or 2 pp - 1 - s (the V: rank 0 holds the first and the last stage)."""

    pp: int
    dp: int
    pp_rank: int
    v: bool = False

    def pp_rank_of(self, stage: int) -> int:
        if self.v:
            return stage if stage < self.pp else 2 * self.pp - 1 - stage
        return stage % self.pp

    def rank_of(self, stage: int) -> int:
        """The global rank that holds `stage`."""
        return self.dp * self.pp + self.pp_rank_of(stage)

    def local(self, stage: int) -> bool:
        return self.pp_rank_of(stage) == self.pp_rank

    def stages(self, num_stages: int) -> list[int]:
        """The rank's stages, in the order it hands them to its schedule."""
        return [s for s in range(num_stages) if self.local(s)]

    @property
    def group(self) -> list[int]:
        return [self.dp * self.pp + q for q in range(self.pp)]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (output - target).square().mean()


def p2p(
    op: str,
    step: int,
    peer: int,
    nbytes: int,
    dtype: str,
    batch: int | None = None,
    *,
    group: list[int],
) -> None:
    truth.say(op, step, in_bytes=0 if op == "recv" else nbytes, out_bytes=nbytes, dtype=dtype,
              peer=peer, batch=batch, group=group)  # fmt: skip


def pickled_bytes(obj: object) -> int:
    """The length of `send_object_list`'s pickle of `obj` (`_object_to_tensor`: a
    `pickle.Pickler` dump)."""
    f = io.BytesIO()
    pickle.Pickler(f).dump(obj)
    return len(f.getvalue())


def warmup_truth(stage_ids: list[int], num_stages: int, at: Placement) -> None:
    """The inference-mode vote: forward over the rank's stages in order, then back."""
    on, group = at.rank_of, at.group
    for s in stage_ids:
        if s > 0 and not at.local(s - 1):
            p2p("recv", 1, on(s - 1), I32, "int32", group=group)
        if s < num_stages - 1 and not at.local(s + 1):
            p2p("send", 1, on(s + 1), I32, "int32", group=group)
    for s in reversed(stage_ids):
        if s < num_stages - 1 and not at.local(s + 1):
            p2p("recv", 1, on(s + 1), I32, "int32", group=group)
        if s > 0 and not at.local(s - 1):
            p2p("send", 1, on(s - 1), I32, "int32", group=group)


def meta_truth(
    stages: list[PipelineStage], num_stages: int, at: Placement, batches: Counter
) -> None:
    """The inferred shapes: forward metadata across each boundary in stage order, then the
    gradients' back in reverse; each object a length and a pickle, each its own batch."""
    from torch.distributed.pipelining.stage import _StageBackwardMeta, _StageForwardMeta

    on, group = at.rank_of, at.group
    by_index = {stage.stage_index: stage for stage in stages}

    def obj(op: str, peer: int, nbytes: int) -> None:
        p2p(op, 1, peer, I64, "int64", batches.take(), group=group)
        p2p(op, 1, peer, nbytes, "uint8", batches.take(), group=group)

    def meta(s: int, forward: bool, sent: bool) -> int:
        """The pickle's length of the metadata stage s sends (`sent`) or receives: the
        receiver's is the same object, unpickled."""
        m = by_index[s]._stage_meta
        if forward:
            return pickled_bytes(_StageForwardMeta(forward_metas=m.outputs if sent else m.inputs))
        grads = m.input_grads if sent else m.output_grads
        return pickled_bytes(_StageBackwardMeta(backward_metas=grads))

    for s in sorted(by_index):
        if s > 0 and not at.local(s - 1):
            obj("recv", on(s - 1), meta(s, forward=True, sent=False))
        if s < num_stages - 1 and not at.local(s + 1):
            obj("send", on(s + 1), meta(s, forward=True, sent=True))
    for s in sorted(by_index, reverse=True):
        if s < num_stages - 1 and not at.local(s + 1):
            obj("recv", on(s + 1), meta(s, forward=False, sent=False))
        if s > 0 and not at.local(s - 1):
            obj("send", on(s - 1), meta(s, forward=False, sent=True))


def one_f_one_b_truth(
    step: int, stage: int, num_stages: int, at: Placement, batches: Counter
) -> None:
    """Schedule1F1B's sends and receives for one stage (module docstring)."""
    nxt, prev = at.rank_of(stage + 1), at.rank_of(stage - 1)
    first, last = stage == 0, stage == num_stages - 1
    fwd_send = [] if last else [("send", nxt)]
    fwd_recv = [] if first else [("recv", prev)]
    bwd_send = [] if first else [("send", prev)]
    bwd_recv = [] if last else [("recv", nxt)]

    def issue(ops: list[tuple[str, int]]) -> None:
        mixed = len({op for op, _ in ops}) > 1
        batch = batches.take() if mixed else None
        for op, peer in ops:
            p2p(op, step, peer, ACTIVATION, "float32", batch, group=at.group)

    warmup = min(MICRO, num_stages - stage)
    fwd = bwd = 0
    sends: list[tuple[str, int]] = []
    for _ in range(warmup):
        issue(fwd_recv)
        sends = fwd_send
        if fwd != warmup - 1:
            issue(sends)
        fwd += 1
    while True:
        issue(sends + bwd_recv)
        bwd += 1
        if fwd == MICRO:
            break
        issue(bwd_send + fwd_recv)
        sends = fwd_send
        fwd += 1
    issue(bwd_send)
    while bwd < MICRO:
        issue(bwd_recv)
        issue(bwd_send)
        bwd += 1


def interleaved_truth(step: int, schedule: _PipelineScheduleRuntime, at: Placement) -> None:
    """The communication actions of the rank's lowered program, one call each."""
    ct = _ComputationType
    peers = {ct.SEND_F: ("send", 1), ct.RECV_F: ("recv", -1),
             ct.SEND_B: ("send", -1), ct.RECV_B: ("recv", 1)}  # fmt: skip
    for action in schedule.pipeline_order_with_comms[at.pp_rank]:
        if action.computation_type in peers:
            op, towards = peers[action.computation_type]
            peer = at.rank_of(action.stage_index + towards)
            p2p(op, step, peer, ACTIVATION, "float32", group=at.group)


def dp_truth(step: int, stages: list[PipelineStage], dp_group: list[int]) -> None:
    """The job's own all_reduce of each gradient over its data-parallel group."""
    for stage in stages:
        for param in stage.submod.parameters():
            truth.say_tensor("all_reduce", step, param, group=dp_group, async_op=False)


def build(
    schedule_name: str, shapes: str, at: Placement, pp_group: dist.ProcessGroup | None
) -> tuple[list[PipelineStage], Schedule, int]:
    per_rank = 1 if schedule_name == "1f1b" else 2  # interleaved, zbv: 2 stages a rank
    num_stages = per_rank * at.pp
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU())
              for _ in range(num_stages)]  # fmt: skip
    stages = []
    for s in at.stages(num_stages):
        given = {  # the input's gradient is sent back from every stage but the first
            "input_args": torch.empty(MICROBATCH, HIDDEN, requires_grad=s > 0),
            "output_args": torch.empty(MICROBATCH, HIDDEN, requires_grad=True),
        } if shapes == "given" else {}  # fmt: skip
        stage = PipelineStage(layers[s], s, num_stages, torch.device("cpu"), group=pp_group,
                              **given)  # fmt: skip
        stages.append(stage)
    if schedule_name == "1f1b":
        schedule = Schedule1F1B(stages[0], n_microbatches=MICRO, loss_fn=loss_fn)
    elif schedule_name == "zbv":
        schedule = ScheduleZBVZeroBubble(stages, n_microbatches=MICRO, loss_fn=loss_fn)
    else:
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=MICRO, loss_fn=loss_fn)
    return stages, schedule, num_stages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedule", choices=("1f1b", "interleaved", "zbv"), default="1f1b")
    parser.add_argument("--shapes", choices=("given", "inferred"), default="given")
    parser.add_argument("--dp", type=int, default=1, help="data-parallel replicas")
    parser.add_argument("--optimizer-per-stage", action="store_true")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pp = world // args.dp
    at = Placement(pp=pp, dp=rank // pp, pp_rank=rank % pp, v=args.schedule == "zbv")
    pp_group, dp_group = None, None
    if args.dp > 1:
        mesh = init_device_mesh("cpu", (args.dp, pp), mesh_dim_names=("dp", "pp"))
        pp_group, dp_group = mesh["pp"].get_group(), mesh["dp"].get_group()
    stages, schedule, num_stages = build(args.schedule, args.shapes, at, pp_group)
    params = [p for stage in stages for p in stage.submod.parameters()]
    if args.optimizer_per_stage:  # torchtitan's way: one optimizer a model part, stepped in turn
        optimizers = [torch.optim.SGD(stage.submod.parameters(), lr=0.01) for stage in stages]
    else:
        optimizers = [torch.optim.SGD(params, lr=0.01)]
    batches = Counter()
    holds_first = any(stage.is_first for stage in stages)
    holds_last = any(stage.is_last for stage in stages)
    for step in range(1, args.steps + 1):
        data = torch.Generator().manual_seed(step * 7 + at.dp)  # one batch a replica
        x, target = torch.randn(BATCH, HIDDEN, generator=data), torch.randn(BATCH, HIDDEN)
        kwargs = {"target": target, "losses": []} if holds_last else {}
        schedule.step(*((x,) if holds_first else ()), **kwargs)
        if dp_group is not None:  # average the replicas' gradients, as DDP would
            for param in params:
                dist.all_reduce(param.grad, group=dp_group)
                param.grad /= args.dp
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
        if step == 1:
            warmup_truth([s.stage_index for s in stages], num_stages, at)
            if args.shapes == "inferred":
                meta_truth(stages, num_stages, at, batches)
        if args.schedule == "1f1b":
            one_f_one_b_truth(step, stages[0].stage_index, num_stages, at, batches)
        else:
            interleaved_truth(step, schedule, at)
        if dp_group is not None:
            dp_truth(step, stages, [d * pp + at.pp_rank for d in range(args.dp)])
    dist.barrier()
    truth.say_barrier(None)
    if rank == 0:
        truth.log(f"pipeline_1f1b_job: {vars(args)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
