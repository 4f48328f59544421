"""The health snapshot as stored in a run record's `context.health` (`before` and `after`).

Every value is what NVML or sysfs answered, or None where it could not (an old driver, a
GPU without ECC, a missing sysfs file): unknown is never turned into zero, so a reader can
tell "no errors" from "nobody asked".
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from commbench.fields import (
    Conv,
    Fields,
    boolean,
    integer_in,
    list_of,
    mapping_of,
    number_in,
    string,
)
from commbench.topology.model import Nic

HEALTH_SCHEMA_VERSION = 1
MAX_COUNTER = 1 << 64
"""Hardware counters are 64-bit at most."""
MAX_GPUS = 1024
MAX_PORTS = 4096
MAX_NODES = 1 << 16
MAX_NICS = 1024

_count = integer_in(0, MAX_COUNTER)
_small = integer_in(0, 1024)
_opt_counts = mapping_of(integer_in(0, MAX_COUNTER))


@dataclass(kw_only=True, slots=True)
class GpuHealth:
    """One GPU's link and memory health, as NVML reported it at one moment."""

    index: int
    """NVML (PCI) order index: the GPU's name in messages (`GPU3`)."""
    pci_bus_id: str | None = None
    pcie_cur_gen: int | None = None
    pcie_max_gen: int | None = None
    pcie_cur_width: int | None = None
    pcie_max_width: int | None = None
    pcie_replay: int | None = None
    """PCIe replay counter: link-level retransmissions, the first sign of a bad riser/slot."""
    nvlink_errors: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per active NVLink (its number as a string): replay, recovery, crc_flit, crc_data,
    ecc_data (Hopper and later): those NVML answered."""
    nvlink_unread: dict[str, str] = field(default_factory=dict)
    """NVLink counters some active link did not give, and why (`not supported`,
    `no permission`): never read, so never said to be unmoved."""
    retired_pages_sbe: int | None = None
    """Pages retired for repeated single-bit ECC errors (pre-Ampere page retirement)."""
    retired_pages_dbe: int | None = None
    """Pages retired for double-bit ECC errors."""
    retired_pending: bool | None = None
    """A retirement waits for a reboot/reset."""
    remapped_corrected: int | None = None
    """Rows remapped after correctable errors (Ampere and later replace page retirement)."""
    remapped_uncorrected: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    ecc: dict[str, int] = field(default_factory=dict)
    """Total ECC errors: volatile_corrected, volatile_uncorrected, aggregate_corrected,
    aggregate_uncorrected (only those NVML answered)."""
    throttle: list[str] | None = None
    """Active clock-event (throttle) reasons by name; None when NVML did not say."""
    temperature_c: int | None = None
    power_w: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_fields(cls, f: Fields) -> GpuHealth:
        values = {key: f.opt(key, conv) for key, conv in _GPU_FIELDS.items()}
        return cls(
            index=f.req("index", _small), **{k: v for k, v in values.items() if v is not None}
        )


_GPU_FIELDS: dict[str, Conv[Any]] = {
    "pci_bus_id": string,
    "pcie_cur_gen": _small,
    "pcie_max_gen": _small,
    "pcie_cur_width": _small,
    "pcie_max_width": _small,
    "pcie_replay": _count,
    "nvlink_errors": mapping_of(_opt_counts),
    "nvlink_unread": mapping_of(string),
    "retired_pages_sbe": _count,
    "retired_pages_dbe": _count,
    "retired_pending": boolean,
    "remapped_corrected": _count,
    "remapped_uncorrected": _count,
    "remap_pending": boolean,
    "remap_failure": boolean,
    "ecc": _opt_counts,
    "throttle": list_of(string, max_items=64),
    "temperature_c": integer_in(-100, 1000),
    "power_w": number_in(0, 1e6),
}


@dataclass(kw_only=True, slots=True)
class RdmaPortHealth:
    """One RDMA (InfiniBand / RoCE) port as sysfs `class/infiniband/<dev>/ports/<n>` shows it."""

    device: str
    """The RDMA device (`mlx5_0`)."""
    port: int
    state: str | None = None
    """`ACTIVE`, `DOWN`, ... (the text after `4: ` in the `state` file)."""
    rate: str | None = None
    """The `rate` file as the kernel writes it: `400 Gb/sec (4X NDR)`."""
    width: str | None = None
    """The lanes the port trained to, from `rate` (`4X`)."""
    link_layer: str | None = None
    """`InfiniBand` or `Ethernet` (RoCE)."""
    hca_type: str | None = None
    """The adapter's model as the driver names it (`MT4129`: a ConnectX-7); a port is judged
    against the node's other ports of the same model only."""
    counters: dict[str, int] = field(default_factory=dict)
    """Every plain-integer file of `counters/` and `hw_counters/` (hw_ ones prefixed `hw_`)."""

    @property
    def name(self) -> str:
        """How messages name the port: `mlx5_0/1`."""
        return f"{self.device}/{self.port}"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_fields(cls, f: Fields) -> RdmaPortHealth:
        return cls(
            device=f.req("device", string),
            port=f.req("port", integer_in(0, 1 << 16)),
            state=f.opt("state", string),
            rate=f.opt("rate", string),
            width=f.opt("width", string),
            link_layer=f.opt("link_layer", string),
            hca_type=f.opt("hca_type", string),
            counters=f.opt("counters", _opt_counts) or {},
        )


@dataclass(kw_only=True, slots=True)
class HealthSnapshot:
    """Every GPU's and RDMA port's health counters on one node at one moment."""

    taken_at: str | None = None
    host: str | None = None
    gpus: list[GpuHealth] = field(default_factory=list)
    ports: list[RdmaPortHealth] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Why a part is missing (`NVML: library not found`), never a reason to fail the run."""
    seconds: float | None = None
    """How long taking it took: the cost a run pays twice."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": HEALTH_SCHEMA_VERSION,
            "taken_at": self.taken_at,
            "host": self.host,
            "gpus": [g.to_dict() for g in self.gpus],
            "ports": [p.to_dict() for p in self.ports],
            "errors": list(self.errors),
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> HealthSnapshot:
        f = Fields(data, where)
        f.opt("schema_version", integer_in(1, HEALTH_SCHEMA_VERSION))
        return cls(
            taken_at=f.opt("taken_at", string),
            host=f.opt("host", string),
            gpus=[GpuHealth.from_fields(i.obj()) for i in f.items("gpus", False, MAX_GPUS)],
            ports=[RdmaPortHealth.from_fields(i.obj()) for i in f.items("ports", False, MAX_PORTS)],
            errors=f.opt("errors", list_of(string, max_items=256)) or [],
            seconds=f.opt("seconds", number_in(0, 1e6)),
        )


@dataclass(kw_only=True, slots=True)
class NodeHealth:
    """Another node's snapshots in a multi-node run. Its local rank 0 worker takes them when
    the workers start and when they finish, and they are gathered over the job's process group
    to the node that writes the record: the sick link is as often on node 7 as on node 0."""

    node: int
    """The node's rank in the job (torchrun's group rank, as `context.ranks[].node`)."""
    host: str | None = None
    before: HealthSnapshot | None = None
    after: HealthSnapshot | None = None
    nics: list[Nic] | None = None
    """The node's NICs when its workers started (`commbench topo`'s, without GPU links):
    the network bound of a multi-node run is its slowest node's. None when not sent."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "host": self.host,
            "before": None if self.before is None else self.before.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
            "nics": None if self.nics is None else [n.to_dict() for n in self.nics],
        }

    @classmethod
    def from_fields(cls, f: Fields) -> NodeHealth:
        before, after = _snapshots(f)
        nics = f.opt("nics", list_of(Nic.from_dict, max_items=MAX_NICS))
        return cls(
            node=f.req("node", integer_in(0, 1 << 20)),
            host=f.opt("host", string),
            before=before,
            after=after,
            nics=nics,
        )


@dataclass(kw_only=True, slots=True)
class RunHealth:
    """`context.health`: the snapshot taken before the run and the one taken after it on the
    node that wrote the record (`node`, where a multi-node run says which), and, on a
    multi-node run, the other nodes' (`nodes`)."""

    before: HealthSnapshot | None = None
    after: HealthSnapshot | None = None
    node: int | None = None
    """This record's own node in a multi-node run (None on one node)."""
    nodes: list[NodeHealth] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "before": None if self.before is None else self.before.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
        }
        if self.node is not None or self.nodes:  # single-node records keep their old shape
            out["node"] = self.node
            out["nodes"] = [n.to_dict() for n in self.nodes]
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> RunHealth:
        f = Fields(data, where)
        before, after = _snapshots(f)
        return cls(
            before=before,
            after=after,
            node=f.opt("node", integer_in(0, 1 << 20)),
            nodes=[NodeHealth.from_fields(i.obj()) for i in f.items("nodes", False, MAX_NODES)],
        )


def _snapshots(f: Fields) -> tuple[HealthSnapshot | None, HealthSnapshot | None]:
    before, after = f.sub("before"), f.sub("after")
    return (
        None if before is None else HealthSnapshot.from_dict(before.data, before.where),
        None if after is None else HealthSnapshot.from_dict(after.data, after.where),
    )
