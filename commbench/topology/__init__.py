"""GPU topology: NVML discovery, the snapshot model, `nvidia-smi topo -m` import, link rates.

from commbench.topology import discover
snap = discover()                 # never raises for a missing GPU or NVML
snap.pair(0, 1).peak_gbps         # theoretical GB/s per direction
snap.to_dict()                    # what run.json embeds
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
