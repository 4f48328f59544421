"""The checks every trace passes, whoever wrote it (commbench's reader and the readers of
other tools' traces run them): what one rank's calls cannot say alone, the ranks they name
(`check_ranks`) and the groups their ranks must agree on (`check_groups`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from commbench.errors import UserError, quoted
from commbench.ops import derived, traced
from commbench.traces.names import P2P_OPS, no_data
from commbench.traces.records import Call


def describe(call: Call) -> str:
    """`all_gather of 4096 B float32` (for messages)."""
    if no_data(call.op):
        return call.op
    return f"{call.op} of {call.in_bytes} B {call.dtype or 'no data'}"


def _signature(call: Call) -> tuple[str, str, int | None]:
    """What every member of a call passes alike: the op, the dtype, and the size of an op
    whose members all pass the same one (`commbench.ops.Traced.symmetric`), so that a size
    that differs between them is a trace that cannot be replayed."""
    return (call.op, call.dtype, call.in_bytes if call.op in _symmetric() else None)


@derived
def _symmetric() -> frozenset[str]:
    return frozenset(name for name, (_, t) in traced().items() if t.symmetric)


def check_ranks(calls: Mapping[int, Sequence[Call]], world: int, where: str) -> None:
    """Refuse a call naming a rank the trace has not: a group member or a peer past its
    world size, a group listing a rank twice, a send or recv to the rank itself."""
    checked: set[tuple[str, tuple[int, ...]]] = set()
    for rank in sorted(calls):
        for call in calls[rank]:
            group = call.group
            if (group.name, group.ranks) not in checked:
                checked.add((group.name, group.ranks))
                past = [r for r in group.ranks if r >= world]
                if past:
                    raise UserError(
                        f"{where}: group {quoted(group.name)} names rank {past[0]}, past the "
                        f"trace's {world} rank(s)"
                    )
                if len(set(group.ranks)) != len(group.ranks):
                    raise UserError(
                        f"{where}: group {quoted(group.name)} lists a rank twice: "
                        f"{_ranks(group.ranks)}"
                    )
            if call.peer is not None and call.peer >= world:
                raise UserError(
                    f"{where}: rank {rank}'s call {call.seq} ({call.op}) names rank "
                    f"{call.peer}, past the trace's {world} rank(s)"
                )
            if call.op in P2P_OPS and call.peer == rank:
                raise UserError(f"{where}: rank {rank}'s call {call.seq} is a {call.op} to itself")


def lone_peer(rank: int, members: Sequence[int], world: int) -> int | None:
    """The other end of a send or recv whose producer did not name it, where only one rank
    can be: the other member of its group of two, or, for a group counted as the whole
    world, the other rank of a trace of two. None where it cannot be told."""
    if members:
        return members[1 - members.index(rank)] if len(members) == 2 and rank in members else None
    return 1 - rank if world == 2 and rank in (0, 1) else None


def check_groups(calls: Mapping[int, Sequence[Call]], where: str, *, whole: bool = False) -> None:
    """Refuse a trace whose ranks disagree on a group: its ranks, or its sequence of
    collectives (op, dtype, and the size where every member passes the same). Calls are
    matched by `group_seq`, so ranks whose traces cover different windows (a ring buffer)
    are compared where they overlap; in a `whole` trace (every call of every rank: a
    commbench trace marked complete), every member also makes as many of them, or a replay
    would leave the calls of the one that makes more with nothing to pair with."""
    members: dict[str, tuple[tuple[int, ...], int]] = {}
    made: dict[tuple[str, int], tuple[int, Call]] = {}
    counts: dict[str, dict[int, int]] = {}
    for rank in sorted(calls):
        for call in calls[rank]:
            group = call.group
            seen = members.setdefault(group.name, (group.ranks, rank))
            if seen[0] != group.ranks:
                raise UserError(
                    f"{where}: group {quoted(group.name)} has ranks {_ranks(seen[0])} in rank "
                    f"{seen[1]}'s calls but {_ranks(group.ranks)} in rank {rank}'s"
                )
            if call.op in P2P_OPS:
                continue
            made_by = counts.setdefault(group.name, {})
            made_by[rank] = made_by.get(rank, 0) + 1
            if call.group_seq is None:
                continue
            first = made.setdefault((group.name, call.group_seq), (rank, call))
            if _signature(first[1]) != _signature(call):
                raise UserError(
                    f"{where}: group {quoted(group.name)}'s collective {call.group_seq} is "
                    f"{describe(first[1])} on rank {first[0]} but {describe(call)} on rank {rank}"
                )
    if whole:
        for name, made_by in counts.items():
            ranks = members[name][0] or tuple(sorted(calls))  # no ranks said: the whole world
            _check_counts(calls, name, {r: made_by.get(r, 0) for r in ranks}, where)


def _check_counts(
    calls: Mapping[int, Sequence[Call]], name: str, made_by: Mapping[int, int], where: str
) -> None:
    """Refuse group `name` when its members (`made_by`: rank -> its collectives in the
    group) make different numbers of its collectives, naming the member that makes fewest,
    the one that makes most, and the first call of the latter that the former never makes."""
    fewest = min(made_by, key=lambda r: (made_by[r], r))
    most = max(made_by, key=lambda r: (made_by[r], -r))
    if made_by[fewest] == made_by[most]:
        return
    theirs = (c for c in calls.get(most, ()) if c.group.name == name and c.op not in P2P_OPS)
    lacked = next(c for i, c in enumerate(theirs) if i == made_by[fewest])
    raise UserError(
        f"{where}: the members of group {quoted(name)} make different numbers of its "
        f"collectives: rank {fewest} makes {made_by[fewest]}, rank {most} makes "
        f"{made_by[most]}; rank {most}'s call {lacked.seq} ({describe(lacked)}) is the first "
        f"rank {fewest} never makes: a replay would have nothing to pair it with"
    )


def _ranks(ranks: Sequence[int]) -> str:
    if not ranks:
        return "[] (not said)"
    shown_ranks = ",".join(str(r) for r in ranks[:8])
    return f"[{shown_ranks}{',...' if len(ranks) > 8 else ''}]"
