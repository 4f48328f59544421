"""The splits of an all_to_all: how many elements a rank sends to, and receives from, each
member of its group (issue 34). A mixture-of-experts job routes a different number of
tokens to each expert every step (`all_to_all_single(out, inp, output_split_sizes,
input_split_sizes)`): a trace that kept only each rank's total made a replay split it evenly,
so the ranks' sizes disagreed and gloo aborted ("Received data size doesn't match expected
size").

Units: elements of the call's dtype, in group-rank order. torch's split sizes count rows of
the tensor's first dimension; the capture multiplies them by a row's elements, so that a
split means the same whatever the tensor's shape (and `sum(in_splits)` is the call's
`count`). A trace stores a call's splits only when they are not even (`compact`): absent
means torch's even split, total / n each, in a trace of schema 2 or later; a trace of
schema 1, and other tools' traces, recorded none (`Exchanges.recorded` is False).

An `Exchange` is one all_to_all as all its members made it (matched by group and
`group_seq`): its matrix of splits, in the order of its members' sorted global ranks (the
order a replay's groups have), and each member's bytes, the busiest of which is the size a
replay's row names (`busiest_bytes`), with the skew beside it (busiest / mean). Pure Python:
the trace reader checks with it, the plan and the program size with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.errors import UserError, quoted
from commbench.traces.names import ELEMENT_BYTES

if TYPE_CHECKING:
    from commbench.traces.records import Call

Splits = tuple[int, ...]
Matrix = tuple[Splits, ...]
"""sends[i][j]: the elements group rank i sends to group rank j."""

SPLIT_OP = "all_to_all"
"""The one op whose calls carry splits."""


def even(total: int, n: int) -> Splits | None:
    """torch's split of `total` elements over `n` ranks when none is given (total / n each);
    None where `total` is not a multiple of `n` (torch refuses such a call)."""
    if n < 1 or total % n:
        return None
    return (total // n,) * n


def compact(splits: Sequence[int], total: int) -> Splits | None:
    """`splits` as a trace stores them: None (the field left out) when they are the even
    split, which most calls of most jobs are."""
    kept = tuple(splits)
    return None if kept == even(total, len(kept)) else kept


def element_bytes(dtype: str, nbytes: int, count: int) -> int | None:
    """Bytes of one element: its dtype's, or (a dtype not said) the call's bytes over its
    elements; None when neither tells."""
    known = ELEMENT_BYTES.get(dtype)
    if known is not None:
        return known
    return nbytes // count if count and nbytes % count == 0 else None


def check_call(
    splits: Splits | None,
    *,
    where: str,
    side: str,
    op: str,
    nbytes: int,
    element: int | None,
    members: int | None,
) -> None:
    """Refuse a split list (read at `where`, of the call's `side`: input or output) that its
    call cannot hold: splits of another op than all_to_all, more or fewer than its group's
    `members` (None: not known here), or not summing to the side's `nbytes` (in elements of
    `element` bytes; None: not known)."""
    if splits is None:
        return
    if op != SPLIT_OP:
        raise UserError(f"{where}: only an all_to_all has splits; this call is {quoted(op)}")
    if members is not None and len(splits) != members:
        raise UserError(
            f"{where}: {len(splits)} splits for a group of {members} rank(s) (one per member)"
        )
    if element is not None and sum(splits) * element != nbytes:
        raise UserError(
            f"{where}: the splits sum to {sum(splits)} elements ({sum(splits) * element} "
            f"bytes), but the call's {side} is {nbytes} bytes"
        )


def call_element(call: Call) -> int | None:
    """Bytes of one element of `call` (`element_bytes`)."""
    return element_bytes(call.dtype, call.in_bytes, call.count)


def check_splits(call: Call, where: str, members: int | None) -> None:
    """Refuse splits `call` cannot hold (`check_call`): on another op than all_to_all, not
    one per member of a group of `members` ranks (None: not known), or not summing to its
    input's or output's bytes. `where` names the line (`FILE: line 3:`), which the message
    follows with the field."""
    element = call_element(call)
    for name, side, nbytes, value in (
        ("in_splits", "input", call.in_bytes, call.in_splits),
        ("out_splits", "output", call.out_bytes, call.out_splits),
    ):
        check_call(
            value,
            where=f"{where} {name}",
            side=side,
            op=call.op,
            nbytes=nbytes,
            element=element,
            members=members,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """One all_to_all as its members made it."""

    loads: tuple[int, ...]
    """Bytes each member present in the trace holds: the larger of its input and output."""
    sends: Matrix | None
    """The recorded splits (elements), in the order of the members' sorted global ranks;
    None where the trace does not say them (schema 1, another tool's) or lacks a member's
    call."""
    uneven: bool
    """The members' splits are not all even, or their sizes differ: an all_to_allv."""

    @property
    def busiest_bytes(self) -> int:
        """The bytes of the busiest member: the size a replay's row names."""
        return max(self.loads)

    @property
    def skew(self) -> float:
        """The busiest member's bytes over the mean member's (1 when even)."""
        mean = sum(self.loads) / len(self.loads)
        return self.busiest_bytes / mean if mean else 1.0

    def exact(self, mapped: bool) -> bool:
        """Whether a replay issues the recorded splits: the trace has them, and they map
        (`mapped`: the group keeps its ranks, which a group over the whole traced world
        replayed on another world does not)."""
        return self.sends is not None and mapped

    def sent(self, member: int) -> Splits:
        """The elements member `member` (its place among the sorted ranks) sends each."""
        assert self.sends is not None
        return self.sends[member]

    def received(self, member: int) -> Splits:
        """The elements member `member` receives from each."""
        assert self.sends is not None
        return tuple(row[member] for row in self.sends)


Key = tuple[str, int]
"""(group name, group_seq): one collective of one group."""


@dataclass(frozen=True, slots=True)
class Exchanges:
    """Every all_to_all of a trace that its members' `group_seq` match up, by (group name,
    group_seq). A call without group_seq (Chakra's) has none: its own size is used."""

    by_key: Mapping[Key, Exchange] = field(default_factory=dict)
    recorded: bool = True
    """The trace records splits (commbench's, schema 2 or later): a call without them was
    even. False: it says nothing of them, and every all_to_all is replayed even."""

    def of(self, call: Call) -> Exchange | None:
        if call.op != SPLIT_OP or call.group_seq is None:
            return None
        return self.by_key.get((call.group.name, call.group_seq))

    def member(self, call: Call) -> int:
        """`call`'s rank's place among its group's sorted ranks (the replay's group order)."""
        ranks = call.group.ranks
        return sorted(ranks).index(call.rank) if ranks else call.rank


def exchanges(
    calls: Mapping[int, Sequence[Call]], world: int, *, recorded: bool, where: str = ""
) -> Exchanges:
    """The all_to_alls of a trace's `calls` (rank -> its calls), each matched over its
    members. Refuses (UserError, naming `where`) a trace whose members disagree on what they
    exchange: rank i sending rank j other than what j receives from i (its replay would abort
    in the backend, as the job would have)."""
    made: dict[Key, dict[int, Call]] = {}
    for rank in sorted(calls):
        for call in calls[rank]:
            if call.op == SPLIT_OP and call.group_seq is not None:
                made.setdefault((call.group.name, call.group_seq), {})[rank] = call
    out: dict[Key, Exchange] = {}
    for key, members in made.items():
        out[key] = _exchange(key, members, world, recorded, where)
    return Exchanges(by_key=out, recorded=recorded)


def _exchange(
    key: Key, members: Mapping[int, Call], world: int, recorded: bool, where: str
) -> Exchange:
    first = next(iter(members.values()))
    ranks = sorted(first.group.ranks) if first.group.ranks else list(range(world))
    present = [members[r] for r in ranks if r in members]
    loads = tuple(max(c.in_bytes, c.out_bytes) for c in present)
    sizes_differ = len({c.in_bytes for c in present} | {c.out_bytes for c in present}) > 1
    sends = None
    if recorded and len(present) == len(ranks):
        sends = tuple(
            _in_order(c, _recorded(c, key, "input", len(ranks), where), ranks) for c in present
        )
        _check_agree(key, ranks, sends, members, where)
    uneven = sizes_differ or (sends is not None and len({s for row in sends for s in row}) > 1)
    return Exchange(loads=loads, sends=sends, uneven=uneven)


def _recorded(call: Call, key: Key, side: str, n: int, where: str) -> Splits:
    """A member's splits of one side as its trace says them: given, or even (left out),
    which needs a side that n ranks divide (torch refuses any other)."""
    given = call.in_splits if side == "input" else call.out_splits
    if given is not None:
        return given
    size = call_element(call)
    nbytes = call.in_bytes if side == "input" else call.out_bytes
    splits = even(nbytes // size, n) if size and nbytes % size == 0 else None
    if splits is None:
        name = "in_splits" if side == "input" else "out_splits"
        raise UserError(
            f"{where}: group {quoted(key[0])}'s all_to_all {key[1]} on rank {call.rank}: no "
            f"{name} (an even split), but its {side} of {nbytes} bytes does not split evenly "
            f"over {n} ranks"
        )
    return splits


def _in_order(call: Call, splits: Splits, ranks: Sequence[int]) -> Splits:
    """`splits` (in `call`'s group-rank order) in the order of the sorted ranks."""
    traced = call.group.ranks or tuple(range(len(splits)))
    place = {r: i for i, r in enumerate(traced)}
    return tuple(splits[place[r]] for r in ranks)


def _check_agree(
    key: Key, ranks: Sequence[int], sends: Matrix, members: Mapping[int, Call], where: str
) -> None:
    """What each member receives from each other is what that one sends it."""
    for j, r in enumerate(ranks):
        call = members[r]
        got = _in_order(call, _recorded(call, key, "output", len(ranks), where), ranks)
        for i, source in enumerate(ranks):
            if sends[i][j] != got[i]:
                raise UserError(
                    f"{where}: group {quoted(key[0])}'s all_to_all {key[1]}: rank {source} "
                    f"sends rank {r} {sends[i][j]} elements, which receives {got[i]} from it "
                    "(their splits disagree)"
                )
