"""Network devices from sysfs: every interface and RDMA device, and how each GPU reaches them.

NVML says nothing about NICs, and an inter-node number means little without them, so this
reads what the kernel publishes under `sysfs_root()` (/sys, or a test tree): `class/net/*`
(ARP type, operstate, speed, MTU, driver, PCI function, NUMA node) and
`class/infiniband/*/ports/*` (state, rate, link layer). An RDMA device and the netdev that is
its other face (`mlx5_0` and `ib0`) are one NIC, listed under the RDMA name. Virtual
interfaces (lo, veth, bridges, tun, docker0) have no PCI function and are skipped unless asked
for. A speed the kernel does not report (virtio, veth, a link that is down) stays None, which
is printed "unknown": a guessed line rate would make every efficiency figure a lie.

The GPU-NIC label is computed from the PCI paths the way `nvidia-smi topo -m` and NCCL's
topology detection do: a PCIe switch is an upstream port plus its downstream ports, so two
devices below one switch are PIX, below a chain of switches PXB, on one host bridge but
different root ports PHB, on different host bridges of one NUMA node NODE, else SYS.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from commbench.topology.model import Gpu, Nic, NicPort
from commbench.topology.sysfs import normalize_bus_id, read_attr, read_int, sysfs_root

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")

# ARPHRD_* from linux/if_arp.h: the `type` attribute of class/net/<if>.
_ARP_KINDS = {1: "ethernet", 32: "infiniband", 772: "loopback"}

_RANK = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _real(path: Path) -> Path | None:
    try:
        return Path(os.path.realpath(path, strict=True))
    except (OSError, RuntimeError):
        return None


def pci_address(path: Path) -> str | None:
    """The PCI function a sysfs device path sits on: its last `DDDD:BB:DD.F` component
    (a virtio NIC's own node is `virtio2`, below the PCI function that carries it)."""
    for part in reversed(path.parts):
        if _BDF.match(part):
            return part
    return None


def _numa(device: Path) -> int | None:
    node = read_int(device / "numa_node")
    return node if node is not None and node >= 0 else None


def _driver(device: Path) -> str | None:
    target = _real(device / "driver")
    return target.name if target is not None else None


def _port_state(text: str | None) -> str | None:
    """`4: ACTIVE` -> `ACTIVE`; `LinkUp` style texts pass through."""
    if text is None:
        return None
    return text.split(":", 1)[-1].strip() or None


def _rate_gbps(text: str | None) -> float | None:
    """`400 Gb/sec (4X NDR)` -> 400.0; None when absent or not a rate."""
    match = _RATE.match(text or "")
    return float(match.group(1)) if match else None


def _rdma_ports(dev: Path) -> list[NicPort]:
    ports = []
    base = dev / "ports"
    try:
        names = sorted(base.iterdir(), key=lambda p: (len(p.name), p.name))
    except OSError:
        return []
    for port in names:
        if not port.name.isdigit():
            continue
        state = _port_state(read_attr(port / "state"))
        rate = _rate_gbps(read_attr(port / "rate"))
        ports.append(
            NicPort(
                port=int(port.name),
                state=state,
                phys_state=_port_state(read_attr(port / "phys_state")),
                rate_gbps=rate if state == "ACTIVE" else None,
                link_layer=read_attr(port / "link_layer"),
            )
        )
    return ports


def _list(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError:
        return []


def _rdma_nic(dev: Path, base: Path) -> Nic:
    device = _real(dev / "device")
    ports = _rdma_ports(dev)
    layers = {p.link_layer for p in ports}
    kind = "roce" if layers == {"Ethernet"} else "infiniband"
    netdevs = [p.name for p in _list(dev / "device" / "net")] if device is not None else []
    active = [p for p in ports if p.state == "ACTIVE"]
    rates = [p.rate_gbps for p in active if p.rate_gbps is not None]
    if active:
        state = "up"
    elif ports:
        state = (ports[0].state or "unknown").lower()
    else:
        state = None
    return Nic(
        name=dev.name,
        device=dev.name,
        kind=kind,
        state=state,
        speed_gbps=sum(rates) if rates else None,
        mtu=read_int(dev / "device" / "net" / netdevs[0] / "mtu") if netdevs else None,
        driver=_driver(dev / "device") if device is not None else None,
        pci_bus_id=pci_address(device) if device is not None else None,
        numa_node=_numa(dev / "device") if device is not None else None,
        netdev=",".join(netdevs) or None,
        virtual=device is None or _under_virtual(device, base),
        ports=ports,
    )


def _under_virtual(path: Path | None, base: Path) -> bool:
    """Whether a resolved sysfs path is below `devices/virtual` of the tree at `base`."""
    root = _real(base)
    return path is not None and root is not None and path.is_relative_to(root / "devices/virtual")


def _net_nic(iface: Path, base: Path) -> Nic:
    device = _real(iface / "device")
    virtual = device is None or _under_virtual(_real(iface), base)
    arp = read_int(iface / "type")
    kind = _ARP_KINDS.get(arp, "other") if arp is not None else "other"
    speed = read_int(iface / "speed")  # Mb/s; -1 or EINVAL when the kernel does not know
    state = read_attr(iface / "operstate")
    return Nic(
        name=iface.name,
        device=iface.name,
        kind=kind,
        state=state.lower() if state else None,
        speed_gbps=speed / 1000 if speed is not None and speed > 0 else None,
        mtu=read_int(iface / "mtu"),
        driver=_driver(iface / "device") if device is not None else None,
        pci_bus_id=pci_address(device) if device is not None else None,
        numa_node=_numa(iface / "device") if device is not None else None,
        virtual=virtual,
    )


def discover_nics(root: Path | None = None, *, include_virtual: bool = False) -> list[Nic]:
    """Every NIC under `root` (default `sysfs_root()`): RDMA devices first, then the
    interfaces that are not one's netdev, each sorted by name. Missing files are unknowns."""
    base = sysfs_root() if root is None else root
    rdma = [_rdma_nic(dev, base) for dev in _list(base / "class" / "infiniband")]
    taken = {name for nic in rdma for name in (nic.netdev or "").split(",") if name}
    plain = [_net_nic(i, base) for i in _list(base / "class" / "net") if i.name not in taken]
    nics = rdma + plain
    return nics if include_virtual else [n for n in nics if not n.virtual]


# --- GPU-NIC affinity --------------------------------------------------------------------


def pci_path(bus_id: str, root: Path | None = None) -> tuple[str, list[str]] | None:
    """(host bridge, [root port, ..., the device]) of a PCI function, from its real sysfs
    path (`devices/pci0000:17/0000:17:01.0/0000:18:00.0`); None when sysfs has no such
    device."""
    base = sysfs_root() if root is None else root
    real = _real(base / "bus" / "pci" / "devices" / bus_id.lower())
    if real is None:
        return None
    parts = list(real.parts)
    bridges = [i for i, p in enumerate(parts) if _HOST_BRIDGE.match(p)]
    if not bridges:
        return None
    at = bridges[-1]
    chain = [p for p in parts[at + 1 :] if _BDF.match(p)]
    return (parts[at], chain) if chain else None


def pcie_label(
    a: tuple[str, list[str]], b: tuple[str, list[str]], numa_a: int | None, numa_b: int | None
) -> str:
    """The `nvidia-smi topo -m` label between two PCI functions given their paths.

    Below the shared root port each switch is two path components (upstream port,
    downstream port), so a device at most two components below the common ancestor on both
    sides crossed one switch (PIX); deeper means a chain of switches (PXB)."""
    if a == b:
        return "X"
    (host_a, chain_a), (host_b, chain_b) = a, b
    if host_a != host_b:
        return "NODE" if numa_a == numa_b else "SYS"
    common = 0
    for x, y in zip(chain_a, chain_b, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB"
    if len(chain_a) - common <= 2 and len(chain_b) - common <= 2:
        return "PIX"
    return "PXB"


def _normalize(bus_id: str) -> str:
    return normalize_bus_id(bus_id) or bus_id


def gpu_links(gpus: Sequence[Gpu], nics: list[Nic], root: Path | None = None) -> list[Nic]:
    """`nics` with `gpu_links` filled: the label from each GPU (by index) to each NIC, `N/A`
    where either side has no PCI path in sysfs (a virtual NIC, a GPU not in the tree)."""
    base = sysfs_root() if root is None else root
    gpu_paths = [pci_path(_normalize(g.pci_bus_id), base) if g.pci_bus_id else None for g in gpus]
    for nic in nics:
        nic_path = pci_path(nic.pci_bus_id, base) if nic.pci_bus_id else None
        labels = []
        for gpu, path in zip(gpus, gpu_paths, strict=True):
            if path is None or nic_path is None:
                labels.append("N/A")
            else:
                labels.append(pcie_label(path, nic_path, gpu.numa_node, nic.numa_node))
        nic.gpu_links = labels if gpus else []
    return nics


def nearest_nic(nics: Sequence[Nic], gpu_index: int) -> Nic | None:
    """The NIC with the best label from GPU `gpu_index` (PIX before PXB ... before SYS), by
    name on a tie; None when no NIC has a known label from it."""
    ranked = [
        (_RANK[n.gpu_links[gpu_index]], n.name, n)
        for n in nics
        if gpu_index < len(n.gpu_links) and n.gpu_links[gpu_index] in _RANK
    ]
    return min(ranked, key=lambda r: (r[0], r[1]))[2] if ranked else None
