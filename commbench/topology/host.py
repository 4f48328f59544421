"""Host context from /proc and /sys: CPU model, core counts, NUMA nodes. No NVML needed."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

from commbench.topology.cpus import is_cpu_list, parse_cpu_list
from commbench.topology.model import HostInfo, NumaNode


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def cpu_model(root: Path) -> str | None:
    """The CPU's marketing name; ARM kernels print none, so fall back to the machine type."""
    text = _read(root / "proc/cpuinfo") or ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if (
            sep
            and key.strip() in ("model name", "Model Name", "cpu model", "Model")
            and value.strip()
        ):
            return value.strip()
    if root != Path("/"):
        return None
    return platform.processor() or platform.machine() or None


def cpu_counts(root: Path) -> tuple[int | None, int | None]:
    """(physical cores, logical CPUs) from the per-CPU topology files in /sys."""
    base = root / "sys/devices/system/cpu"
    online = _read(base / "online")
    threads = None
    cores: set[tuple[str, str]] = set()
    try:
        entries = sorted(p for p in base.iterdir() if p.name[3:].isdigit() and p.name[:3] == "cpu")
    except OSError:
        entries = []
    for entry in entries:
        package = _read(entry / "topology/physical_package_id")
        core = _read(entry / "topology/core_id")
        if package is not None and core is not None:
            cores.add((package, core))
    if online and is_cpu_list(online):
        threads = len(parse_cpu_list(online))
    elif entries:
        threads = len(entries)
    elif root == Path("/"):
        threads = os.cpu_count()
    return (len(cores) or None), threads


def numa_nodes(root: Path) -> list[NumaNode]:
    """Host NUMA nodes and their CPUs, from /sys/devices/system/node."""
    base = root / "sys/devices/system/node"
    nodes: list[NumaNode] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return nodes
    for entry in entries:
        suffix = entry.name[4:]
        if entry.name.startswith("node") and suffix.isdigit():
            cpus = _read(entry / "cpulist") or ""
            nodes.append(NumaNode(id=int(suffix), cpus=cpus if is_cpu_list(cpus) else ""))
    return sorted(nodes, key=lambda n: n.id)


def pci_numa_node(root: Path, bus_id: str) -> int | None:
    """The NUMA node the kernel assigns a PCI device (-1, meaning none, becomes None)."""
    text = _read(root / "sys/bus/pci/devices" / bus_id / "numa_node")
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def host_info(root: Path = Path("/")) -> HostInfo:
    """Everything about the host that needs no GPU library."""
    cores, threads = cpu_counts(root)
    return HostInfo(
        hostname=socket.gethostname() if root == Path("/") else None,
        cpu_model=cpu_model(root),
        cpu_cores=cores,
        cpu_threads=threads,
        numa_nodes=numa_nodes(root),
    )
