"""Which rank the others waited for, point by point and across a run, with its host named.

Each collectives row with per-rank times (`ResultRow.ranks`) may name a straggler
(`ResultRow.straggler`); this module puts the host on it, from the run's `context.ranks`, and
folds a rank that held the others up at most points into one finding, because a rank that is
late everywhere is one problem (its host, its NIC, its GPU's clocks), not fourteen:

    points = waited_for(run.rows, run.context.ranks)        # also run.stragglers()
    for finding in summarise(run.rows, run.context.ranks):  # also run.straggler_summary()
        print(describe(finding))                              # RankWaits first, then WaitedFor
    # rank 1 on n3 was waited for at 12 of 14 points (median 22% of the iteration)
    # rank 5 on n3: the others waited 1.8 ms for it at all_reduce 16M, 41% of the iteration
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from commbench.results.ranks import RankEntry
from commbench.results.schema import ResultRow
from commbench.sizes import format_size

DOMINANT_POINTS = 3
"""A rank named at this many points or more ..."""
DOMINANT_SHARE = 0.5
"""... and at this share of the points with per-rank times or more is reported once, as a
`RankWaits`, rather than point by point."""


@dataclass(frozen=True, slots=True)
class RankAt:
    """One point at which one rank stood out: the others waited for it (`WaitedFor`), or its
    process was the slowest (`slow_processes.SlowestAt`)."""

    row: ResultRow
    """The point."""
    rank: int
    """The global rank."""
    share: float
    """How far it stood out, as a share of the point's median iteration time."""


P = TypeVar("P", bound=RankAt)
F = TypeVar("F")


@dataclass(frozen=True, slots=True)
class RankOften(Generic[P]):
    """One rank that stood out at many points of a run (`DOMINANT_POINTS`)."""

    rank: int
    points: tuple[P, ...]
    """The points at which it stood out, in the order measured."""
    measured: int
    """The run's points with per-rank times: what `points` is out of."""

    @property
    def median_share(self) -> float:
        """The median, over its points, of its share of the iteration."""
        return statistics.median(p.share for p in self.points)


@dataclass(frozen=True, slots=True)
class WaitedFor(RankAt):
    """One point at which the others waited for one rank (`ResultRow.straggler`, placed)."""

    host: str | None
    """Its host, as its worker reported it; None when the run's context does not say."""
    wait_us: float
    """About how long the others waited for it per iteration, microseconds."""


@dataclass(frozen=True, slots=True)
class RankWaits(RankOften[WaitedFor]):
    """One rank the others waited for at many points of a run (`DOMINANT_POINTS`)."""

    host: str | None

    @property
    def median_wait_us(self) -> float:
        return statistics.median(p.wait_us for p in self.points)


def hosts_by_rank(ranks: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Global rank -> host from a run's `context.ranks` (what each worker reported); an item
    that does not say both is left out rather than trusted."""
    hosts: dict[int, str] = {}
    for entry in map(RankEntry.read, ranks):
        if entry.rank is not None and entry.host is not None:
            hosts[entry.rank] = entry.host
    return hosts


def waited_for(rows: Sequence[ResultRow], ranks: Sequence[Mapping[str, Any]]) -> list[WaitedFor]:
    """Every point at which the others waited a meaningful time for one rank, in the order
    measured; `ranks` is the run's `context.ranks`, which names the hosts."""
    hosts = hosts_by_rank(ranks)
    return [
        WaitedFor(row, s.rank, s.share, hosts.get(s.rank), s.wait_us)
        for row in rows
        if (s := row.straggler) is not None
    ]


def summarise(
    rows: Sequence[ResultRow], ranks: Sequence[Mapping[str, Any]]
) -> list[RankWaits | WaitedFor]:
    """The findings of a run, most telling first: each rank named at most of the points
    (`DOMINANT_POINTS`, `DOMINANT_SHARE`) once, the ranks named most often first; then the
    other points, the longest wait (as a share of the iteration) first. Empty when no row has
    per-rank times or nobody waited."""
    measured = sum(1 for r in rows if r.ranks is not None)
    return fold_by_rank(
        waited_for(rows, ranks),
        measured,
        lambda rank, named: RankWaits(rank, named, measured, named[0].host),
    )


def fold_by_rank(
    points: Sequence[P], measured: int, fold: Callable[[int, tuple[P, ...]], F]
) -> list[F | P]:
    """A run's findings, most telling first: each rank named at most of the `measured` points
    (`DOMINANT_POINTS`, `DOMINANT_SHARE`) once, as `fold(rank, its points)`, the ranks named
    most often first; then the other points, the largest share first. The one grouping of
    both per-rank analyses (whom the others waited for, which process was slowest)."""
    by_rank: dict[int, list[P]] = {}
    for point in points:
        by_rank.setdefault(point.rank, []).append(point)
    dominant = sorted(
        (
            (rank, tuple(named))
            for rank, named in by_rank.items()
            if len(named) >= DOMINANT_POINTS and len(named) >= DOMINANT_SHARE * measured
        ),
        key=lambda item: (-len(item[1]), item[0]),
    )
    folded = {rank for rank, _ in dominant}
    rest = sorted((p for p in points if p.rank not in folded), key=lambda p: -p.share)
    return [*(fold(rank, named) for rank, named in dominant), *rest]


def point_label(row: ResultRow) -> str:
    """`all_reduce 16M`, `ring 1M` (a strategy's row), `barrier`."""
    name = row.strategy or row.op
    return name if row.op == "barrier" else f"{name} {format_size(row.size_bytes)}"


def format_us(us: float) -> str:
    """A duration for prose, three significant digits: `850 ns`, `12.3 us`, `1.8 ms`, `2.05 s`."""
    for unit, scale in (("s", 1e6), ("ms", 1e3), ("us", 1.0)):
        if us >= scale:
            return f"{us / scale:.3g} {unit}"
    return f"{us * 1e3:.3g} ns"


def _who(rank: int, host: str | None) -> str:
    return f"rank {rank} on {host}" if host else f"rank {rank}"


def describe(finding: RankWaits | WaitedFor) -> str:
    """One line for a person."""
    if isinstance(finding, RankWaits):
        return (
            f"{_who(finding.rank, finding.host)} was waited for at {len(finding.points)} of "
            f"{finding.measured} points (median {format_us(finding.median_wait_us)}, "
            f"{finding.median_share:.0%} of the iteration)"
        )
    return (
        f"{_who(finding.rank, finding.host)}: the others waited {format_us(finding.wait_us)} "
        f"for it at {point_label(finding.row)}, {finding.share:.0%} of the iteration"
    )


def summary_lines(findings: Sequence[RankWaits | WaitedFor], limit: int | None = None) -> list[str]:
    """`describe` of each finding (of `summarise`), at most `limit` lines, the last of which
    then counts the findings left out."""
    return at_most([describe(f) for f in findings], limit)


def at_most(lines: list[str], limit: int | None) -> list[str]:
    """At most `limit` of `lines` (None: all), the last then counting the rest: the summary
    of both per-rank analyses."""
    if limit is not None and len(lines) > max(1, limit):
        kept = max(1, limit) - 1
        lines = [*lines[:kept], f"... and {len(lines) - kept} more (`commbench report` lists them)"]
    return lines
