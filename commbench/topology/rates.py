"""Link-rate tables: the one place that says how fast an NVLink or a PCIe lane is.

Every figure is a theoretical peak *per direction* in GB/s (1e9 bytes/s) after line
encoding, which is what a one-way copy can hope for. Measured copies land below these
(protocol headers, DMA engine limits); the `p2p` command compares against them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from commbench.errors import UserError, quoted

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
# `nvidia-smi topo -m` has neither): Gen3 x16, the slowest slot a multi-GPU server still has,
# so an assumed peak is one no real pair falls short of (`--gpu` names the model instead).
PCIE_ASSUMED_GEN = 3
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


# -- GPU models --------------------------------------------------------------------------------
# `nvidia-smi topo -m` names no GPU model, so an imported matrix cannot know its link rates;
# `commbench topo --from-smi FILE --gpu MODEL` names it. Rates are per link, per direction.


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A GPU model's links, from its datasheet: what a pair of them can reach."""

    name: str
    """The name as nvidia-smi prints it (`Tesla V100-SXM2-16GB` without the memory size)."""
    aliases: tuple[str, ...]
    """Other ways people and nvidia-smi versions write it (`NVIDIA H100 80GB HBM3`)."""
    nvlink_gen: int | None
    """NVLink generation; None for boards without NVLink."""
    nvlink_gbps_per_link: float | None
    """NVLink rate per link, per direction."""
    pcie_gen: int
    pcie_width: int


def _model(
    name: str, *aliases: str, nvlink: tuple[int, float] | None = None, pcie: tuple[int, int]
) -> GpuModel:
    """A row of the table below: `nvlink` (generation, GB/s per link) where the board has
    NVLink, `pcie` (generation, width)."""
    gen, per_link = nvlink if nvlink is not None else (None, None)
    return GpuModel(
        name=name,
        aliases=aliases,
        nvlink_gen=gen,
        nvlink_gbps_per_link=per_link,
        pcie_gen=pcie[0],
        pcie_width=pcie[1],
    )


GPU_MODELS: tuple[GpuModel, ...] = (
    # https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-datasheet.pdf
    # (NVLink 160 GB/s bidirectional over 4 links; PCIe Gen3 x16 32 GB/s)
    _model("Tesla P100-SXM2", "P100 SXM2", nvlink=(1, 20.0), pcie=(3, 16)),
    # https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
    # (V100 SXM2: NVLink 300 GB/s over 6 links; PCIe 32 GB/s = Gen3 x16, both bidirectional)
    _model("Tesla V100-SXM2", "V100 SXM2", nvlink=(2, 25.0), pcie=(3, 16)),
    # DGX-2's V100s (same GV100, NVLink2 to NVSwitches): the V100 datasheet above
    _model("Tesla V100-SXM3", "V100 SXM3", nvlink=(2, 25.0), pcie=(3, 16)),
    # The V100 datasheet above: the PCIe board has no NVLink, PCIe Gen3 x16
    _model("Tesla V100-PCIE", "V100 PCIe", "V100S PCIe", "Tesla V100S-PCIE", pcie=(3, 16)),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    # (A100 SXM: NVLink 600 GB/s over 12 third-generation links; PCIe Gen4 64 GB/s)
    _model("NVIDIA A100-SXM4", "A100 SXM4", "A100 SXM", nvlink=(3, 25.0), pcie=(4, 16)),
    # The A100 datasheet above: A100 PCIe, NVLink bridge for 2 GPUs 600 GB/s; PCIe Gen4 64 GB/s
    _model(
        "NVIDIA A100-PCIE",
        "A100 PCIe",
        "A100 80GB PCIe",
        "A100 40GB PCIe",
        nvlink=(3, 25.0),
        pcie=(4, 16),
    ),
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
    # (H100 SXM: NVLink 900 GB/s over 18 fourth-generation links, PCIe Gen5 128 GB/s;
    # nvidia-smi prints the SXM5 board as "NVIDIA H100 80GB HBM3")
    _model("NVIDIA H100 80GB HBM3", "H100 SXM5", "H100 SXM", nvlink=(4, 25.0), pcie=(5, 16)),
    # The H100 datasheet above: H100 NVL, NVLink bridge 600 GB/s, PCIe Gen5 128 GB/s
    _model("NVIDIA H100 NVL", nvlink=(4, 25.0), pcie=(5, 16)),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/data-center/h100/PB-11133-001_v01.pdf
    # (H100 PCIe product brief: NVLink bridge 600 GB/s bidirectional, PCIe Gen5 x16)
    _model("NVIDIA H100 PCIe", nvlink=(4, 25.0), pcie=(5, 16)),
    # https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: NVLink 900 GB/s, PCIe Gen5
    # 128 GB/s)
    _model("NVIDIA H200", "H200 SXM", nvlink=(4, 25.0), pcie=(5, 16)),
    # https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf
    # (NVLink 112.5 GB/s bidirectional over 4 links, i.e. 14.0625 per link each way; PCIe Gen4)
    _model("NVIDIA A40", nvlink=(3, 14.0625), pcie=(4, 16)),
    # https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413 (PCIe Gen4 x16 64 GB/s
    # bidirectional; no NVLink)
    _model("NVIDIA L40S", pcie=(4, 16)),
    # https://www.nvidia.com/en-us/data-center/l4/ (PCIe Gen4 x16 64 GB/s; no NVLink)
    _model("NVIDIA L4", pcie=(4, 16)),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf
    # (PCIe Gen4 64 GB/s; no NVLink)
    _model("NVIDIA A10", pcie=(4, 16)),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
    # (PCIe Gen3 x16 32 GB/s; no NVLink)
    _model("Tesla T4", pcie=(3, 16)),
)

# Words that do not tell models apart: vendor prefixes and memory sizes (a V100-SXM2-32GB
# links like the 16GB one).
_NOISE = re.compile(r"^(nvidia|tesla|\d+gb)$")


def _words(name: str) -> tuple[str, ...]:
    return tuple(w for w in re.split(r"[\s\-_]+", name.lower()) if w and not _NOISE.match(w))


def _contains(words: tuple[str, ...], part: tuple[str, ...]) -> bool:
    n = len(part)
    return n > 0 and any(words[i : i + n] == part for i in range(len(words) - n + 1))


# Longer than any name nvidia-smi prints (NVML's buffer is 96 bytes): a pasted file, not a name.
MAX_MODEL_NAME = 96


@functools.lru_cache(maxsize=64)
def _candidates(name: str) -> tuple[GpuModel, ...]:
    """The models a name may mean, best first: those with a name inside `name` (the
    longest such name wins), else those whose names hold `name`. Remembered: a snapshot asks
    once per pair for the same few names (128 GPUs: 32,512 times)."""
    asked = _words(name[:MAX_MODEL_NAME])
    if not asked or len(name) > MAX_MODEL_NAME:
        return ()
    inside: dict[str, tuple[int, GpuModel]] = {}
    around: dict[str, GpuModel] = {}
    for model in GPU_MODELS:
        for alias in (model.name, *model.aliases):
            words = _words(alias)
            if _contains(asked, words):
                if len(words) > inside.get(model.name, (0, model))[0]:
                    inside[model.name] = (len(words), model)
            elif _contains(words, asked):
                around[model.name] = model
    if inside:
        longest = max(n for n, _ in inside.values())
        return tuple(m for n, m in inside.values() if n == longest)
    return tuple(around.values())


def find_gpu_model(name: str) -> GpuModel | None:
    """The model a name means (`Tesla V100-SXM2-16GB`, `v100-sxm2`, `NVIDIA H100 80GB HBM3`),
    matched case-insensitively word by word, so `A10` never matches `A100`; None when no
    model or several do. Vendor prefixes and memory sizes do not count."""
    hits = _candidates(name)
    return hits[0] if len(hits) == 1 else None


def gpu_model(name: str) -> GpuModel:
    """The model `--gpu` names; UserError naming the candidates or listing the known ones."""
    hits = _candidates(name)
    if len(hits) == 1:
        return hits[0]
    if hits:
        several = ", ".join(repr(m.name) for m in hits)
        raise UserError(f"GPU model {quoted(name)} matches several: {several}; give the full name")
    known = ", ".join(repr(m.name) for m in GPU_MODELS)
    raise UserError(f"unknown GPU model {quoted(name)}; known: {known}")


# Without a model, an imported matrix gets rates no real pair of its shape falls short of:
# PCIe Gen3 x16 for PCIe paths, and for NV# the oldest NVLink generation with that many links
# per GPU (P100, gen1, has 4). A SYS pair (15.75 GB/s) then never reads faster than an NV1
# pair (20 GB/s), as it did with Gen4 assumed. GA102 boards (A40, RTX A6000) run slower
# links: naming the model is the way to get them right.
NVLINK_LINKS_BY_GEN: dict[int, int] = {1: 4, 2: 6, 3: 12, 4: 18, 5: 18}


def assumed_nvlink_gbps_per_link(nvlinks: int) -> float:
    """The conservative per-link rate for `nvlinks` bonded links of unknown generation."""
    for gen in sorted(NVLINK_LINKS_BY_GEN):
        if nvlinks <= NVLINK_LINKS_BY_GEN[gen]:
            return NVLINK_GBPS_PER_LINK[gen]
    return NVLINK_ASSUMED_GBPS_PER_LINK
