"""Where a run goes when the user does not say: the machine decides.

NCCL over every visible GPU when there are GPUs, else gloo with a few CPU ranks. One
function, so `collectives`, `run` and `slurm-script` cannot drift apart on it.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_DEFAULT_NPROC = 2
"""CPU ranks when none are asked for: enough for every collective to move data."""


@dataclass(frozen=True, slots=True)
class Placement:
    device: str
    """cuda or cpu."""
    nproc: int
    """Workers per node."""
    backend: str
    """nccl or gloo."""


def visible_gpus() -> int:
    """GPUs NVML can see, honouring CUDA_VISIBLE_DEVICES; 0 without a driver. No torch."""
    from commbench.topology import discover

    return len(discover().gpus)


def resolve_placement(
    device: str | None = None, nproc: int | None = None, backend: str | None = None
) -> Placement:
    """Fill in what was not given (None) from this machine's GPUs."""
    gpus = visible_gpus() if device in (None, "cuda") else 0
    return placement_for(gpus, device, nproc, backend)


def placement_for(
    gpus: int, device: str | None = None, nproc: int | None = None, backend: str | None = None
) -> Placement:
    """Fill in what was not given (None) for a node with `gpus` GPUs: this machine's, or
    the nodes a SLURM script will ask for."""
    dev = device or ("cuda" if gpus else "cpu")
    if nproc is None:
        nproc = gpus if dev == "cuda" and gpus else CPU_DEFAULT_NPROC
    return Placement(
        device=dev, nproc=nproc, backend=backend or ("nccl" if dev == "cuda" else "gloo")
    )
