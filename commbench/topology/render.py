"""Views of a snapshot: host context, GPU list, the `nvidia-smi topo -m` matrix, pairs (`render`,
topo's `table`), and the snapshot file (`snapshot_json`, topo's `json`).

Plain fixed-width text (no colour, no terminal probing) so the output reads the same on a
terminal, in a CI log and in the file `--out` writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from commbench.escape import visible
from commbench.tables import text_table
from commbench.topology.model import UNKNOWN_LABEL, Nic, Pair, TopologySnapshot
from commbench.topology.network import nearest_nic

# nvidia-smi's own legend, current wording.
LEGEND = (
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
        "(e.g., QPI/UPI)",
    ),
    (
        "NODE",
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
        "within a NUMA node",
    ),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return text_table(headers, rows, left=range(len(headers)))


def _or(value: object, unknown: str = "unknown") -> str:
    return unknown if value is None or value == "" else str(value)


def host_lines(s: TopologySnapshot) -> list[str]:
    """Who, what CPU, which NUMA nodes, which driver."""
    h = s.host
    lines = []
    if s.source == "nvidia-smi":
        named = [g.name for g in s.gpus if not g.name.startswith("unknown")]
        lines.append(
            f"Source:  imported `nvidia-smi topo -m`, GPU model {named[0]} (given with --gpu)"
            if named
            else "Source:  imported `nvidia-smi topo -m` (it names no GPU model, PCIe or NVLink "
            "generation)"
        )
    if s.source != "nvidia-smi" or h.cpu_model or h.hostname:
        cpu = _or(h.cpu_model)
        if h.cpu_cores or h.cpu_threads:
            cpu += f", {_or(h.cpu_cores, '?')} cores / {_or(h.cpu_threads, '?')} threads"
        lines.append(f"Host:    {h.hostname + ', ' if h.hostname else ''}{cpu}")
    if h.numa_nodes:
        nodes = "; ".join(f"node {n.id}: CPUs {n.cpus or '?'}" for n in h.numa_nodes)
        lines.append(f"NUMA:    {len(h.numa_nodes)} node{'s' * (len(h.numa_nodes) != 1)} ({nodes})")
    if h.driver_version or h.cuda_driver_version:
        lines.append(f"Driver:  NVIDIA {_or(h.driver_version)}, CUDA {_or(h.cuda_driver_version)}")
    return lines


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def pcie_label(gen: int | None, width: int | None) -> str:
    """`Gen5 x16`; `?` for what is unknown."""
    return "?" if gen is None and width is None else f"Gen{_or(gen, '?')} x{_or(width, '?')}"


def gpu_lines(s: TopologySnapshot) -> list[str]:
    """One row per GPU (only when the snapshot knows more than the matrix does)."""
    rows = []
    for g in s.gpus:
        gen = g.nvlink_generation
        nvl = f"{g.active_nvlinks} x gen{_or(gen, '?')}" if g.active_nvlinks else "-"
        rows.append(
            [
                str(g.index),
                g.name,
                _or(g.pci_bus_id, "?"),
                _gib(g.memory_bytes),
                pcie_label(g.pcie_max_gen, g.pcie_max_width),
                pcie_label(g.pcie_cur_gen, g.pcie_cur_width),
                nvl,
                _or(g.numa_node, "?"),
                _or(g.cpu_affinity, "?"),
            ]
        )
    headers = [
        "GPU",
        "Name",
        "Bus ID",
        "Memory",
        "PCIe max",
        "PCIe now",
        "NVLinks",
        "NUMA",
        "CPU affinity",
    ]
    return _table(headers, rows)


def link_matrix(s: TopologySnapshot) -> tuple[list[str], list[list[str]]]:
    """The GPU-to-GPU link labels as a table: (column names, one row per GPU, its name
    first); `X` on the diagonal, `-` for a pair the snapshot lacks."""
    names = [f"GPU{g.index}" for g in s.gpus]
    labels = {(p.src, p.dst): p.link for p in s.pairs}
    rows = [
        [f"GPU{a.index}"]
        + ["X" if a.index == b.index else labels.get((a.index, b.index), "-") for b in s.gpus]
        for a in s.gpus
    ]
    return names, rows


def matrix_lines(s: TopologySnapshot) -> list[str]:
    """The matrix the way `nvidia-smi topo -m` lays it out, with NIC columns if imported."""
    names = [f"GPU{g.index}" for g in s.gpus] + [n.name for n in s.nics]
    labels: dict[tuple[int, int], str] = {(p.src, p.dst): p.link for p in s.pairs}
    width = max(8, *(len(n) + 2 for n in names), *(len(p.link) + 2 for p in s.pairs))
    trailers = ["CPU Affinity", "NUMA Affinity"]
    show_gpu_numa = any(g.gpu_numa_id is not None for g in s.gpus)
    if show_gpu_numa:
        trailers.append("GPU NUMA ID")
    tw = max(16, *(len(g.cpu_affinity or "") + 2 for g in s.gpus))
    lines = [
        (
            " " * width
            + "".join(n.ljust(width) for n in names)
            + "".join(t.ljust(tw) for t in trailers)
        ).rstrip()
    ]
    for g in s.gpus:
        cells = []
        for other in s.gpus:
            cells.append(
                " X"
                if other.index == g.index
                else labels.get((g.index, other.index), UNKNOWN_LABEL)
            )
        cells += [nic.gpu_links[g.index] if nic.gpu_links else UNKNOWN_LABEL for nic in s.nics]
        values = [_or(g.cpu_affinity, "N/A"), _or(g.numa_node, "N/A")]
        if show_gpu_numa:
            values.append(_or(g.gpu_numa_id, "N/A"))
        lines.append(
            (
                f"GPU{g.index}".ljust(width)
                + "".join(c.ljust(width) for c in cells)
                + "".join(v.ljust(tw) for v in values)
            ).rstrip()
        )
    lines += ["", "Legend:", ""]
    lines += [f"  {k.ljust(4)} = {v}" for k, v in LEGEND]
    if any(p.link == UNKNOWN_LABEL for p in s.pairs):
        lines.append("  N/A  = Unknown")
    named = [n for n in s.nics if n.device != n.name]
    if named:
        lines += ["", "NIC Legend:", ""]
        lines += [f"  {n.name}: {n.device}" for n in named]
    return lines


def _p2p(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "?"}[value]


def _peak(p: Pair) -> str:
    if p.peak_gbps is None:
        return "?"
    return f"{p.peak_gbps:.1f}{'*' if p.peak_assumed else ''}"


def _same(a: Pair, b: Pair) -> bool:
    return (a.link, a.nvlinks, a.p2p, a.peak_gbps, a.note) == (
        b.link,
        b.nvlinks,
        b.p2p,
        b.peak_gbps,
        b.note,
    )


def pair_lines(s: TopologySnapshot) -> list[str]:
    """One row per GPU pair; both directions only where they differ."""
    rows = []
    # one lookup per pair: a scan of all pairs for each was n^4 (minutes for 300 GPUs)
    by_ends = {(q.src, q.dst): q for q in s.pairs}
    for p in s.pairs:
        if p.src > p.dst:
            continue
        back = by_ends.get((p.dst, p.src))
        directions = [p] if back is None or _same(p, back) else [p, back]
        arrow = "<->" if len(directions) == 1 and back is not None else "->"
        for q in directions:
            rows.append(
                [
                    f"GPU{q.src}{arrow}GPU{q.dst}",
                    q.link,
                    str(q.nvlinks),
                    _p2p(q.p2p),
                    _peak(q),
                    q.note,
                ]
            )
    lines = ["Pairs (theoretical peak per direction, GB/s = 1e9 bytes/s):"]
    lines += _table(["Pair", "Link", "NVLinks", "P2P", "Peak GB/s", "Note"], rows)
    if any(p.peak_assumed for p in s.pairs):
        lines.append("* assumed rate: the link generation is unknown (see note)")
    if any(p.p2p is None for p in s.pairs):
        lines.append(
            "P2P ? = unknown"
            + (" (not in nvidia-smi topo -m output)" if s.source == "nvidia-smi" else "")
        )
    return lines


def _rate(nic: Nic) -> str:
    if nic.speed_gbps is None:
        return "unknown"
    return f"{nic.speed_gbps:g} Gb/s"


def nic_lines(s: TopologySnapshot) -> list[str]:
    """The NIC table (line rate in Gb/s, bits: the unit NICs are sold in), then each GPU's
    nearest NIC by PCI path; fields an imported matrix does not give print as unknown."""
    rows = [
        [
            nic.name,
            _or(nic.kind),
            _or(nic.state),
            _rate(nic),
            _or(nic.numa_node, "N/A"),
            _or(nic.pci_bus_id, "-"),
            _or(
                nic.netdev if nic.netdev else (nic.device if nic.device != nic.name else None), "-"
            ),
        ]
        for nic in s.nics
    ]
    lines = ["NICs (line rate in Gb/s = 1e9 bits/s):"]
    imported = s.source == "nvidia-smi"
    last = "Device" if imported else "Netdev"
    lines += _table(["NIC", "Kind", "State", "Rate", "NUMA", "PCI", last], rows)
    if imported:
        lines.append("unknown: nvidia-smi topo -m gives only the NICs' names and labels")
    elif any(nic.speed_gbps is None for nic in s.nics):
        lines.append("unknown rate: the kernel reports no speed (virtio, veth, a down link)")
    if s.gpus and any(nic.gpu_links for nic in s.nics):
        nearest = []
        for g in s.gpus:
            nic = nearest_nic(s.nics, g.index)
            label = nic.gpu_links[g.index] if nic is not None else UNKNOWN_LABEL
            nearest.append(
                [f"GPU{g.index}", nic.name if nic is not None else "none", label]
                + ([_rate(nic)] if nic is not None else ["-"])
            )
        lines += ["", "Nearest NIC per GPU (by PCI path; NIC columns of the matrix above):"]
        lines += _table(["GPU", "NIC", "Link", "Rate"], nearest)
    return lines


def render(s: TopologySnapshot) -> str:
    """The default `commbench topo` output."""
    lines = host_lines(s)
    if not s.gpus:
        lines.append(s.no_gpu_message)
    else:
        if s.source != "nvidia-smi":
            lines += ["", *gpu_lines(s)]
        lines += ["", *matrix_lines(s)]
        if s.pairs:
            lines += ["", *pair_lines(s)]
    if s.nics:
        lines += ["", *nic_lines(s)]
    elif s.source == "nvml":  # discovered from sysfs: say so rather than leave a silence
        lines += [
            "",
            "NICs: none recorded (virtual ones, such as lo, veth and bridges, only with --all-nics)",
        ]
    if s.warnings:
        lines.append("")
        lines += [f"warning: {visible(w)}" for w in s.warnings]
    return "\n".join(lines) + "\n"


def snapshot_json(s: TopologySnapshot) -> str:
    """The snapshot file `--from-snapshot` reads back (topo's `--format json`). Not the
    shared document writers: the table is the machine's report (host, GPUs, the link matrix,
    pairs, NICs, each with its legend), the JSON the snapshot itself."""
    from commbench.files import dump_json

    return dump_json(s.to_dict())
