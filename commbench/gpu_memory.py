"""Will the buffers fit? The arithmetic of the GPU memory preflights, without torch.

Collectives and p2p both refuse, before launching or allocating anything, a request whose
buffers do not fit in a GPU's *free* memory less a reserve for what else lives there. The
numbers come from `torch.cuda.mem_get_info` (free, total) per GPU; this module only compares,
so tests give it numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

from commbench.errors import UserError
from commbench.sizes import format_amount

MiB = 1 << 20

# What a collectives rank keeps on its GPU besides its buffers: its CUDA context (300-600 MiB
# on recent GPUs), NCCL's communicator buffers (NCCL_BUFFSIZE, 4 MiB, per channel and peer:
# a few hundred MiB on large worlds) and the check's temporaries (chunks of 2^24 elements in
# int64/float64: a few hundred MiB), the timer's hold (`timing.HOLD_N`: 32 MiB and cuBLAS's
# workspace), with room for the allocator's rounding.
COLLECTIVES_RESERVE = 2048 * MiB
COLLECTIVES_RESERVE_FOR = "CUDA context, NCCL buffers, check temporaries"

# What p2p keeps on a GPU besides its copy buffers: the measuring process's own context is
# already counted as used when it asks (it asks from inside that context), so only the
# pattern fill's and the verification's chunked temporaries and peer mappings remain.
P2P_RESERVE = 512 * MiB
P2P_RESERVE_FOR = "pattern and verification temporaries, peer mappings"

GpuMemory = Mapping[int, tuple[int, int]]
"""(free, total) bytes per CUDA ordinal, as `torch.cuda.mem_get_info(i)` returns them."""


def shortfall(
    need: Mapping[int, int], memory: GpuMemory, reserve: int
) -> tuple[int, int, int, int] | None:
    """The first GPU (by ordinal) whose `need` plus `reserve` exceeds its free memory, as
    (gpu, need, free, total); None when every GPU fits. GPUs with unknown memory pass."""
    for gpu in sorted(need):
        if gpu not in memory:
            continue
        free, total = memory[gpu]
        if need[gpu] + reserve > free:
            return gpu, need[gpu], free, total
    return None


def refuse_if_short(
    need: Mapping[int, int], memory: GpuMemory, reserve: int, request: str, reserve_for: str
) -> None:
    """Raise a one-line UserError naming the first GPU that cannot hold `need`."""
    short = shortfall(need, memory, reserve)
    if short is None:
        return
    gpu, bytes_needed, free, total = short
    raise UserError(
        f"{request} needs about {format_amount(bytes_needed)} on GPU {gpu} plus "
        f"{format_amount(reserve)} kept free ({reserve_for}), more than its "
        f"{format_amount(free)} free of {format_amount(total)}"
    )
