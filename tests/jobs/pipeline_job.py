"""A two-stage GPipe pipeline with torch.distributed.pipelining, as a user would write it
(nothing of commbench in it): 2 ranks on gloo, MICRO microbatches, STEPS optimizer steps, then
a final barrier. Prints its own truth, per rank, from the schedule's definition (never from a
trace): `truth: RANK OP PEER BYTES STEP` for every send and recv it expects, in order, and
the barrier, STEP being the training step (None after the last optimizer step), BYTES the
tensor's (None where torch does not fix it: a pickled object).

    torchrun --nproc-per-node 2 tests/jobs/pipeline_job.py [--frontend pipeline|stage]

`--frontend pipeline` splits a model with `pipeline()` (torch.export; `_PipelineStage`);
`--frontend stage` wraps each rank's half in a `PipelineStage` by hand. What their first
step exchanges before the activations differs (torch 2.13's stage.py and schedules.py):

- `pipeline()`'s stage warms up its neighbours' communicators: `_warmup_p2p` falls back to
  `_get_init_p2p_neighbors_ops`, one float32 element each way in one batch (the first stage
  sends then receives, the last receives then sends);
- a `PipelineStage` votes on its inference mode instead (`_warmup_forward_vote`, then
  `_warmup_backward_result`: one int32 element each way), and, its shapes not given, infers
  them at run time (DYNAMIC): `_send_meta` of the forward's output metadata from the first
  stage to the last, then of the backward's from the last to the first, each
  `send_object_list`: the object's length (one int64) and its pickle (uint8, of a size
  torch does not fix).

Then, every step, ScheduleGPipe's fill-drain (`_step_microbatches`): each microbatch's forward,
in order (the first stage sends its activation, the last receives it), then each backward (the
last sends the gradient of its input, the first receives it): one tensor of
MICROBATCH x HIDDEN float32 each way per microbatch.
"""

import argparse
import sys

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, SplitPoint, pipeline

HIDDEN = 32
BATCH = 16
MICRO = 4
STEPS = 3
MICROBATCH = BATCH // MICRO
FLOAT32 = 4


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(HIDDEN, HIDDEN)
        self.last = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.relu(self.first(x)))


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (output - target).square().mean()


def build(frontend: str, rank: int) -> tuple[torch.nn.Module, ScheduleGPipe]:
    model = Net()
    if frontend == "pipeline":
        example = torch.randn(MICROBATCH, HIDDEN)
        pipe = pipeline(model, mb_args=(example,), split_spec={"last": SplitPoint.BEGINNING})
        stage = pipe.build_stage(rank, torch.device("cpu"))
        submod = stage.submod
    else:
        submod = torch.nn.Sequential(model.first, torch.nn.ReLU()) if rank == 0 else model.last
        stage = PipelineStage(submod, rank, 2, torch.device("cpu"))
    return submod, ScheduleGPipe(stage, n_microbatches=MICRO, loss_fn=loss_fn)


def truth(frontend: str, rank: int) -> list[tuple[str, int | None, int | None, int | None]]:
    """(op, peer, bytes, step) of each call this rank's schedule makes (see the module)."""
    peer = 1 - rank
    first = rank == 0
    out: list[tuple[str, int | None, int | None, int | None]] = []

    def both(nbytes: int | None, step: int, *, sends_first: bool) -> None:
        order = ("send", "recv") if sends_first else ("recv", "send")
        out.extend((op, peer, nbytes, step) for op in order)

    activation = MICROBATCH * HIDDEN * FLOAT32
    for step in range(1, STEPS + 1):
        if step == 1:
            both(FLOAT32, 1, sends_first=first)  # the warm-up, or the vote: one element each way
            if frontend == "stage":  # the shapes: forward's from the first, backward's back
                length, pickle = 8, None
                for op in ("send", "recv") if first else ("recv", "send"):
                    out.extend([(op, peer, length, 1), (op, peer, pickle, 1)])
        forward_op, backward_op = ("send", "recv") if first else ("recv", "send")
        out.extend((forward_op, peer, activation, step) for _ in range(MICRO))
        out.extend((backward_op, peer, activation, step) for _ in range(MICRO))
    out.append(("barrier", None, 0, None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frontend", choices=("pipeline", "stage"), default="pipeline")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    submod, schedule = build(args.frontend, rank)
    optimizer = torch.optim.SGD(submod.parameters(), lr=0.01)
    for _ in range(STEPS):
        x, target = torch.randn(BATCH, HIDDEN), torch.randn(BATCH, HIDDEN)
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=target, losses=[])
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    for op, peer, nbytes, step in truth(args.frontend, rank):  # one write a line: ranks share
        sys.stdout.write(f"truth: {rank} {op} {peer} {nbytes} {step}\n")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
