"""`discover()`: this machine's topology from NVML, numbered the way CUDA numbers it."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from commbench.topology import pairs as verdicts
from commbench.topology.cpus import cpus_from_mask, format_cpu_list
from commbench.topology.host import host_info, pci_numa_node
from commbench.topology.model import Gpu, HostInfo, NvLink, Pair, TopologySnapshot
from commbench.topology.network import discover_nics, gpu_links
from commbench.topology.nvml import Nvml
from commbench.topology.rates import nvlink_gen_from_nvml
from commbench.topology.sysfs import SYSFS_ENV, check_sysfs_root, normalize_bus_id, sysfs_root
from commbench.topology.visible import resolve_visible

# nvmlNvLinkDeviceType_t
_REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch", 0xFF: "unknown"}

# nvmlGpuP2PCapsIndex_t. Plain ints on purpose: the bindings define
# NVML_P2P_CAPS_INDEX_READ as the tuple (0,) by mistake (a stray trailing comma).
_P2P_READ, _P2P_WRITE, _P2P_NVLINK, _P2P_ATOMICS = 0, 1, 2, 3

_AFFINITY_SCOPE_NODE = 0  # NVML_AFFINITY_SCOPE_NODE
_MIN_CPU_IDS = 1024


def _cuda_version(value: Any) -> str | None:
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value)


class _Probe:
    """Reads one machine through an open NVML session."""

    def __init__(self, nvml: Nvml, environ: Mapping[str, str], root: Path, host: HostInfo):
        self.nvml = nvml
        self.environ = environ
        self.root = root
        self.host = host
        self.warnings: list[str] = []

    def bus_id(self, handle: Any) -> str | None:
        info = self.nvml.call("nvmlDeviceGetPciInfo", handle)
        return normalize_bus_id(_text(getattr(info, "busId", None)))

    def mig_parents(self, handles: list[Any]) -> dict[str, int]:
        """MIG instance UUID -> position of its GPU (only asked when CUDA_VISIBLE_DEVICES
        names a MIG instance: it costs a call per possible instance)."""
        parents: dict[str, int] = {}
        for pos, handle in enumerate(handles):
            mode = self.nvml.call("nvmlDeviceGetMigMode", handle)
            if not mode or mode[0] != 1:
                continue
            for k in range(self.nvml.call("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
                mig = self.nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, k)
                uuid = _text(self.nvml.call("nvmlDeviceGetUUID", mig)) if mig else None
                if uuid:
                    parents[uuid] = pos
        return parents

    def cpu_affinity(self, handle: Any) -> str | None:
        # Room for every CPU id the host could have (ids can exceed the online count);
        # NVML fills what exists and leaves the rest zero.
        cpus = max(self.host.cpu_threads or 0, os.cpu_count() or 0, _MIN_CPU_IDS)
        words = self.nvml.call("nvmlDeviceGetCpuAffinity", handle, math.ceil(cpus / 64))
        if not words:
            return None
        return format_cpu_list(cpus_from_mask(list(words))) or None

    def numa_node(self, handle: Any, bus_id: str | None) -> int | None:
        top = max((n.id for n in self.host.numa_nodes), default=0)
        words = self.nvml.call(
            "nvmlDeviceGetMemoryAffinity",
            handle,
            max(1, math.ceil((top + 1) / 64)),
            _AFFINITY_SCOPE_NODE,
        )
        nodes = cpus_from_mask(list(words)) if words else []
        if len(nodes) == 1:
            return nodes[0]
        return pci_numa_node(self.root, bus_id) if bus_id else None

    def nvlinks(self, handle: Any) -> list[NvLink]:
        links: list[NvLink] = []
        for link in range(self.nvml.const("NVML_NVLINK_MAX_LINKS", 18)):
            state = self.nvml.call("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:  # past the last link, or no NVLink at all
                break
            if state != 1:
                links.append(NvLink(link=link, active=False))
                continue
            # The bindings' nvmlDeviceGetNvLinkRemotePciInfo calls the C symbol ..._v2.
            remote = self.nvml.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            kind = self.nvml.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            links.append(
                NvLink(
                    link=link,
                    active=True,
                    generation=nvlink_gen_from_nvml(
                        self.nvml.call("nvmlDeviceGetNvLinkVersion", handle, link)
                    ),
                    remote_type=None if kind is None else _REMOTE_TYPES.get(kind, "unknown"),
                    remote_pci_bus_id=normalize_bus_id(_text(getattr(remote, "busId", None))),
                )
            )
        return links

    def gpu(self, index: int, nvml_index: int, handle: Any, uuid: str, bus_id: str | None) -> Gpu:
        call = self.nvml.call
        memory = call("nvmlDeviceGetMemoryInfo", handle)
        return Gpu(
            index=index,
            nvml_index=nvml_index,
            name=_text(call("nvmlDeviceGetName", handle)) or "unknown",
            uuid=uuid or None,
            pci_bus_id=bus_id,
            memory_bytes=getattr(memory, "total", None),
            numa_node=self.numa_node(handle, bus_id),
            gpu_numa_id=call("nvmlDeviceGetNumaNodeId", handle),
            cpu_affinity=self.cpu_affinity(handle),
            pcie_max_gen=call("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_max_width=call("nvmlDeviceGetMaxPcieLinkWidth", handle),
            pcie_cur_gen=call("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            pcie_cur_width=call("nvmlDeviceGetCurrPcieLinkWidth", handle),
            nvlinks=self.nvlinks(handle),
        )

    def p2p(self, a: Any, b: Any, index: int) -> tuple[bool | None, int | None]:
        status = self.nvml.call("nvmlDeviceGetP2PStatus", a, b, index)
        return (None, None) if status is None else (status == 0, status)

    def pairs(self, gpus: list[Gpu], handles: list[Any], hidden: list[str]) -> list[Pair]:
        counts = verdicts.nvlink_counts(gpus, hidden)
        levels: dict[tuple[int, int], int | None] = {}
        result: list[Pair] = []
        for a in gpus:
            for b in gpus:
                if a.index == b.index:
                    continue
                key = (min(a.index, b.index), max(a.index, b.index))
                if key not in levels:
                    levels[key] = self.nvml.call(
                        "nvmlDeviceGetTopologyCommonAncestor", handles[a.index], handles[b.index]
                    )
                ha, hb = handles[a.index], handles[b.index]
                read, read_status = self.p2p(ha, hb, _P2P_READ)
                write, write_status = self.p2p(ha, hb, _P2P_WRITE)
                refused = next((s for s in (read_status, write_status) if s), None)
                result.append(
                    verdicts.assess(
                        a,
                        b,
                        nvlinks=counts[a.index][b.index],
                        pcie_path=verdicts.pcie_label(levels[key]),
                        p2p_read=read,
                        p2p_write=write,
                        p2p_nvlink=self.p2p(ha, hb, _P2P_NVLINK)[0],
                        p2p_atomics=self.p2p(ha, hb, _P2P_ATOMICS)[0],
                        p2p_status=None
                        if refused is None
                        else verdicts.NVML_P2P_STATUS.get(refused, f"status {refused}"),
                    )
                )
        return result

    def snapshot(self) -> TopologySnapshot:
        call = self.nvml.call
        self.host.driver_version = _text(call("nvmlSystemGetDriverVersion"))
        self.host.cuda_driver_version = _cuda_version(call("nvmlSystemGetCudaDriverVersion"))
        handles: list[Any] = []
        for i in range(call("nvmlDeviceGetCount") or 0):
            handle = call("nvmlDeviceGetHandleByIndex", i)
            if handle is None:
                self.warnings.append(f"NVML device {i} could not be opened; it is left out")
            else:
                handles.append(handle)
        uuids = [_text(call("nvmlDeviceGetUUID", h)) or "" for h in handles]
        bus_ids = [self.bus_id(h) for h in handles]
        spec = self.environ.get("CUDA_VISIBLE_DEVICES")
        migs = self.mig_parents(handles) if spec and "MIG-" in spec.upper() else {}
        visible = resolve_visible(uuids, spec, migs)
        self.warnings.extend(visible.warnings)
        names = {_text(call("nvmlDeviceGetName", handles[p])) for p in visible.order}
        if len(names) > 1 and self.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            self.warnings.append(
                "GPUs of different models: CUDA's default FASTEST_FIRST order may number them "
                "differently from PCI order used here; set CUDA_DEVICE_ORDER=PCI_BUS_ID to match"
            )
        gpus = [
            self.gpu(index, pos, handles[pos], uuids[pos], bus_ids[pos])
            for index, pos in enumerate(visible.order)
        ]
        chosen = [handles[pos] for pos in visible.order]
        hidden = [b for pos, b in enumerate(bus_ids) if pos not in visible.order and b is not None]
        pair_list = self.pairs(gpus, chosen, hidden)
        reason = None
        if not gpus:
            reason = (
                f"CUDA_VISIBLE_DEVICES hides all {len(handles)} GPUs"
                if handles
                else "NVML reports no devices"
            )
        return TopologySnapshot(
            source="nvml",
            captured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            host=self.host,
            nvml_error=reason,
            gpus=gpus,
            pairs=pair_list,
            warnings=self.warnings + self.nvml.warnings,
        )


def discover(
    *,
    nvml: Any = None,
    environ: Mapping[str, str] | None = None,
    root: Path = Path("/"),
    all_nics: bool = False,
) -> TopologySnapshot:
    """This machine's GPUs, pairs and host context. Never raises for a missing GPU or NVML.

    Without NVML (no driver, no library) the snapshot has no GPUs and `nvml_error` says why.
    GPU indices are CUDA ordinals: CUDA_VISIBLE_DEVICES is honoured by matching NVML devices
    by UUID. `nvml` replaces the pynvml module (tests pass a fake); `root` replaces `/` for
    the /proc and /sys reads. NICs come from `sysfs_root()` (COMMBENCH_SYSFS_ROOT, else
    `root`/sys), virtual ones only with `all_nics`.
    """
    env = os.environ if environ is None else environ
    check_sysfs_root(env)
    host = host_info(root)
    session = Nvml(nvml)
    reason = session.open()
    if reason is not None:
        snapshot = TopologySnapshot(
            source="nvml",
            captured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            host=host,
            nvml_error=reason,
        )
    else:
        with session:
            snapshot = _Probe(session, env, root, host).snapshot()
    sys_root = sysfs_root(env) if SYSFS_ENV in env else root / "sys"
    nics = discover_nics(sys_root, include_virtual=all_nics)
    snapshot.nics = gpu_links(snapshot.gpus, nics, sys_root)
    return snapshot


GPU_DEVICE_NODES = ("nvidia[0-9]*", "nvidiactl", "kfd", "dxg")
"""Device files a GPU process opens: NVIDIA's, ROCm's (which torch.cuda also drives) and
WSL's. Without any of them no CUDA device can be opened, whatever a library says."""


def no_gpu_reason(
    snapshot: TopologySnapshot,
    environ: Mapping[str, str] | None = None,
    root: Path = Path("/"),
) -> str | None:
    """Why torch.cuda can see no GPU on this machine, known without importing torch (a second
    or more): None while it might see one. `snapshot` is this machine's (`discover()`).

    CUDA_VISIBLE_DEVICES whose first entry is empty or a negative index hides every GPU. NVML
    answered and lists none: CUDA sees none either. NVML did not answer (no driver, no
    library): that alone proves nothing (a ROCm torch, a broken libnvidia-ml), but with no
    GPU device file in /dev no GPU can be opened."""
    if snapshot.gpus:
        return None
    spec = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    first = None if spec is None else spec.split(",", 1)[0].strip()  # as `resolve_visible`
    if first is not None and (not first or re.fullmatch(r"-[0-9]{1,18}", first)):
        return f"CUDA_VISIBLE_DEVICES={spec!r} hides every GPU"
    reason = snapshot.nvml_error or "NVML reports no devices"
    if not reason.startswith("NVML:"):
        return reason
    dev = root / "dev"
    if any(next(dev.glob(name), None) is not None for name in GPU_DEVICE_NODES):
        return None
    return f"{reason}, and no GPU device in {dev}"
