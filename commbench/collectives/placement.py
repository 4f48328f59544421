"""Where a run goes when the user does not say: the machine decides.

NCCL over every visible GPU when there are GPUs, else gloo with a few CPU ranks. One
function, so `collectives`, `run` and `slurm-script` cannot drift apart on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commbench.errors import UserError
from commbench.flags import BACKEND, DEVICE, NPROC
from commbench.numbers import check_range
from commbench.options import field_of
from commbench.results.names import BACKENDS, DEVICES, MAX_NPROC

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
    note: str | None = None
    """Why the machine chose CPU ranks when no device was asked for (no GPU is visible, and
    why): the first thing a user without a GPU should read."""
    gpus: int | None = None
    """The GPUs NVML counted on this machine, where it was asked (not for --device cpu, nor
    for a job's nodes): what a `--nproc` of GPU ranks is held against."""

    def check(self) -> None:
        """UserError, in the flags' words, for a placement no run could take (checked as the
        settings holding it are built: a suite's machine or a job's nodes place it first)."""
        if self.backend not in BACKENDS:
            raise UserError(f"unknown backend {self.backend!r}; choose nccl or gloo")
        if self.device not in DEVICES:
            raise UserError(f"unknown device {self.device!r}; choose cuda or cpu")
        if self.backend == "nccl" and self.device != "cuda":
            raise UserError("the nccl backend needs --device cuda (NCCL runs on GPUs only)")
        check_range(self.nproc, "--nproc", 1, MAX_NPROC)


def resolve_placement(
    device: str | None = None, nproc: int | None = None, backend: str | None = None
) -> Placement:
    """Fill in what was not given (None) from this machine's GPUs: those NVML sees,
    honouring CUDA_VISIBLE_DEVICES; none without a driver. No torch."""
    if device not in (None, "cuda"):
        return placement_for(0, device, nproc, backend)
    from commbench.topology import discover

    snapshot = discover()
    place = replace(
        placement_for(len(snapshot.gpus), device, nproc, backend), gpus=len(snapshot.gpus)
    )
    if device is None and place.device == "cpu" and backend in (None, "gloo"):
        why = snapshot.nvml_error or "NVML reports no devices"
        place = replace(
            place,
            note=f"no GPU is visible ({why}), so this runs {place.backend} on {place.nproc} "
            "CPU ranks",
        )
    return place


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


@dataclass(kw_only=True)
class PlacementRequest:
    """Where a run's ranks go, as the user asked (None: the machine decides): declared once
    for `collectives`, `run` and `diagnose`, their API verbs and `slurm-script`."""

    nproc: int | None = field_of(
        NPROC,
        minimum=1,
        maximum=MAX_NPROC,
        help="Workers per node. Default: every visible GPU, else 2.",
    )
    backend: str | None = field_of(
        BACKEND, help="nccl or gloo. Default: nccl on GPUs, gloo on CPU."
    )
    device: str | None = field_of(DEVICE, help="cuda or cpu. Default: cuda when a GPU is visible.")

    def placement(self) -> Placement:
        """This machine's placement of the request (`resolve_placement`)."""
        return resolve_placement(self.device, self.nproc, self.backend)
