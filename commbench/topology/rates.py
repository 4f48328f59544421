"""Link-rate tables: the one place that says how fast an NVLink or a PCIe lane is.

Every figure is a theoretical peak *per direction* in GB/s (1e9 bytes/s) after line
encoding, which is what a one-way copy can hope for. Measured copies land below these
(protocol headers, DMA engine limits); the `p2p` command compares against them.
"""

from __future__ import annotations

import re

# NVLink bandwidth per link, per direction, by NVLink generation.
#   gen1 (P100): 20 GB/s. gen2 (V100): 25 GB/s, 6 links = 300 GB/s bidirectional.
#   gen3 (A100): 25 GB/s, 12 links = 600 GB/s bidirectional.
#   gen4 (H100): 25 GB/s, 18 links = 900 GB/s bidirectional (450 GB/s each way).
#   gen5 (B200): 50 GB/s, 18 links = 1.8 TB/s bidirectional.
# Sources: hwloc's review of the per-link values, https://github.com/open-mpi/hwloc/issues/574
# (20/25/25/25 GB/s unidirectional for v1-v4); NVIDIA's NVLink page,
# https://www.nvidia.com/en-us/data-center/nvlink/ ("A100 ... up to twelve third-generation
# NVLink connections for a total bandwidth of 600 GB/s"; H100 900 GB/s over 18 links; "a single
# Blackwell GPU supports up to 18 NVLink 100 GB/s connections for a total bandwidth of
# 1.8 TB/s", bidirectional figures). `nvidia-smi nvlink -s` prints "25 GB/s" per link on an
# A100 (https://github.com/NVIDIA/nccl-tests/issues/228).
NVLINK_GBPS_PER_LINK: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

# What we assume for a link whose generation we do not know (an imported `nvidia-smi topo -m`
# names no GPU model): gens 2-4, every V100/A100/H100 system, share this rate.
NVLINK_ASSUMED_GBPS_PER_LINK = 25.0

# GPUs whose NVLink runs slower than their generation's data-centre rate. GA102 boards
# (RTX 3090, RTX A6000/A5000/A4500, A40) use NVLink 3 with x4 links: "each link providing
# 14.0625 GB/sec bandwidth in each direction" (NVIDIA Ampere GA102 GPU Architecture
# whitepaper; the A40 datasheet lists 112.5 GB/s bidirectional for its 4 links). NVML reports
# the same NVLink version (3.1) for these and for the A100 (https://github.com/Syllo/nvtop/pull/469),
# so only the model name can tell them apart.
NVLINK_GBPS_PER_LINK_BY_MODEL: tuple[tuple[re.Pattern[str], float], ...] = (
    (re.compile(r"\b(RTX 3090|RTX A6000|RTX A5000|RTX A4500|A40)\b", re.IGNORECASE), 14.0625),
)

# nvmlDeviceGetNvLinkVersion returns an nvmlNvlinkVersion_t enum, not the generation
# (an A100 returns 5, i.e. "3.1"): https://github.com/open-mpi/hwloc/issues/658 and
# https://nvidia.github.io/cuda-python/ (cuda.bindings.nvml.NvlinkVersion):
# 1=1.0, 2=2.0, 3=2.2, 4=3.0, 5=3.1, 6=4.0, 7=5.0, 8=6.0.
NVML_NVLINK_VERSION_TO_GEN: dict[int, int] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

# PCIe data rate per lane, per direction, after line encoding:
#   Gen1 2.5 GT/s and Gen2 5 GT/s with 8b/10b:   0.25 and 0.5 GB/s
#   Gen3 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s with 128b/130b: 8 * 128/130 / 8 = 0.985, 1.969, 3.938
#   Gen6 64 GT/s PAM4 in 256-byte FLITs carrying 242 bytes of TLP + DLLP: 64 * 242/256 / 8 = 7.56
# Source: PCI-SIG base specifications 1.0-6.0 (rates and encodings); the arithmetic is ours.
PCIE_GBPS_PER_LANE: dict[int, float] = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 242 / 256 / 8,
}

# What we assume for a PCIe path whose generation and width we do not know (an imported
# `nvidia-smi topo -m` has neither): the most common data-centre slot today.
PCIE_ASSUMED_GEN = 4
PCIE_ASSUMED_WIDTH = 16


def nvlink_gen_from_nvml(version: int | None) -> int | None:
    """The NVLink generation for an nvmlNvlinkVersion_t value (None when unknown)."""
    if version is None:
        return None
    return NVML_NVLINK_VERSION_TO_GEN.get(version)


def nvlink_gbps_per_link(gen: int | None, model: str | None = None) -> float | None:
    """Per-link, per-direction NVLink rate for a generation (and GPU model, when known)."""
    if model:
        for pattern, rate in NVLINK_GBPS_PER_LINK_BY_MODEL:
            if pattern.search(model):
                return rate
    if gen is None:
        return None
    return NVLINK_GBPS_PER_LINK.get(gen)


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    """Per-direction PCIe rate of a link of that generation and lane count."""
    if gen is None or width is None or width <= 0:
        return None
    per_lane = PCIE_GBPS_PER_LANE.get(gen)
    return None if per_lane is None else per_lane * width
