"""DDP on NCCL, one GPU per rank (torchrun's LOCAL_RANK), 3 steps with 5 ms of device work
after each backward's all-reduces are waited; then one all_reduce captured into a CUDA graph
and the graph replayed 4 times. For `make gpu-check` (tests/test_record_gpu.py): on one GPU
it runs at world size 1. Prints its truth: `truth: <rank> graph_replays <n>` and, per
step, `truth: <rank> step_ms <ms>` (the step's own time, an upper bound of its
communication)."""

import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(64, 1024, device="cuda")
    big = torch.randn(4096, 4096, device="cuda")
    lines = []
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        ddp(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.synchronize()
        lines.append(f"step_ms {(time.perf_counter() - start) * 1e3:.3f}")
        for _ in range(20):  # device work after the step's communication
            big @ big
    t = torch.ones(1 << 16, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        dist.all_reduce(t)  # warm the communicator outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(t)
    for _ in range(4):
        graph.replay()
    torch.cuda.synchronize()
    lines.append("graph_replays 4")
    dist.barrier()
    for line in lines:
        sys.stdout.write(f"truth: {rank} {line}\n")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
