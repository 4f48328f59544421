"""Every op gloo implements, each waited by the job and followed by 100 ms of "compute" (a
sleep: the host waiting for a device kernel, which leaves this 2-core machine's cores to the
communication, as a GPU job would), 3 rounds. One round in each op's sync form, then the
same calls async and waited at once. The job times each call itself (from before the call to
after its wait returns) and prints, per rank and call in issue order:
`truth: <rank> <op> <microseconds>`. A recorder that counted the compute as communication
would record each call at about 100 ms.

`--busy`: the 100 ms are computation on the host's CPU instead (a loop of matrix products),
as a job on CPU ranks computes; the job prints each gap's CPU time as it measured it
(`time.process_time`, every thread of the process) after its calls: `gap: <rank> <ms>`."""

import sys
import time

import torch
import torch.distributed as dist

GAP_S = 0.1


def _compute(seconds: float, busy: bool) -> float:
    """The gap after a call: slept, or (`busy`) computed; returns its CPU time in ms."""
    cpu = time.process_time()
    if not busy:
        time.sleep(seconds)
        return (time.process_time() - cpu) * 1e3
    a = torch.rand(64, 64)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(a, a)
    return (time.process_time() - cpu) * 1e3


def main() -> None:
    busy = "--busy" in sys.argv[1:]
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    x = 4096
    calls = {
        "all_reduce": lambda a: dist.all_reduce(torch.ones(x), async_op=a),
        "all_gather": lambda a: dist.all_gather_into_tensor(
            torch.zeros(x * n), torch.ones(x), async_op=a
        ),
        "all_gather_list": lambda a: dist.all_gather(
            [torch.zeros(x) for _ in range(n)], torch.ones(x), async_op=a
        ),
        "reduce_scatter": lambda a: dist.reduce_scatter_tensor(
            torch.zeros(x), torch.ones(x * n), async_op=a
        ),
        "reduce_scatter_list": lambda a: dist.reduce_scatter(
            torch.zeros(x), [torch.ones(x) for _ in range(n)], async_op=a
        ),
        "all_to_all": lambda a: dist.all_to_all_single(
            torch.zeros(x * n), torch.ones(x * n), async_op=a
        ),
        "all_to_all_list": lambda a: dist.all_to_all(
            [torch.zeros(x) for _ in range(n)], [torch.ones(x) for _ in range(n)], async_op=a
        ),
        "broadcast": lambda a: dist.broadcast(torch.ones(x), src=0, async_op=a),
        "reduce": lambda a: dist.reduce(torch.ones(x), dst=0, async_op=a),
        "gather": lambda a: dist.gather(
            torch.ones(x), [torch.zeros(x) for _ in range(n)] if rank == 0 else None, async_op=a
        ),
        "scatter": lambda a: dist.scatter(
            torch.zeros(x), [torch.ones(x) for _ in range(n)] if rank == 0 else None, async_op=a
        ),
        "barrier": lambda a: dist.barrier(async_op=a),
    }
    truth = []
    gaps = []
    for round_ in range(3):
        for name, call in calls.items():
            asynchronous = round_ == 2
            start = time.perf_counter()
            work = call(asynchronous)
            if work is not None:
                work.wait()
            truth.append((name, (time.perf_counter() - start) * 1e6))
            gaps.append(_compute(GAP_S, busy))
        # point to point: rank 0 sends, the other receives, then back
        for sender in (0, 1):
            t = torch.ones(x) if rank == sender else torch.zeros(x)
            start = time.perf_counter()
            if rank == sender:
                dist.send(t, dst=1 - sender)
                name = "send"
            else:
                dist.recv(t, src=sender)
                name = "recv"
            truth.append((name, (time.perf_counter() - start) * 1e6))
            gaps.append(_compute(GAP_S, busy))
    for name, us in truth:  # one write a line: two ranks share the pipe
        sys.stdout.write(f"truth: {rank} {name} {us:.1f}\n")
        sys.stdout.flush()
    for ms in gaps:
        sys.stdout.write(f"gap: {rank} {ms:.1f}\n")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
