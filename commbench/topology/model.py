"""The topology snapshot: what we know about the GPUs, each pair, and the host they sit in.

A snapshot is the unit everything else works with: `discover()` builds one from NVML,
`parse_nvidia_smi()` from `nvidia-smi topo -m` text, `load_snapshot()` from a saved file, and
every benchmark embeds one in its run.json. `to_dict()`/`from_dict()` are its only file form;
`from_dict` checks every field and names the one that is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from commbench.errors import UserError
from commbench.files import read_text

SCHEMA_VERSION = 1

# Connection labels as `nvidia-smi topo -m` prints them, nearest first ("NV#" aside).
PCIE_LABELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
UNKNOWN_LABEL = "N/A"
_NV_LABEL = re.compile(r"^NV(\d+)$")

NVLINK_REMOTE_TYPES = ("gpu", "switch", "ibmnpu", "unknown")

T = TypeVar("T")


def nvlink_count(label: str) -> int:
    """The number of bonded NVLinks a label names (`NV12` -> 12; PCIe labels -> 0)."""
    match = _NV_LABEL.match(label)
    return int(match.group(1)) if match else 0


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
class Nic:
    """A network device `nvidia-smi topo -m` listed next to the GPUs; kept for context."""

    name: str
    """Its column name in the matrix (`NIC0`, or `mlx5_0` in older outputs)."""
    device: str
    """Its device name (`mlx5_0`), from the NIC legend when there is one."""
    gpu_links: list[str] = field(default_factory=list)
    """Label from each GPU (by index) to this NIC."""


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
    """Network devices listed by an imported matrix (NVML does not report them)."""
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
            "host": _host_to_dict(self.host),
            "nvml_error": self.nvml_error,
            "gpus": [_gpu_to_dict(g) for g in self.gpus],
            "pairs": [_pair_to_dict(p) for p in self.pairs],
            "nics": [
                {"name": n.name, "device": n.device, "gpu_links": list(n.gpu_links)}
                for n in self.nics
            ],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "snapshot") -> TopologySnapshot:
        """Build from `to_dict()` output, naming the field path of anything wrong.

        A run.json that embeds a snapshot (under `context.topology`, or `topology`) is
        accepted too.
        """
        if isinstance(data, Mapping) and "gpus" not in data:
            context = data.get("context")
            embedded: tuple[Any, str] | None = None
            if "topology" in data:
                embedded = data["topology"], f"{where}.topology"
            elif isinstance(context, Mapping) and "topology" in context:
                embedded = context["topology"], f"{where}.context.topology"
            if embedded is not None:
                inner, inner_where = embedded
                if inner is None:
                    raise UserError(f"{inner_where}: this run recorded no topology snapshot")
                return cls.from_dict(inner, inner_where)
        f = _Fields(data, where)
        version = f.req("schema_version", _int)
        if version > SCHEMA_VERSION:
            raise UserError(
                f"{where}.schema_version: {version} is newer than this commbench understands "
                f"({SCHEMA_VERSION}); upgrade commbench to read it"
            )
        if version < 1:
            raise UserError(f"{where}.schema_version: {version} is not a valid version")
        gpus = [_gpu_from(item) for item in f.items("gpus")]
        pairs = [_pair_from(item) for item in f.items("pairs")]
        nics = [_nic_from(item) for item in f.items("nics", required=False)]
        _check_consistency(gpus, pairs, nics, where)
        return cls(
            schema_version=SCHEMA_VERSION,
            source=f.opt("source", _str) or "nvml",
            captured_at=f.opt("captured_at", _str),
            host=_host_from(f.sub("host")),
            nvml_error=f.opt("nvml_error", _str),
            gpus=gpus,
            pairs=pairs,
            nics=nics,
            warnings=[w.scalar(_str) for w in f.items("warnings", required=False)],
        )


# --- consistency -------------------------------------------------------------------------


def _check_consistency(gpus: list[Gpu], pairs: list[Pair], nics: list[Nic], where: str) -> None:
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
        if p.nvlinks < 0:
            raise UserError(f"{at}.nvlinks: must be >= 0, got {p.nvlinks}")
        if p.peak_gbps is not None and p.peak_gbps < 0:
            raise UserError(f"{at}.peak_gbps: must be >= 0, got {p.peak_gbps}")
    for i, nic in enumerate(nics):
        if len(nic.gpu_links) not in (0, n):
            raise UserError(
                f"{where}.nics[{i}].gpu_links: expected {n} labels (one per GPU), "
                f"got {len(nic.gpu_links)}"
            )


# --- to dict -----------------------------------------------------------------------------


def _host_to_dict(h: HostInfo) -> dict[str, Any]:
    return {
        "hostname": h.hostname,
        "cpu_model": h.cpu_model,
        "cpu_cores": h.cpu_cores,
        "cpu_threads": h.cpu_threads,
        "numa_nodes": [{"id": n.id, "cpus": n.cpus} for n in h.numa_nodes],
        "driver_version": h.driver_version,
        "cuda_driver_version": h.cuda_driver_version,
    }


def _gpu_to_dict(g: Gpu) -> dict[str, Any]:
    return {
        "index": g.index,
        "name": g.name,
        "uuid": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "nvml_index": g.nvml_index,
        "memory_bytes": g.memory_bytes,
        "numa_node": g.numa_node,
        "gpu_numa_id": g.gpu_numa_id,
        "cpu_affinity": g.cpu_affinity,
        "pcie_max_gen": g.pcie_max_gen,
        "pcie_max_width": g.pcie_max_width,
        "pcie_cur_gen": g.pcie_cur_gen,
        "pcie_cur_width": g.pcie_cur_width,
        "nvlinks": [
            {
                "link": lk.link,
                "active": lk.active,
                "generation": lk.generation,
                "remote_type": lk.remote_type,
                "remote_pci_bus_id": lk.remote_pci_bus_id,
            }
            for lk in g.nvlinks
        ],
    }


def _pair_to_dict(p: Pair) -> dict[str, Any]:
    return {
        "src": p.src,
        "dst": p.dst,
        "link": p.link,
        "nvlinks": p.nvlinks,
        "p2p": p.p2p,
        "p2p_read": p.p2p_read,
        "p2p_write": p.p2p_write,
        "p2p_nvlink": p.p2p_nvlink,
        "p2p_atomics": p.p2p_atomics,
        "p2p_status": p.p2p_status,
        "pcie_path": p.pcie_path,
        "peak_gbps": None if p.peak_gbps is None else round(p.peak_gbps, 3),
        "peak_assumed": p.peak_assumed,
        "note": p.note,
    }


# --- from dict ---------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{path}: expected an integer, got {_kind(value)}")
    return value


def _num(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{path}: expected a number, got {_kind(value)}")
    return float(value)


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{path}: expected a string, got {_kind(value)}")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{path}: expected true or false, got {_kind(value)}")
    return value


class _Value:
    """One JSON value and the path that names it in error messages."""

    __slots__ = ("data", "path")

    def __init__(self, data: Any, path: str) -> None:
        self.data = data
        self.path = path

    def obj(self) -> _Fields:
        return _Fields(self.data, self.path)

    def scalar(self, conv: Callable[[Any, str], T]) -> T:
        return conv(self.data, self.path)


class _Fields:
    """A JSON object being read field by field."""

    __slots__ = ("data", "where")

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise UserError(f"{where}: expected an object, got {_kind(data)}")
        self.data = data
        self.where = where

    def req(self, key: str, conv: Callable[[Any, str], T]) -> T:
        if self.data.get(key) is None:
            raise UserError(f"{self.where}.{key}: missing")
        return conv(self.data[key], f"{self.where}.{key}")

    def opt(self, key: str, conv: Callable[[Any, str], T]) -> T | None:
        value = self.data.get(key)
        return None if value is None else conv(value, f"{self.where}.{key}")

    def sub(self, key: str) -> _Fields | None:
        value = self.data.get(key)
        return None if value is None else _Fields(value, f"{self.where}.{key}")

    def items(self, key: str, required: bool = True) -> list[_Value]:
        value = self.data.get(key)
        if value is None:
            if required:
                raise UserError(f"{self.where}.{key}: missing")
            return []
        if not isinstance(value, list):
            raise UserError(f"{self.where}.{key}: expected a list, got {_kind(value)}")
        return [_Value(v, f"{self.where}.{key}[{i}]") for i, v in enumerate(value)]


def _host_from(f: _Fields | None) -> HostInfo:
    if f is None:
        return HostInfo()
    nodes = []
    for item in f.items("numa_nodes", required=False):
        n = item.obj()
        nodes.append(NumaNode(id=n.req("id", _int), cpus=n.req("cpus", _str)))
    return HostInfo(
        hostname=f.opt("hostname", _str),
        cpu_model=f.opt("cpu_model", _str),
        cpu_cores=f.opt("cpu_cores", _int),
        cpu_threads=f.opt("cpu_threads", _int),
        numa_nodes=nodes,
        driver_version=f.opt("driver_version", _str),
        cuda_driver_version=f.opt("cuda_driver_version", _str),
    )


def _nvlink_from(item: _Value) -> NvLink:
    f = item.obj()
    remote_type = f.opt("remote_type", _str)
    if remote_type is not None and remote_type not in NVLINK_REMOTE_TYPES:
        raise UserError(
            f"{f.where}.remote_type: {remote_type!r} is not one of {', '.join(NVLINK_REMOTE_TYPES)}"
        )
    return NvLink(
        link=f.req("link", _int),
        active=f.req("active", _bool),
        generation=f.opt("generation", _int),
        remote_type=remote_type,
        remote_pci_bus_id=f.opt("remote_pci_bus_id", _str),
    )


def _gpu_from(item: _Value) -> Gpu:
    f = item.obj()
    return Gpu(
        index=f.req("index", _int),
        name=f.req("name", _str),
        uuid=f.opt("uuid", _str),
        pci_bus_id=f.opt("pci_bus_id", _str),
        nvml_index=f.opt("nvml_index", _int),
        memory_bytes=f.opt("memory_bytes", _int),
        numa_node=f.opt("numa_node", _int),
        gpu_numa_id=f.opt("gpu_numa_id", _int),
        cpu_affinity=f.opt("cpu_affinity", _str),
        pcie_max_gen=f.opt("pcie_max_gen", _int),
        pcie_max_width=f.opt("pcie_max_width", _int),
        pcie_cur_gen=f.opt("pcie_cur_gen", _int),
        pcie_cur_width=f.opt("pcie_cur_width", _int),
        nvlinks=[_nvlink_from(x) for x in f.items("nvlinks", required=False)],
    )


def _pair_from(item: _Value) -> Pair:
    f = item.obj()
    link = f.req("link", _str)
    if not is_link_label(link):
        raise UserError(f"{f.where}.link: {link!r} is not an nvidia-smi topology label")
    return Pair(
        src=f.req("src", _int),
        dst=f.req("dst", _int),
        link=link,
        nvlinks=f.req("nvlinks", _int),
        p2p=f.opt("p2p", _bool),
        p2p_read=f.opt("p2p_read", _bool),
        p2p_write=f.opt("p2p_write", _bool),
        p2p_nvlink=f.opt("p2p_nvlink", _bool),
        p2p_atomics=f.opt("p2p_atomics", _bool),
        p2p_status=f.opt("p2p_status", _str),
        pcie_path=f.opt("pcie_path", _str),
        peak_gbps=f.opt("peak_gbps", _num),
        peak_assumed=f.opt("peak_assumed", _bool) or False,
        note=f.opt("note", _str) or "",
    )


def _nic_from(item: _Value) -> Nic:
    f = item.obj()
    links = [x.scalar(_str) for x in f.items("gpu_links", required=False)]
    for i, label in enumerate(links):
        if not is_link_label(label):
            raise UserError(f"{f.where}.gpu_links[{i}]: {label!r} is not a topology label")
    return Nic(
        name=f.req("name", _str),
        device=f.opt("device", _str) or f.req("name", _str),
        gpu_links=links,
    )


def load_snapshot(path: str | Path) -> TopologySnapshot:
    """Read a snapshot saved by `commbench topo --format json` (or a run.json embedding one)."""
    path = Path(path)
    text = read_text(path, "topology snapshot")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return TopologySnapshot.from_dict(data, where=f"{path}: snapshot")
