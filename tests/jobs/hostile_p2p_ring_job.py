"""A ring exchange issued with individual `dist.isend` / `dist.irecv` (not
batch_isend_irecv), all waited at the end of the exchange; the first collective is a
barrier before any module. Each step: a ring pass of activations (float32) and of token ids
(int64, a size changing every step), then an all_reduce of the gradients.

    torchrun --nproc-per-node 2 tests/jobs/hostile_p2p_ring_job.py [--steps 3]

Every send and recv is async: the job issued each with isend or irecv, however soon it
completed (a capture that judged by whether it was still in flight at the rank's next call
recorded the last of a step's as blocking).
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    dist.barrier()
    truth.say_barrier(None)
    torch.manual_seed(0)
    model = nn.Linear(24, 24)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, args.steps + 1):
        act = model(torch.randn(4, 24))
        ids = torch.arange(3 + step, dtype=torch.int64) + rank
        got_act = torch.empty(4, 24)
        got_ids = torch.empty(3 + step, dtype=torch.int64)
        works = []
        # rank 0 sends first, the others receive first; all wait at the end
        order = ["send", "recv"] if rank % 2 == 0 else ["recv", "send"]
        for kind in order:
            if kind == "send":
                works.append(dist.isend(act.detach(), nxt))
                truth.say_tensor("send", step, act, peer=nxt, async_op=True)
                works.append(dist.isend(ids, nxt))
                truth.say_tensor("send", step, ids, peer=nxt, async_op=True)
            else:
                works.append(dist.irecv(got_act, prev))
                truth.say("recv", step, in_bytes=0, out_bytes=truth.nbytes(got_act),
                          dtype="float32", peer=prev, async_op=True)  # fmt: skip
                works.append(dist.irecv(got_ids, prev))
                truth.say("recv", step, in_bytes=0, out_bytes=truth.nbytes(got_ids),
                          dtype="int64", peer=prev, async_op=True)  # fmt: skip
        for w in works:
            w.wait()
        loss = (act * got_act).sum() + got_ids.sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            truth.say_tensor("all_reduce", step, p.grad)
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
