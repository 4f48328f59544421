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

import os
from pathlib import Path

from commbench.errors import UserError
from commbench.files import read_stdin, read_text
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
    "load",
    "load_snapshot",
    "parse_nvidia_smi",
    "render",
]


def load(
    snapshot: Path | None,
    from_smi: str | os.PathLike[str] | None,
    *,
    gpu: str | None,
    all_nics: bool,
) -> TopologySnapshot:
    """`load_topology`'s work: the snapshot file `snapshot` (a run directory's run.json is
    one), the text `nvidia-smi topo -m` printed (`from_smi`; "-" reads stdin), or this
    machine; the inputs checked against one another before anything is read."""
    if snapshot is not None and from_smi is not None:
        raise UserError("--from and --from-smi both name an input; give one")
    if gpu is not None and from_smi is None:
        raise UserError("--gpu names the model of an imported matrix: give --from-smi too")
    if snapshot is not None:
        return load_snapshot(snapshot)
    if from_smi is None:
        return discover(all_nics=all_nics)
    from commbench.topology.rates import gpu_model

    if gpu is not None:  # an unknown model is refused before the file is read
        gpu_model(gpu)
    what = "nvidia-smi topo -m output"
    smi = Path(from_smi)
    text = read_stdin(what) if str(smi) == "-" else read_text(smi, what, lenient=True)
    try:
        return parse_nvidia_smi(text, gpu=gpu)
    except UserError as exc:
        raise UserError(f"{smi}: {exc}") from None
