"""What a person should know from two health snapshots: links below their maximum and
counters that moved during the run.

PCIe generation: NVML reports the *current* generation, and an idle GPU drops its link to a
lower generation to save power (Gen5 -> Gen1 is normal at idle). So a generation below the
maximum is judged only on a snapshot whose throttle reasons say the GPU was not idle (NVML's
`gpu_idle` clock-event reason is absent); width is judged on every snapshot, since an idle
link keeps its lanes: a GPU at x8 of x16 is downtrained (a bad riser or slot), the most
common cause of one slow node, and is reported even when it was so before the run started.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

from commbench.escape import markdown_text
from commbench.health.record import (
    GpuHealth,
    HealthSnapshot,
    NodeHealth,
    RdmaPortHealth,
    RunHealth,
)

# Per-lane transfer rate by PCIe generation, GT/s (PCI-SIG figures; Gen1-2 lose 20% to 8b/10b,
# ignored here: the ratio to the same GPU's maximum is what is reported).
_GT_PER_LANE = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

# RDMA port counters that count errors (counters/ and hw_counters/, the latter prefixed hw_);
# data and packet counters move on every run and are recorded, not reported.
RDMA_ERROR_COUNTERS = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
    "hw_out_of_sequence",
    "hw_packet_seq_err",
    "hw_local_ack_timeout_err",
    "hw_rnr_nak_retry_err",
    "hw_implied_nak_seq_err",
    "hw_req_cqe_error",
    "hw_resp_cqe_error",
    "hw_rx_icrc_encapsulated",
)

# Throttle reasons that mean the hardware slowed the GPU down (a power cap under load is usual).
_BAD_THROTTLE = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")


class FindingKind(str, Enum):
    DOWNTRAINED = "downtrained"
    COUNTER_MOVED = "counter_moved"
    COUNTER_RESET = "counter_reset"
    THROTTLED = "throttled"
    ECC = "ecc"
    RETIRED = "retired"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing worth a look: `subject` (`GPU3`, `mlx5_0/1`), its kind, and the sentence."""

    subject: str
    kind: FindingKind
    message: str
    node: int | None = None
    """On a multi-node run, the node whose link it is (its message then starts with the
    node's name); None on one node."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "subject": self.subject,
            "kind": self.kind.value,
            "message": self.message,
        }
        if self.node is not None:
            out["node"] = self.node
        return out


def _share(fraction: float) -> str:
    if abs(fraction - 0.5) < 1e-9:
        return "half the host bandwidth"
    if abs(fraction - 0.25) < 1e-9:
        return "a quarter of the host bandwidth"
    return f"{fraction:.0%} of the host bandwidth"


def downtrained(gpu: GpuHealth) -> Finding | None:
    """`GPU3: PCIe Gen5 x8, max x16: half the host bandwidth`, or None for a full link (or an
    unknown one). The generation counts only when the GPU was not idle (module docstring)."""
    cw, mw = gpu.pcie_cur_width, gpu.pcie_max_width
    cg, mg = gpu.pcie_cur_gen, gpu.pcie_max_gen
    if cw is None or mw is None or cw <= 0 or mw <= 0:
        return None
    busy = gpu.throttle is not None and "gpu_idle" not in gpu.throttle
    judge_gen = busy and cg is not None and mg is not None and cg < mg
    if cw >= mw and not judge_gen:
        return None
    cur_rate = _GT_PER_LANE.get(cg or 0, 0.0) if judge_gen else 1.0
    max_rate = _GT_PER_LANE.get(mg or 0, 0.0) if judge_gen else 1.0
    if not cur_rate or not max_rate:
        return None
    fraction = (cur_rate * cw) / (max_rate * mw)
    now = f"Gen{cg} x{cw}" if cg is not None else f"x{cw}"
    peak = f"Gen{mg} x{mw}" if judge_gen else f"x{mw}"
    return Finding(
        f"GPU{gpu.index}",
        FindingKind.DOWNTRAINED,
        f"GPU{gpu.index}: PCIe {now}, max {peak}: {_share(fraction)}",
    )


def _moved(subject: str, name: str, before: int | None, after: int | None) -> Finding | None:
    if before is None or after is None or before == after:
        return None
    if after < before:
        return Finding(
            subject,
            FindingKind.COUNTER_RESET,
            f"{subject}: {name} went from {before} to {after} (counter reset during the run)",
        )
    return Finding(
        subject, FindingKind.COUNTER_MOVED, f"{subject}: {name} +{after - before} during the run"
    )


def _link_order(link: str) -> tuple[int, str]:
    return (int(link), "") if link.isdigit() else (1 << 30, link)


def _nvlink_moved(subject: str, before: GpuHealth, after: GpuHealth) -> list[Finding]:
    """One finding per counter and change, naming the links it moved on: a sick NVSwitch
    tray or a bad GPU baseboard moves the same counter on all 18 links of a GPU, and 18
    lines that say the same thing would bury the other findings."""
    links = sorted(after.nvlink_errors, key=_link_order)
    counters = sorted({k for link in links for k in after.nvlink_errors[link]})
    out: list[Finding] = []
    for counter in counters:
        same: dict[tuple[FindingKind, str], list[str]] = {}
        for link in links:
            was = before.nvlink_errors.get(link, {}).get(counter)
            now = after.nvlink_errors[link].get(counter)
            moved = _moved(subject, f"NVLink {counter}", was, now)
            if moved is not None and moved.kind is FindingKind.COUNTER_RESET:
                # from what to what differs link by link: one line each, the link named
                out.append(_moved(subject, f"NVLink {link} {counter}", was, now) or moved)
            elif moved is not None:
                same.setdefault((moved.kind, moved.message), []).append(link)
        for (kind, message), on in same.items():
            if len(on) == 1:
                where = f"link {on[0]}"
            elif len(on) == len(links):
                where = f"each of its {len(on)} links"
            else:
                where = f"each of links {', '.join(on)}"
            out.append(Finding(subject, kind, f"{message} ({where})"))
    return out


def _gpu_findings(before: GpuHealth | None, after: GpuHealth) -> list[Finding]:
    subject = f"GPU{after.index}"
    out: list[Finding] = []
    seen: set[str] = set()
    for snap in (before, after):
        found = None if snap is None else downtrained(snap)
        if found is not None and found.message not in seen:
            seen.add(found.message)
            out.append(found)
    if before is not None:
        moved = _moved(subject, "PCIe replay", before.pcie_replay, after.pcie_replay)
        if moved is not None:
            out.append(moved)
        out += _nvlink_moved(subject, before, after)
        for key, value in after.ecc.items():
            if key.endswith("uncorrected") or key.startswith("volatile"):
                moved = _moved(subject, f"ECC {key.replace('_', ' ')}", before.ecc.get(key), value)
                if moved is not None:
                    out.append(
                        Finding(subject, FindingKind.ECC, moved.message)
                        if moved.kind is FindingKind.COUNTER_MOVED
                        else moved
                    )
        for name, old_value, new_value in (
            ("retired pages (single-bit)", before.retired_pages_sbe, after.retired_pages_sbe),
            ("retired pages (double-bit)", before.retired_pages_dbe, after.retired_pages_dbe),
            (
                "remapped rows (uncorrectable)",
                before.remapped_uncorrected,
                after.remapped_uncorrected,
            ),
        ):
            if old_value is not None and new_value is not None and new_value > old_value:
                out.append(
                    Finding(
                        subject,
                        FindingKind.RETIRED,
                        f"{subject}: {name} +{new_value - old_value} during the run",
                    )
                )
    if after.retired_pending or after.remap_pending or after.remap_failure:
        what = (
            "row remapping failed"
            if after.remap_failure
            else "memory retirement pending a GPU reset"
        )
        out.append(Finding(subject, FindingKind.RETIRED, f"{subject}: {what}"))
    # a slowdown at either end of the run slowed some of it: a GPU that cooled down by the
    # end (the run stopped loading it) was still throttled while it measured
    seen_at = {r for snap in (before, after) if snap is not None for r in snap.throttle or ()}
    bad = [r for r in _BAD_THROTTLE if r in seen_at]
    if bad:
        readings = [
            f"{after.temperature_c} C" if after.temperature_c is not None else "",
            f"{after.power_w:g} W" if after.power_w is not None else "",
        ]
        now = ", ".join(x for x in readings if x)
        out.append(
            Finding(
                subject,
                FindingKind.THROTTLED,
                f"{subject}: clocks slowed by {', '.join(bad)}" + (f" (now {now})" if now else ""),
            )
        )
    return out


def _port_findings(before: RdmaPortHealth | None, after: RdmaPortHealth) -> list[Finding]:
    out: list[Finding] = []
    if before is None:
        return out
    for name in RDMA_ERROR_COUNTERS:
        moved = _moved(after.name, name, before.counters.get(name), after.counters.get(name))
        if moved is not None:
            out.append(moved)
    if before.state != after.state and before.state is not None and after.state is not None:
        out.append(
            Finding(
                after.name,
                FindingKind.COUNTER_MOVED,
                f"{after.name}: state {before.state} -> {after.state} during the run",
            )
        )
    return out


def findings(before: HealthSnapshot | None, after: HealthSnapshot | None) -> list[Finding]:
    """Links below their maximum (in either snapshot) and counters that moved between them.

    With only one snapshot (the run died before the second), only what one snapshot can show
    is reported: downtrained links. Unknown values (None) never make a finding."""
    if after is None:
        before, after = None, before
    if after is None:
        return []
    old_gpus = {g.index: g for g in before.gpus} if before is not None else {}
    old_ports = {p.name: p for p in before.ports} if before is not None else {}
    out: list[Finding] = []
    for gpu in after.gpus:
        out.extend(_gpu_findings(old_gpus.get(gpu.index), gpu))
    for port in after.ports:
        out.extend(_port_findings(old_ports.get(port.name), port))
    out.extend(port_downtrained(after.ports))
    return out


_GBPS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_SAME_RATE_PEERS = 2
"""Ports that must share a faster rate before a slower one is called downtrained."""


def _lanes(width: str | None) -> int | None:
    return int(width[:-1]) if width and width[:-1].isdigit() else None


def _gbps(rate: str | None) -> float | None:
    found = _GBPS.match(rate or "")
    return float(found.group(1)) if found else None


def port_downtrained(ports: list[RdmaPortHealth]) -> list[Finding]:
    """ACTIVE InfiniBand ports below what the node's other ports of the same adapter run.

    sysfs gives a port's trained rate and width but no maximum, so a port is judged against
    its node's ports of the same adapter model (`hca_type`): one that trained narrower than
    the widest (`1X` where the others are `4X`: a bad cable or transceiver lane) is named,
    and so is one slower than a rate that at least two others run (one HDR port among NDR
    ones). Comparing like with like keeps a node's storage adapter, of another model and
    speed by design, out of it; Ethernet (RoCE) ports are left alone, as a node mixes 25 and
    400 Gb/s Ethernet on one adapter model by design. Ports that are down are left alone
    too: a dual-port adapter's unused port is down on every healthy node (a port that goes
    down during the run is a moved state, see `_port_findings`)."""
    active = [p for p in ports if p.state == "ACTIVE" and p.link_layer == "InfiniBand"]
    out: list[Finding] = []
    for port in active:
        peers = [p for p in active if p is not port and p.hca_type == port.hca_type]
        layer = port.link_layer
        lanes, widest = _lanes(port.width), max((_lanes(p.width) or 0 for p in peers), default=0)
        rate = _gbps(port.rate)
        rates = Counter(r for p in peers if (r := _gbps(p.rate)) is not None)
        faster = [r for r, n in rates.items() if n >= _SAME_RATE_PEERS and rate and r > rate]
        if lanes and lanes < widest:
            text = f"{port.name}: {port.rate}, other {layer} ports trained {widest}X"
        elif faster:
            text = f"{port.name}: {port.rate}, other {layer} ports run {max(faster):g} Gb/sec"
        else:
            continue
        out.append(Finding(port.name, FindingKind.DOWNTRAINED, text))
    return out


def run_findings(health: RunHealth | None) -> list[Finding]:
    """The findings of a run record's `context.health` (none for a record without one).

    On a multi-node run, every node's, in node order, each message led by the node's name
    (its host, or `node N` where hosts repeat, as on one machine's test "nodes")."""
    if health is None:
        return []
    if health.node is None and not health.nodes:
        return findings(health.before, health.after)
    snap = health.before or health.after
    own = NodeHealth(
        node=-1 if health.node is None else health.node,
        host=None if snap is None else snap.host,
        before=health.before,
        after=health.after,
    )
    nodes = sorted([own, *health.nodes], key=lambda n: n.node)
    hosts = [n.host for n in nodes]
    out: list[Finding] = []
    for n in nodes:
        name = n.host if n.host is not None and hosts.count(n.host) == 1 else f"node {n.node}"
        for f in findings(n.before, n.after):
            out.append(Finding(f.subject, f.kind, f"{name}: {f.message}", max(n.node, 0)))
    return out


def health_lines(health: RunHealth | None) -> list[str]:
    """The findings as the lines a table's notes, the report and p2p's output show."""
    return [f.message for f in run_findings(health)]


def notes_block(health: RunHealth | None, *, markdown: bool = False) -> str:
    """The notes printed after a run's table: empty when nothing was found, so a healthy
    run prints nothing more."""
    lines = health_lines(health)
    if not lines:
        return ""
    if markdown:
        return "\n**Link health**\n\n" + "".join(f"- {markdown_text(line)}\n" for line in lines)
    return "\nLink health:\n" + "".join(f"  {line}\n" for line in lines)


def report_lines(health: RunHealth | None) -> list[str]:
    """The report's "Link health" section: the findings, or one line saying what was checked
    and that nothing was found; empty for a record without health (an import, an older run)."""
    if health is None:
        return []
    found = health_lines(health)
    if found:
        return found
    snap = health.after or health.before
    if snap is None:
        return []
    checked = f"{len(snap.gpus)} GPU(s), {len(snap.ports)} RDMA port(s) checked"
    unread = [*unread_counters(snap), *snap.errors]
    unknown = f"; not read: {'; '.join(unread)}" if unread else ""
    among = " among the counters read" if unread else ""
    return [f"No link below its maximum, no error counter moved{among} ({checked}{unknown})."]


def unread_counters(snap: HealthSnapshot) -> list[str]:
    """`NVLink crc_data not supported on GPU0, GPU1`: each counter a GPU would not give, and
    why, in the order the GPUs and counters come."""
    on: dict[tuple[str, str], list[str]] = {}
    for gpu in snap.gpus:
        for counter, why in gpu.nvlink_unread.items():
            on.setdefault((counter, why), []).append(f"GPU{gpu.index}")
    return [f"NVLink {c} {why} on {', '.join(gpus)}" for (c, why), gpus in on.items()]
