"""Each step broadcasts a 4 KiB tensor (a learning-rate schedule, a data-loader seed) before
its forward, then averages its gradients by hand and steps its optimizer: 3 steps, then a
final barrier. Prints its own truth, per rank: `truth: op,step` for every call it made, the
step being the training step the call was issued in (None after the last optimizer step).
The first step's broadcast is step 1's although nothing told it from start-up when it was
issued: the second step's repeating it before its forward does."""

import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    truth = []
    for step in (1, 2, 3):
        seed = torch.zeros(1024)
        dist.broadcast(seed, src=0)
        truth.append(("broadcast", step))  # issued in step `step`, before its forward
        loss = model(torch.randn(8, 16)).sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            truth.append(("all_reduce", step))
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    truth.append(("barrier", None))
    for op, step in truth:  # one write a line: two ranks share the pipe
        sys.stdout.write(f"truth: {dist.get_rank()} {op},{step}\n")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
