"""Which process of an imported nccl-tests run was the slowest, with its rank, host and GPU.

An nccl-tests `-I 1` JSON file keeps each MPI process's time of every iteration (the maximum
over the process's GPUs); the import keeps them on the rows (`ResultRow.processes`), and
`ProcessTimes.slowest` names the process whose median exceeds every other's by a meaningful
time, as nccl-tests' own analyzer (`tools/analyze_perf_json.py --straggler`) calls the process
of the largest times the slowest. This module places that process on its device (the run's
`context.ranks`, from the file's `config.devices`) and folds a process that is the slowest
at most points into one finding, as `stragglers` does for the ranks the others waited for:

    for finding in summarise(run.rows, run.context.ranks):
        print(describe(finding))
    # the process of rank 2 (node-b, cuda:0 [0000:1b:00] NVIDIA H100 80GB HBM3) was the
    # slowest at 8 of 8 points (median 19% of the iteration above the next slowest process)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from commbench.results.schema import ResultRow
from commbench.results.stragglers import (
    RankAt,
    RankOften,
    at_most,
    fold_by_rank,
    format_us,
    point_label,
)
from commbench.results.summary import Device, devices


@dataclass(frozen=True, slots=True)
class SlowestAt(RankAt):
    """One point at which one process was slower than every other (`ResultRow.slow_process`);
    `rank` is the process's first global rank, `share` its excess over the point's median
    iteration time."""

    device: Device | None
    """Its device, as the run's context lists it; None when it does not."""
    excess_us: float
    """Its median time per iteration minus the next slowest process's."""


@dataclass(frozen=True, slots=True)
class SlowestOften(RankOften[SlowestAt]):
    """One process that was the slowest at many points of a run (`DOMINANT_POINTS`)."""

    device: Device | None


def slowest(rows: Sequence[ResultRow], ranks: Sequence[Mapping[str, Any]]) -> list[SlowestAt]:
    """Every point with a process slower than every other, in the order measured."""
    by_rank = {d.rank: d for d in devices(ranks)}
    return [
        SlowestAt(row, slow.rank, slow.share, by_rank.get(slow.rank), slow.excess_us)
        for row in rows
        if (slow := row.slow_process) is not None
    ]


def summarise(
    rows: Sequence[ResultRow], ranks: Sequence[Mapping[str, Any]]
) -> list[SlowestOften | SlowestAt]:
    """The findings of a run: each process that was the slowest at most points once (the most
    often first), then the other points (the largest excess first). Empty for a run without
    per-process times (every run but an nccl-tests `-I` import) or without a clear one."""
    measured = sum(1 for r in rows if r.processes is not None)
    return fold_by_rank(
        slowest(rows, ranks),
        measured,
        lambda rank, named: SlowestOften(rank, named, measured, named[0].device),
    )


def process_name(rank: int, device: Device | None) -> str:
    """`the process of rank 2 (node-b, cuda:0 [0000:1b:00] NVIDIA H100 80GB HBM3)`."""
    if device is None:
        return f"the process of rank {rank}"
    gpu = (device.device or "") + (f" [{device.pci_bus_id}]" if device.pci_bus_id else "")
    parts = [p for p in (device.host, " ".join(x for x in (gpu, device.device_name) if x)) if p]
    return f"the process of rank {rank}" + (f" ({', '.join(parts)})" if parts else "")


def describe(finding: SlowestOften | SlowestAt) -> str:
    """One line for a person."""
    if isinstance(finding, SlowestOften):
        return (
            f"{process_name(finding.rank, finding.device)} was the slowest at "
            f"{len(finding.points)} of {finding.measured} points (median {finding.median_share:.0%} "
            "of the iteration above the next slowest process)"
        )
    return (
        f"{process_name(finding.rank, finding.device)} was the slowest at "
        f"{point_label(finding.row)}: {format_us(finding.excess_us)} per iteration above the "
        f"next slowest process, {finding.share:.0%} of the iteration"
    )


def summary_lines(
    findings: Sequence[SlowestOften | SlowestAt], limit: int | None = None
) -> list[str]:
    """`describe` of each finding, at most `limit` lines, the last then counting the rest."""
    return at_most([describe(f) for f in findings], limit)
