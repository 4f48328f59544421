"""The topology snapshot: what we know about the GPUs, each pair, and the host they sit in.

A snapshot is the unit everything else works with: `discover()` builds one from NVML,
`parse_nvidia_smi()` from `nvidia-smi topo -m` text, `load_snapshot()` from a saved file, and
every benchmark embeds one in its run.json. `to_dict()`/`from_dict()` are its only file form;
`from_dict` checks every field and names the one that is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, cast

from commbench.errors import UserError
from commbench.fields import (
    Conv,
    Fields,
    Value,
    boolean,
    integer_in,
    list_of,
    number_in,
    string,
)
from commbench.files import load_json, shown

SCHEMA_VERSION = 2
"""2 added the sysfs NIC fields (kind, state, speed_gbps, ports, ...); a version-1 snapshot
loads with them unknown, which is what it knew."""

# Connection labels as `nvidia-smi topo -m` prints them, nearest first ("NV#" aside).
PCIE_LABELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
UNKNOWN_LABEL = "N/A"
_NV_LABEL = re.compile(r"^NV([0-9]{1,6})$")

NVLINK_REMOTE_TYPES = ("gpu", "switch", "ibmnpu", "unknown")

# Bounds on what a snapshot may claim, from what hardware has: no node holds more GPUs (8 to
# 16 on the largest boards), no GPU more NVLinks (18 on H100 and B200), no link is faster than
# this per direction (18 x NVLink5 is 900 GB/s). A file past them is wrong, and would
# otherwise print a peak of 2.5e21 GB/s or cost minutes to draw.
MAX_GPUS = 128
MAX_NVLINKS = 64
MAX_PEAK_GBPS = 10_000.0
_MAX_BYTES = 1 << 50  # device memory
MAX_NIC_GBPS = 100_000.0
"""No NIC (all ports together) is faster: 1.6 Tb/s ports exist, 100 Tb/s do not."""
MAX_NICS = 1024
_MAX_PORTS = 64
_MAX_SMALL = 1 << 16  # link numbers, generations, lane counts, NUMA node ids, CPU counts


def nvlink_count(label: str) -> int:
    """The number of bonded NVLinks a label names (`NV12` -> 12; PCIe labels -> 0), or 0 when
    it names more than any GPU pair has (MAX_NVLINKS), which is then no label we accept."""
    match = _NV_LABEL.match(label)
    count = int(match.group(1)) if match else 0
    return count if count <= MAX_NVLINKS else 0


def is_link_label(label: str) -> bool:
    """Whether `label` is a pair label we can store (`NV#`, a PCIe label, or `N/A`)."""
    return label in PCIE_LABELS or label == UNKNOWN_LABEL or nvlink_count(label) > 0


@dataclass(kw_only=True, slots=True)
class NumaNode:
    """One host NUMA node, so a reader can tell which CPUs sit next to which GPU."""

    id: int
    """The kernel's node number."""
    cpus: str
    """Its CPUs in list form (`0-11,24-35`), as /sys and nvidia-smi print them."""


@dataclass(kw_only=True, slots=True)
class HostInfo:
    """The machine around the GPUs: results from different drivers or CPUs do not compare."""

    hostname: str | None = None
    """Where the snapshot was taken (context only; it never makes results incomparable)."""
    cpu_model: str | None = None
    """CPU model name from /proc/cpuinfo."""
    cpu_cores: int | None = None
    """Physical cores (sockets x cores per socket)."""
    cpu_threads: int | None = None
    """Logical CPUs the kernel schedules on."""
    numa_nodes: list[NumaNode] = field(default_factory=list)
    """Host NUMA nodes with their CPUs; empty when unknown."""
    driver_version: str | None = None
    """NVIDIA driver version, from NVML."""
    cuda_driver_version: str | None = None
    """Highest CUDA version the driver supports (`12.4`), from NVML."""


@dataclass(kw_only=True, slots=True)
class NvLink:
    """One NVLink of a GPU: a pair's NVLink count and rate are derived from these."""

    link: int
    """The link number on its GPU."""
    active: bool
    """Whether the link is up; inactive links carry nothing."""
    generation: int | None = None
    """NVLink generation (1-5), decoded from NVML's version enum; None when unknown."""
    remote_type: str | None = None
    """What the link reaches: `gpu`, `switch` (NVSwitch), `ibmnpu` (a POWER CPU) or
    `unknown`; None when NVML could not say."""
    remote_pci_bus_id: str | None = None
    """PCI bus id of the remote end, which names the peer GPU."""


@dataclass(kw_only=True, slots=True)
class Gpu:
    """One visible GPU, indexed the way CUDA (and so torch) numbers it in this process."""

    index: int
    """CUDA ordinal: position in this process's device list, after CUDA_VISIBLE_DEVICES."""
    name: str
    """Model name as NVML reports it (`NVIDIA H100 80GB HBM3`)."""
    uuid: str | None = None
    """NVML UUID (`GPU-...`), the stable identity across processes and reboots."""
    pci_bus_id: str | None = None
    """PCI address, lower case with a 4-digit domain (`0000:07:00.0`)."""
    nvml_index: int | None = None
    """NVML's own index (PCI order, ignores CUDA_VISIBLE_DEVICES)."""
    memory_bytes: int | None = None
    """Total device memory."""
    numa_node: int | None = None
    """Host NUMA node nearest to the GPU (nvidia-smi's `NUMA Affinity`)."""
    gpu_numa_id: int | None = None
    """NUMA node of the GPU's own memory on coherent platforms such as Grace Hopper
    (nvidia-smi's `GPU NUMA ID`); None elsewhere."""
    cpu_affinity: str | None = None
    """CPUs nearest to the GPU in list form (`0-11,24-35`)."""
    pcie_max_gen: int | None = None
    """Highest PCIe generation the link can train to: the theoretical figures use this."""
    pcie_max_width: int | None = None
    """Widest lane count the link can train to."""
    pcie_cur_gen: int | None = None
    """Generation right now; drops when the GPU idles, so it explains nothing on its own."""
    pcie_cur_width: int | None = None
    """Lane count right now; below the max means a degraded slot or riser."""
    nvlinks: list[NvLink] = field(default_factory=list)
    """Every NVLink NVML reported, active or not; empty without NVLink."""

    @property
    def active_nvlinks(self) -> int:
        """How many of its NVLinks are up."""
        return sum(1 for link in self.nvlinks if link.active)

    @property
    def nvlink_generation(self) -> int | None:
        """NVLink generation of its active links (the lowest, if they disagree)."""
        gens = [lk.generation for lk in self.nvlinks if lk.active and lk.generation is not None]
        return min(gens) if gens else None


@dataclass(kw_only=True, slots=True)
class Pair:
    """How GPU `src` reaches GPU `dst`, and the fastest a one-way copy could go."""

    src: int
    """CUDA ordinal of the sending GPU."""
    dst: int
    """CUDA ordinal of the receiving GPU."""
    link: str
    """Connection label exactly as `nvidia-smi topo -m` prints it: `NV#`, `PIX`, `PXB`,
    `PHB`, `NODE`, `SYS`, or `N/A` when unknown."""
    nvlinks: int = 0
    """NVLinks between the two (bonded direct links, or min of both GPUs' switch links)."""
    p2p: bool | None = None
    """Whether CUDA peer copies work both ways (read and write); None when unknown."""
    p2p_read: bool | None = None
    """NVML P2P read capability."""
    p2p_write: bool | None = None
    """NVML P2P write capability."""
    p2p_nvlink: bool | None = None
    """NVML P2P-over-NVLink capability."""
    p2p_atomics: bool | None = None
    """NVML P2P atomics capability."""
    p2p_status: str | None = None
    """Why P2P is refused (`chipset not supported`, ...), when it is."""
    pcie_path: str | None = None
    """The PCIe label alone (what the pair falls back to without NVLink); None when unknown."""
    peak_gbps: float | None = None
    """Theoretical peak per direction in GB/s (1e9 bytes/s); None when it cannot be known."""
    peak_assumed: bool = False
    """True when the peak rests on an assumed rate (an imported matrix names no GPU model)."""
    note: str = ""
    """One line on how the peak was reached, and what limits real copies."""


@dataclass(kw_only=True, slots=True)
class NicPort:
    """One port of an RDMA device (`class/infiniband/<dev>/ports/<n>`)."""

    port: int
    """The port number (1 on a single-port ConnectX)."""
    state: str | None = None
    """Logical state (`ACTIVE`, `DOWN`, `INIT`), without the kernel's number prefix."""
    phys_state: str | None = None
    """Physical state (`LinkUp`, `Disabled`, `Polling`)."""
    rate_gbps: float | None = None
    """Line rate in Gb/s (bits) while ACTIVE; None when down or not reported."""
    link_layer: str | None = None
    """`InfiniBand` or `Ethernet` (RoCE)."""


NIC_KINDS = ("ethernet", "infiniband", "roce", "loopback", "other")


@dataclass(kw_only=True, slots=True)
class Nic:
    """A network device: from sysfs on this machine, or a column of an imported
    `nvidia-smi topo -m` matrix (which knows only its name and labels)."""

    name: str
    """Its name: the RDMA device (`mlx5_0`), the interface (`eth0`), or the matrix column
    (`NIC0`)."""
    device: str
    """Its device name (`mlx5_0`), from the NIC legend when there is one."""
    gpu_links: list[str] = field(default_factory=list)
    """Label from each GPU (by index) to this NIC; empty without GPUs."""
    kind: str | None = None
    """`ethernet`, `infiniband`, `roce` (an RDMA device on Ethernet), `loopback` or
    `other`; None when unknown (an imported matrix)."""
    state: str | None = None
    """`up`, `down`, ... (operstate, or `up` when an RDMA port is ACTIVE); None if unknown."""
    speed_gbps: float | None = None
    """Line rate in Gb/s (bits; all active ports of an RDMA device); None when the kernel
    reports none (virtio, veth, a down link), never a guess."""
    mtu: int | None = None
    """MTU in bytes."""
    driver: str | None = None
    """Kernel driver (`mlx5_core`, `virtio_net`)."""
    pci_bus_id: str | None = None
    """PCI function it sits on (`0000:0c:00.0`); None for a virtual interface."""
    numa_node: int | None = None
    """NUMA node of its PCI function; None when the kernel says -1 or nothing."""
    netdev: str | None = None
    """For an RDMA device: its network interface(s) (`ib0`, comma-separated)."""
    virtual: bool = False
    """No PCI function behind it (lo, veth, bridges, tun); skipped unless asked for."""
    ports: list[NicPort] = field(default_factory=list)
    """RDMA ports; empty for a plain interface."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Nic:
        return _nic_from(Value(data, where))


@dataclass(kw_only=True, slots=True)
class TopologySnapshot:
    """Everything `commbench topo` knows about one machine; benchmarks embed it verbatim."""

    schema_version: int = SCHEMA_VERSION
    """Version of this file form (1 is the first); newer versions are refused."""
    source: str = "nvml"
    """Where the facts came from: `nvml` (this machine) or `nvidia-smi` (imported text)."""
    captured_at: str | None = None
    """UTC time of capture, ISO 8601."""
    host: HostInfo = field(default_factory=HostInfo)
    """The machine around the GPUs."""
    nvml_error: str | None = None
    """Why no GPU is listed (`NVML: library not found`, `CUDA_VISIBLE_DEVICES hides all 8
    GPUs`); None when there are GPUs."""
    gpus: list[Gpu] = field(default_factory=list)
    """Visible GPUs in CUDA ordinal order."""
    pairs: list[Pair] = field(default_factory=list)
    """Every ordered pair of distinct GPUs."""
    nics: list[Nic] = field(default_factory=list)
    """Network devices: from sysfs (this machine), or listed by an imported matrix."""
    warnings: list[str] = field(default_factory=list)
    """Things the reader should know: unknown values, ignored entries, assumptions."""

    def __post_init__(self) -> None:
        _check_consistency(self.gpus, self.pairs, self.nics, "snapshot")

    def pair(self, src: int, dst: int) -> Pair:
        """The pair from GPU `src` to GPU `dst` (CUDA ordinals)."""
        for p in self.pairs:
            if p.src == src and p.dst == dst:
                return p
        raise KeyError(f"no GPU pair {src}->{dst} in this snapshot")

    @property
    def no_gpu_message(self) -> str:
        """The one line to print when there is nothing to show."""
        reason = self.nvml_error or "NVML reports no devices"
        return f"no NVIDIA GPU visible ({reason})"

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready form with `schema_version` first."""
        return {
            "schema_version": self.schema_version,
            "source": self.source,
            "captured_at": self.captured_at,
            "host": asdict(self.host),
            "nvml_error": self.nvml_error,
            "gpus": [asdict(g) for g in self.gpus],
            "pairs": [_pair_to_dict(p) for p in self.pairs],
            "nics": [asdict(n) for n in self.nics],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "snapshot") -> TopologySnapshot:
        """Build from `to_dict()` output, naming the field path of anything wrong.

        A run.json that embeds a snapshot (under `context.topology`, or `topology`) is
        accepted too.
        """
        if isinstance(data, Mapping) and "gpus" not in data:
            embedded: tuple[Any, str] | None = None
            match data:
                case {"topology": inner}:
                    embedded = inner, f"{where}.topology"
                case {"context": {"topology": inner}}:
                    embedded = inner, f"{where}.context.topology"
            if embedded is not None:
                inner, inner_where = embedded
                if inner is None:
                    raise UserError(f"{inner_where}: this run recorded no topology snapshot")
                return cls.from_dict(inner, inner_where)
        f = Fields(data, where)
        f.version(
            SCHEMA_VERSION,
            newer=lambda version: (
                f"{where}.schema_version: {version} is newer than this commbench understands "
                f"({SCHEMA_VERSION}); upgrade commbench to read it"
            ),
            invalid=lambda version: f"{where}.schema_version: {version} is not a valid version",
        )
        gpus = [_gpu_from(item) for item in f.items("gpus", max_items=MAX_GPUS)]
        pairs = [_pair_from(item) for item in f.items("pairs", max_items=MAX_GPUS * (MAX_GPUS - 1))]
        nics = [_nic_from(item) for item in f.items("nics", required=False, max_items=MAX_NICS)]
        _check_consistency(gpus, pairs, nics, where)
        return cls(
            schema_version=SCHEMA_VERSION,
            source=f.opt("source", string) or "nvml",
            captured_at=f.opt("captured_at", string),
            host=_host_from(f.sub("host")),
            nvml_error=f.opt("nvml_error", string),
            gpus=gpus,
            pairs=pairs,
            nics=nics,
            warnings=[w.scalar(string) for w in f.items("warnings", required=False)],
        )


# --- consistency -------------------------------------------------------------------------


def _check_consistency(gpus: list[Gpu], pairs: list[Pair], nics: list[Nic], where: str) -> None:
    if len(gpus) > MAX_GPUS:
        raise UserError(f"{where}.gpus: {len(gpus)} GPUs, more than any node has ({MAX_GPUS})")
    indices = [g.index for g in gpus]
    if sorted(indices) != list(range(len(indices))):
        raise UserError(f"{where}.gpus: indices must be 0..{len(indices) - 1}, got {indices}")
    n = len(indices)
    seen: set[tuple[int, int]] = set()
    for i, p in enumerate(pairs):
        at = f"{where}.pairs[{i}]"
        for name, value in (("src", p.src), ("dst", p.dst)):
            if not 0 <= value < n:
                raise UserError(f"{at}.{name}: GPU {value} is not in gpus (0..{n - 1})")
        if p.src == p.dst:
            raise UserError(f"{at}: src and dst are both GPU {p.src}")
        if (p.src, p.dst) in seen:
            raise UserError(f"{at}: pair {p.src}->{p.dst} appears twice")
        seen.add((p.src, p.dst))
        if not is_link_label(p.link):
            raise UserError(f"{at}.link: {p.link!r} is not an nvidia-smi topology label")
        if not 0 <= p.nvlinks <= MAX_NVLINKS:
            raise UserError(f"{at}.nvlinks: must be 0..{MAX_NVLINKS}, got {p.nvlinks}")
        if p.peak_gbps is not None and not 0 <= p.peak_gbps <= MAX_PEAK_GBPS:
            # also NaN: no comparison holds for it
            raise UserError(f"{at}.peak_gbps: must be 0..{MAX_PEAK_GBPS:g}, got {p.peak_gbps}")
    for i, nic in enumerate(nics):
        if len(nic.gpu_links) not in (0, n):
            raise UserError(
                f"{where}.nics[{i}].gpu_links: expected {n} labels (one per GPU), "
                f"got {len(nic.gpu_links)}"
            )


# --- to dict -----------------------------------------------------------------------------


def _pair_to_dict(p: Pair) -> dict[str, Any]:
    """Its fields in order (`asdict`, as every other part of the snapshot), the peak rounded:
    a file says what was derived to the MB/s, not the float's last bits."""
    data = asdict(p)
    data["peak_gbps"] = None if p.peak_gbps is None else round(p.peak_gbps, 3)
    return data


# --- from dict ---------------------------------------------------------------------------


_small = integer_in(0, _MAX_SMALL)
_BY_TYPE: dict[str, Conv[Any]] = {
    "str": string,
    "str | None": string,
    "bool": boolean,
    "bool | None": boolean,
    "int": _small,
    "int | None": _small,
}
"""How a field is read by its type, where `_record` is not told otherwise: every integer of a
snapshot but a few (`MAX_GPUS`, memory, MTU) is a small one."""

R = TypeVar("R")


def _record(
    record: type[R],
    f: Fields,
    convs: Mapping[str, Conv[Any]] = MappingProxyType({}),
    required: tuple[str, ...] = (),
    **given: Any,
) -> R:
    """A `record` from `f`, its fields in order: each one `given` as it is, the others read
    with their conv in `convs` (else by their type, `_BY_TYPE`); required where the record
    has no default (or `required` names it), else left at the default where `f` has none."""
    values = dict(given)
    for fld in fields(cast(Any, record)):
        if fld.name in given:
            continue
        conv = convs.get(fld.name) or _BY_TYPE[cast(str, fld.type)]
        if fld.name in required or (fld.default is MISSING and fld.default_factory is MISSING):
            values[fld.name] = f.req(fld.name, conv)
        elif (value := f.opt(fld.name, conv)) is not None:
            values[fld.name] = value
    return record(**values)


def _items(read: Callable[[Value], R], max_items: int | None = None) -> Conv[list[R]]:
    """A list of objects, each read by `read`."""
    return list_of(lambda data, path: read(Value(data, path)), max_items)


def _host_from(f: Fields | None) -> HostInfo:
    if f is None:
        return HostInfo()
    nodes = []
    for item in f.items("numa_nodes", required=False):
        n = item.obj()
        nodes.append(NumaNode(id=n.req("id", _small), cpus=n.req("cpus", string)))
    return _record(HostInfo, f, numa_nodes=nodes)


def _nvlink_from(item: Value) -> NvLink:
    f = item.obj()
    remote_type = f.opt("remote_type", string)
    if remote_type is not None and remote_type not in NVLINK_REMOTE_TYPES:
        raise UserError(
            f"{f.where}.remote_type: {remote_type!r} is not one of {', '.join(NVLINK_REMOTE_TYPES)}"
        )
    return _record(NvLink, f, remote_type=remote_type)


_GPU_CONVS: dict[str, Conv[Any]] = {
    "index": integer_in(0, MAX_GPUS - 1),
    "memory_bytes": integer_in(0, _MAX_BYTES),
    "nvlinks": _items(_nvlink_from, MAX_NVLINKS),
}


def _gpu_from(item: Value) -> Gpu:
    return _record(Gpu, item.obj(), _GPU_CONVS)


_PAIR_CONVS: dict[str, Conv[Any]] = {
    "src": integer_in(0, MAX_GPUS - 1),
    "dst": integer_in(0, MAX_GPUS - 1),
    "nvlinks": integer_in(0, MAX_NVLINKS),
    "peak_gbps": number_in(0, MAX_PEAK_GBPS),
}


def _pair_from(item: Value) -> Pair:
    f = item.obj()
    link = f.req("link", string)
    if not is_link_label(link):
        raise UserError(f"{f.where}.link: {link!r} is not an nvidia-smi topology label")
    return _record(Pair, f, _PAIR_CONVS, required=("nvlinks",), link=link)


def _port_from(item: Value) -> NicPort:
    return _record(NicPort, item.obj(), {"rate_gbps": number_in(0, MAX_NIC_GBPS)})


_NIC_CONVS: dict[str, Conv[Any]] = {
    "speed_gbps": number_in(0, MAX_NIC_GBPS),
    "mtu": integer_in(0, 1 << 20),
}


def _nic_from(item: Value) -> Nic:
    f = item.obj()
    links = [x.scalar(string) for x in f.items("gpu_links", required=False, max_items=MAX_GPUS)]
    for i, label in enumerate(links):
        if not is_link_label(label):
            raise UserError(f"{f.where}.gpu_links[{i}]: {label!r} is not a topology label")
    kind = f.opt("kind", string)
    if kind is not None and kind not in NIC_KINDS:
        raise UserError(f"{f.where}.kind: {kind!r} is not one of {', '.join(NIC_KINDS)}")
    ports = [_port_from(x) for x in f.items("ports", required=False, max_items=_MAX_PORTS)]
    name = f.req("name", string)
    return _record(
        Nic,
        f,
        _NIC_CONVS,
        gpu_links=links,
        kind=kind,
        ports=ports,
        name=name,
        device=f.opt("device", string) or name,
    )


def load_snapshot(path: str | Path) -> TopologySnapshot:
    """Read a snapshot saved by `commbench topo --format json` (or a run.json embedding one)."""
    data = load_json(path, "topology snapshot")
    return TopologySnapshot.from_dict(data, where=f"{shown(path)}: snapshot")
