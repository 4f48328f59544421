"""GPU topology: NVML discovery, the snapshot model, `nvidia-smi topo -m` import, link rates.

from commbench.topology import discover
snap = discover()                 # never raises for a missing GPU or NVML
snap.pair(0, 1).peak_gbps         # theoretical GB/s per direction
snap.to_dict()                    # what run.json embeds

Its rooms import one way, from the bottom up: `sysfs` (reading /sys or a fixture tree, the
PCI bus id form) and `rates` (link rates of the hardware); `model` (the snapshot's records);
`visible` (CUDA_VISIBLE_DEVICES), `host`, `cpus`, `pairs`, `network` (what sysfs and NVML
say of the host, its CPUs, GPU pairs and NICs); `nvml`, `smi` (the two sources of GPU links);
`discover` (all of it, on this machine); `render` (text for people).
"""

from __future__ import annotations

from commbench.topology.discover import discover
from commbench.topology.model import (
    SCHEMA_VERSION,
    Gpu,
    HostInfo,
    Nic,
    NumaNode,
    NvLink,
    Pair,
    TopologySnapshot,
    load_snapshot,
)
from commbench.topology.render import render
from commbench.topology.smi import parse_nvidia_smi

__all__ = [
    "SCHEMA_VERSION",
    "Gpu",
    "HostInfo",
    "Nic",
    "NumaNode",
    "NvLink",
    "Pair",
    "TopologySnapshot",
    "discover",
    "load_snapshot",
    "parse_nvidia_smi",
    "render",
]
