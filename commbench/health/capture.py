"""Taking a health snapshot: NVML per GPU, sysfs per RDMA port; never raises.

A snapshot is taken twice per run, by the process that writes the run record, so it must be
cheap and must never fail a measurement: NVML questions an old driver cannot answer stay
None (`Nvml.call`), a missing sysfs file is skipped, and a failure of a whole part (no NVML,
no sysfs) is one line in `errors`.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

from commbench.health.record import GpuHealth, HealthSnapshot, RdmaPortHealth
from commbench.topology.nvml import Nvml
from commbench.topology.sysfs import read_attr, read_int, sysfs_root

# nvmlNvLinkErrorCounter_t values (stable in the NVML headers; used when bindings lack a name).
_NVLINK_COUNTERS = {
    "replay": ("NVML_NVLINK_ERROR_DL_REPLAY", 0),
    "recovery": ("NVML_NVLINK_ERROR_DL_RECOVERY", 1),
    "crc_flit": ("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
    "crc_data": ("NVML_NVLINK_ERROR_DL_CRC_DATA", 3),
    "ecc_data": ("NVML_NVLINK_ERROR_DL_ECC_DATA", 4),  # Hopper and later
}
_MAX_NVLINKS = 18
"""NVML_NVLINK_MAX_LINKS on Hopper; older bindings say less, Blackwell more is asked safely."""

_LANES = re.compile(r"\((\d+X)\b")

# Clock event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def take(nvml_module: Any = None, *, root: Path | None = None) -> HealthSnapshot:
    """A snapshot of this node's GPUs (through NVML, or `nvml_module` standing in for pynvml)
    and RDMA ports (under `root`, default `sysfs_root()`); never raises."""
    start = time.perf_counter()
    snap = HealthSnapshot(taken_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), host=socket.gethostname())
    try:
        _gpus(snap, nvml_module)
    except Exception as exc:  # a broken binding must not break the run it watches
        snap.errors.append(f"NVML: {type(exc).__name__}: {exc}")
    try:
        snap.ports = rdma_ports(sysfs_root() if root is None else root)
    except OSError as exc:
        snap.errors.append(f"sysfs: {exc}")
    snap.seconds = round(time.perf_counter() - start, 6)
    return snap


def _gpus(snap: HealthSnapshot, module: Any) -> None:
    with Nvml(module) as nvml:
        reason = nvml.open()
        if reason is not None:
            snap.errors.append(reason)
            return
        count = nvml.call("nvmlDeviceGetCount") or 0
        for index in range(count):
            handle = nvml.call("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                continue
            try:
                snap.gpus.append(gpu_health(nvml, index, handle))
            except Exception as exc:  # one GPU's broken answer must not hide the others
                snap.errors.append(f"NVML: GPU{index}: {type(exc).__name__}: {exc}")
        snap.errors.extend(nvml.warnings)


def gpu_health(nvml: Nvml, index: int, h: Any) -> GpuHealth:
    """One GPU's counters; each question NVML cannot answer stays None."""
    pci = nvml.call("nvmlDeviceGetPciInfo", h)
    bus = getattr(pci, "busId", None)
    gpu = GpuHealth(
        index=index,
        pci_bus_id=bus.decode() if isinstance(bus, bytes) else bus,
        pcie_cur_gen=nvml.call("nvmlDeviceGetCurrPcieLinkGeneration", h),
        pcie_max_gen=nvml.call("nvmlDeviceGetMaxPcieLinkGeneration", h),
        pcie_cur_width=nvml.call("nvmlDeviceGetCurrPcieLinkWidth", h),
        pcie_max_width=nvml.call("nvmlDeviceGetMaxPcieLinkWidth", h),
        pcie_replay=nvml.call("nvmlDeviceGetPcieReplayCounter", h),
        temperature_c=nvml.call(
            "nvmlDeviceGetTemperature", h, nvml.const("NVML_TEMPERATURE_GPU", 0)
        ),
    )
    milliwatts = nvml.call("nvmlDeviceGetPowerUsage", h)
    gpu.power_w = None if milliwatts is None else round(milliwatts / 1000, 3)
    gpu.nvlink_errors, gpu.nvlink_unread = _nvlinks(nvml, h)
    _memory(nvml, h, gpu)
    reasons = nvml.call("nvmlDeviceGetCurrentClocksEventReasons", h)
    if reasons is None:  # the pre-R535 name of the same call
        reasons = nvml.call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
    if isinstance(reasons, int):
        gpu.throttle = [name for bit, name in THROTTLE_BITS.items() if reasons & bit]
    return gpu


def _nvlinks(nvml: Nvml, h: Any) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Every error counter of every active link, and the counters some link would not give
    (name -> why: `not supported`, `no permission`), so that "nothing moved" is never said
    of a counter nobody read."""
    out: dict[str, dict[str, int]] = {}
    unread: dict[str, str] = {}
    for link in range(_MAX_NVLINKS):
        state = nvml.call("nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            if link == 0:
                break  # no NVLink on this GPU (or no answer at all)
            continue
        if not state:
            continue
        counts: dict[str, int] = {}
        for key, (const, default) in _NVLINK_COUNTERS.items():
            value, why = nvml.ask(
                "nvmlDeviceGetNvLinkErrorCounter", h, link, nvml.const(const, default)
            )
            if isinstance(value, int):
                counts[key] = value
            else:
                unread.setdefault(key, why or f"not a number ({value!r})")
        out[str(link)] = counts
    return out, unread


def _memory(nvml: Nvml, h: Any, gpu: GpuHealth) -> None:
    sbe = nvml.call("nvmlDeviceGetRetiredPages", h, 0)  # MULTIPLE_SINGLE_BIT_ECC_ERRORS
    dbe = nvml.call("nvmlDeviceGetRetiredPages", h, 1)  # DOUBLE_BIT_ECC_ERROR
    gpu.retired_pages_sbe = None if sbe is None else len(sbe)
    gpu.retired_pages_dbe = None if dbe is None else len(dbe)
    pending = nvml.call("nvmlDeviceGetRetiredPagesPendingStatus", h)
    gpu.retired_pending = None if pending is None else bool(pending)
    rows = nvml.call("nvmlDeviceGetRemappedRows", h)
    if isinstance(rows, tuple | list) and len(rows) >= 4:
        gpu.remapped_corrected, gpu.remapped_uncorrected = int(rows[0]), int(rows[1])
        gpu.remap_pending, gpu.remap_failure = bool(rows[2]), bool(rows[3])
    for counter, counter_type in (("volatile", 0), ("aggregate", 1)):
        for error, error_type in (("corrected", 0), ("uncorrected", 1)):
            value = nvml.call("nvmlDeviceGetTotalEccErrors", h, error_type, counter_type)
            if isinstance(value, int):
                gpu.ecc[f"{counter}_{error}"] = value


def _width(rate: str | None) -> str | None:
    """The lane count in a `rate` file (`400 Gb/sec (4X NDR)` -> `4X`)."""
    found = _LANES.search(rate or "")
    return found.group(1) if found else None


def rdma_ports(root: Path) -> list[RdmaPortHealth]:
    """Every port under `root/class/infiniband`; a missing file is skipped, none is an error."""
    base = root / "class" / "infiniband"
    if not base.is_dir():
        return []
    ports: list[RdmaPortHealth] = []
    for device in sorted(base.iterdir()):
        port_dir = device / "ports"
        if not port_dir.is_dir():
            continue
        for entry in sorted(port_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
            if not entry.name.isdigit():
                continue
            state = read_attr(entry / "state")
            port = RdmaPortHealth(
                device=device.name,
                port=int(entry.name),
                state=state.partition(":")[2].strip() or state if state else None,
                rate=(rate := read_attr(entry / "rate")),
                width=_width(rate),
                link_layer=read_attr(entry / "link_layer"),
                hca_type=read_attr(device / "hca_type"),
            )
            for sub, prefix in (("counters", ""), ("hw_counters", "hw_")):
                folder = entry / sub
                if not folder.is_dir():
                    continue
                for counter in sorted(folder.iterdir()):
                    value = read_int(counter)
                    if value is not None and value >= 0:
                        port.counters[prefix + counter.name] = value
            ports.append(port)
    return ports
