"""Pair verdicts: from what is known about two GPUs, the link label and the peak per direction.

Both sources go through here, so a pair discovered with NVML and the same pair imported from
`nvidia-smi topo -m` get the same label, rates and notes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from commbench.topology import rates
from commbench.topology.model import PCIE_LABELS, UNKNOWN_LABEL, Gpu, Pair

# nvmlDeviceGetTopologyCommonAncestor levels (nvmlGpuTopologyLevel_t) and the labels
# `nvidia-smi topo -m` prints for them. INTERNAL (two GPUs on one board, e.g. a K80) sits
# behind a single on-board switch, so it is shown as PIX.
NVML_LEVEL_LABELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

# nvmlGpuP2PStatus_t values other than OK (0), in nvidia-smi's words.
NVML_P2P_STATUS = {
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}

_PATH_NOTES = {
    "PHB": "via the CPU host bridge",
    "NODE": "crosses host bridges",
    "SYS": "crosses CPU sockets",
}


def pcie_label(level: int | None) -> str | None:
    """The nvidia-smi label for an NVML common-ancestor level (None when unknown)."""
    return None if level is None else NVML_LEVEL_LABELS.get(level)


def link_label(nvlinks: int, pcie_path: str | None) -> str:
    """`NV#` when NVLinks join the pair, else the PCIe label, else `N/A`."""
    if nvlinks > 0:
        return f"NV{nvlinks}"
    return pcie_path or UNKNOWN_LABEL


def both_ways(read: bool | None, write: bool | None) -> bool | None:
    """P2P works for copies only if reads and writes both do; unknown if either is unknown."""
    if read is False or write is False:
        return False
    if read is None or write is None:
        return None
    return True


def nvlink_counts(gpus: Sequence[Gpu], other_gpu_bus_ids: Collection[str] = ()) -> list[list[int]]:
    """NVLinks between every pair, the way `nvidia-smi topo -m` counts them.

    A link to a GPU counts for that pair. Links to NVSwitches join every GPU to every other,
    so a pair gets the smaller of the two GPUs' switch-link counts, as PyTorch's intra-node
    code does (torch/csrc/distributed/c10d/intra_node_comm.cpp, getNvlMesh). An active link
    whose far end NVML cannot name is taken for an NVSwitch hidden from us, as NCCL does in
    VMs (https://github.com/NVIDIA/nccl/issues/1182). `other_gpu_bus_ids` are GPUs that
    exist but are not visible here: links to them count for nothing.
    """
    n = len(gpus)
    counts = [[0] * n for _ in range(n)]
    by_bus = {g.pci_bus_id: g.index for g in gpus if g.pci_bus_id}
    hidden = set(other_gpu_bus_ids)
    switch_links = [0] * n
    for g in gpus:
        for lk in g.nvlinks:
            if not lk.active or lk.remote_type == "ibmnpu":
                continue
            peer = by_bus.get(lk.remote_pci_bus_id or "")
            if peer is not None:
                if peer != g.index:
                    counts[g.index][peer] += 1
            elif lk.remote_type == "gpu" or lk.remote_pci_bus_id in hidden:
                continue
            else:
                switch_links[g.index] += 1
    for i in range(n):
        for j in range(n):
            if i != j:
                counts[i][j] += min(switch_links[i], switch_links[j])
    return counts


def _models(a: Gpu, b: Gpu) -> list[rates.GpuModel] | None:
    """Both GPUs' datasheet models, when both names match one (an imported matrix named with
    `--gpu`, or NVML names whose generation or PCIe link NVML could not report)."""
    models = [rates.find_gpu_model(g.name) for g in (a, b)]
    return [m for m in models if m is not None] if all(models) else None


def _nvlink_rate(a: Gpu, b: Gpu, nvlinks: int) -> tuple[float, int | None, bool]:
    """(per-link GB/s, generation, assumed) for `nvlinks` NVLinks between `a` and `b`."""
    gens = [g for g in (a.nvlink_generation, b.nvlink_generation) if g is not None]
    gen = min(gens) if len(gens) == 2 else None
    known = [
        r
        for r in (rates.nvlink_gbps_per_link(gen, a.name), rates.nvlink_gbps_per_link(gen, b.name))
        if r is not None
    ]
    if len(known) == 2:
        return min(known), gen, False
    models = _models(a, b)
    if models and all(m.nvlink_gbps_per_link is not None for m in models):
        slow = min(models, key=lambda m: m.nvlink_gbps_per_link or 0.0)
        assert slow.nvlink_gbps_per_link is not None
        return slow.nvlink_gbps_per_link, slow.nvlink_gen, False
    return rates.assumed_nvlink_gbps_per_link(nvlinks), gen, True


def _pcie_rate(a: Gpu, b: Gpu) -> tuple[float, str, bool]:
    """(GB/s, description, assumed) of the slower of the two GPUs' PCIe links at their max."""
    gens = [g for g in (a.pcie_max_gen, b.pcie_max_gen) if g is not None]
    widths = [w for w in (a.pcie_max_width, b.pcie_max_width) if w is not None]
    if len(gens) != 2 or len(widths) != 2:
        models = _models(a, b)
        if models:
            gens = [m.pcie_gen for m in models]
            widths = [m.pcie_width for m in models]
    if len(gens) == 2 and len(widths) == 2:
        gen, width = min(gens), min(widths)
        gbps = rates.pcie_gbps(gen, width)
        if gbps is not None:
            return gbps, f"PCIe Gen{gen} x{width}", False
    gen, width = rates.PCIE_ASSUMED_GEN, rates.PCIE_ASSUMED_WIDTH
    gbps = rates.pcie_gbps(gen, width)
    assert gbps is not None
    return gbps, f"PCIe gen/width unknown: assumed Gen{gen} x{width}", True


def assess(
    a: Gpu,
    b: Gpu,
    *,
    nvlinks: int,
    pcie_path: str | None,
    label: str | None = None,
    p2p_read: bool | None = None,
    p2p_write: bool | None = None,
    p2p_nvlink: bool | None = None,
    p2p_atomics: bool | None = None,
    p2p_status: str | None = None,
) -> Pair:
    """The verdict for copies from `a` to `b`: label, P2P, theoretical peak and a note."""
    label = label or link_label(nvlinks, pcie_path)
    p2p = both_ways(p2p_read, p2p_write)
    notes: list[str] = []
    peak: float | None
    assumed = False
    if nvlinks > 0 and p2p is not False:
        rate, gen, assumed = _nvlink_rate(a, b, nvlinks)
        peak = nvlinks * rate
        if assumed:
            links = f"{nvlinks} NVLink{'s' * (nvlinks != 1)}"
            notes.append(f"{links} of unknown generation: assumed {rate:g} GB/s per link")
        else:
            notes.append(f"{nvlinks} x NVLink{gen} at {rate:g} GB/s")
    elif label in PCIE_LABELS or (nvlinks > 0 and p2p is False):
        peak, how, assumed = _pcie_rate(a, b)
        notes.append(how)
        path = pcie_path if pcie_path in _PATH_NOTES else label
        if path in _PATH_NOTES:
            notes.append(_PATH_NOTES[path])
    else:
        peak = None
        notes.append("connection unknown")
    if p2p is False:
        why = f" ({p2p_status})" if p2p_status else ""
        notes.append(f"no P2P{why}: copies are staged through host memory")
    return Pair(
        src=a.index,
        dst=b.index,
        link=label,
        nvlinks=nvlinks,
        p2p=p2p,
        p2p_read=p2p_read,
        p2p_write=p2p_write,
        p2p_nvlink=p2p_nvlink,
        p2p_atomics=p2p_atomics,
        p2p_status=p2p_status,
        pcie_path=pcie_path,
        peak_gbps=peak,
        peak_assumed=assumed,
        note="; ".join(notes),
    )
