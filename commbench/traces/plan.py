"""The replay plan of a trace (issue 26): what `commbench replay TRACE` would run, per step,
computed without launching anything (`--dry-run` prints `render_plan`).

A row is one kind of call: op, S (the per-rank buffer in bytes, commbench's convention from
`collectives.specs`: for all_gather / gather the whole gathered buffer, for reduce_scatter /
scatter / all_to_all the whole buffer before the split), dtype, the group's size, how many
group instances make it (`groups`) and how many calls they make in all (`calls`); its traffic
is calls x S. Each collective is counted once per group instance (from the calls of the
group's lowest rank), each send once (from its sender); a recv is the other half of a send.

With steps (the trace's step markers), the plan has a section per step, after one for the
calls outside every step (start-up: the broadcast of the parameters); `steps=K` keeps the
first K steps. Without markers it has one section, the whole trace.

`world=N` replays the trace on N ranks (docs/traces.md, "Rescaling"):

- a group spanning every rank of the trace spans the N ranks; an op whose S is split over
  the group (`OpSpec.split`: all_gather, reduce_scatter, all_to_all, gather, scatter) keeps
  its per-rank chunk, so S scales with the group (S/n x N); the others (all_reduce,
  broadcast, reduce, and send/recv) keep S;
- a smaller group (tensor- or pipeline-parallel) keeps its size and its S, and is
  replicated: its instances scale with the world (instances x N / W, at least one);
- a world smaller than a subgroup, or that the subgroups do not tile, is refused.

An all_to_all's S is the busiest member's bytes (its members may move different amounts:
`traces.splits`); one replayed with its recorded uneven splits is a row of its own
(`uneven`, shown as all_to_allv). A group over the whole traced world replayed on another
world keeps no splits (they name the traced ranks): it is replayed even, at the busiest
member's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from commbench.collectives.specs import OPS as SPECS
from commbench.errors import UserError, quoted
from commbench.sizes import format_amount, format_size
from commbench.tables import text_table
from commbench.traces.names import MAX_WORLD, P2P_OPS, no_data, shard
from commbench.traces.records import Call, Trace
from commbench.traces.splits import Exchanges, exchanges

RowKey = tuple[str, int, str, int, bool, bool]
"""What makes a plan row (`PlanRow.key`, `row_key`): op, S, dtype, the group's size on the
replay's world, whether it spans that world, whether it keeps its uneven splits."""
Counted = tuple[Call, str, int]
"""A call a plan counts (`counted`), the group instance it counts for, its group's size."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRow:
    """One kind of call of a plan section."""

    op: str
    size_bytes: int
    """S, per rank (see the module)."""
    dtype: str
    group_size: int
    spans_world: bool
    """The group is every rank (of the replay)."""
    groups: int
    """Group instances making these calls (sender->receiver pairs for a send)."""
    calls: int
    """Calls, over all those instances."""
    uneven: bool = False
    """An all_to_all replayed with its recorded uneven splits (an all_to_allv): S is its
    busiest member's bytes."""

    @property
    def key(self) -> RowKey:
        """What makes this row (`row_key` of each call it counts)."""
        return (
            self.op,
            self.size_bytes,
            self.dtype,
            self.group_size,
            self.spans_world,
            self.uneven,
        )

    @property
    def label(self) -> str:
        """The op as the plan shows it: all_to_allv for an uneven all_to_all."""
        return "all_to_allv" if self.uneven else self.op

    @property
    def traffic_bytes(self) -> int:
        """calls x S, over every group instance."""
        return self.calls * self.size_bytes

    @property
    def rank_bytes(self) -> float:
        """What one member rank moves: its instance's calls x S (the calls are spread over
        `groups` instances, and a rank is in one of them)."""
        return self.traffic_bytes / max(1, self.groups)

    @property
    def replayable(self) -> bool:
        """commbench runs this op (`other` it cannot; a send is its sendrecv)."""
        return self.op in SPECS or self.op in P2P_OPS


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStep:
    """A section of the plan: one step's calls, or the calls outside every step (`step`
    None; the whole trace when it has no step markers)."""

    step: int | None
    rows: tuple[PlanRow, ...]

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.rows)

    @property
    def traffic_bytes(self) -> int:
        return sum(r.traffic_bytes for r in self.rows)

    @property
    def rank_bytes(self) -> float:
        """What a rank moves in this section, counted once however many group instances
        (tensor- or pipeline-parallel copies) make the same calls."""
        return sum(r.rank_bytes for r in self.rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    world_size: int
    """Ranks the replay runs on."""
    traced_world: int
    """Ranks the trace was recorded on."""
    sections: tuple[PlanStep, ...]
    total_steps: int
    """Steps the trace holds (0 without step markers)."""
    notes: tuple[str, ...] = ()

    @property
    def steps(self) -> tuple[PlanStep, ...]:
        """The step sections (not the calls outside the steps)."""
        return tuple(s for s in self.sections if s.step is not None)

    def calls_by_key(self) -> dict[RowKey, int]:
        """The calls of each kind of row (`PlanRow.key`), over every section."""
        calls: dict[RowKey, int] = {}
        for section in self.sections:
            for row in section.rows:
                calls[row.key] = calls.get(row.key, 0) + row.calls
        return calls


def size_bytes(call: Call, n: int) -> int:
    """S of `call` in a group of `n` ranks (see the module)."""
    if shard(call.op) == "in":  # its input is one rank's shard of S
        return call.in_bytes * n
    if call.op == "scatter":
        return call.out_bytes * n
    if no_data(call.op):
        return 0
    if call.op == "recv":
        return call.out_bytes
    if call.op == "other":
        return max(call.in_bytes, call.out_bytes)
    return call.in_bytes


def rescaled(op: str, size: int, n: int, new_n: int) -> int:
    """S of an `op` of S bytes in a group of `n` ranks, on `new_n` ranks (see the module)."""
    spec = SPECS.get(op)
    if spec is None or not spec.split or n == new_n:
        return size
    return size // n * new_n


def trace_exchanges(trace: Trace) -> Exchanges:
    """The all_to_alls of `trace`, matched over their members (`splits.exchanges`)."""
    return exchanges(
        trace.calls,
        trace.world_size,
        recorded=trace.manifest.records_splits,
        where=trace.source,
    )


def sized(call: Call, n: int, new_n: int, table: Exchanges) -> tuple[int, bool]:
    """S of `call`, made in a group of `n` ranks, on `new_n` (`rescaled`), and whether it is
    replayed with its recorded uneven splits. An all_to_all's S is its busiest member's
    bytes, the same on every member (the replay's buffers must agree); its splits are kept
    where the group keeps its ranks (n == new_n)."""
    exchange = table.of(call)
    if exchange is None:
        return rescaled(call.op, size_bytes(call, n), n, new_n), False
    size = rescaled(call.op, exchange.busiest_bytes, n, new_n)
    return size, exchange.uneven and exchange.exact(n == new_n)


def row_key(call: Call, n: int, traced: int, new_world: int, table: Exchanges) -> RowKey:
    """The row that `call`, made in a group of `n` ranks of a trace of `traced`, counts in
    on `new_world` ranks: a group spanning the traced world spans the new one (see the
    module), and S is `sized`."""
    spans = n >= traced and call.op not in P2P_OPS
    new_n = new_world if spans else n
    size, uneven = sized(call, n, new_n, table)
    return (call.op, size, call.dtype, new_n, spans, uneven)


def counted(trace: Trace) -> list[Counted]:
    """(call, the instance it is counted for, its group's size) for every call counted:
    each collective from its group's lowest rank, each send from its sender."""
    world = trace.world_size
    present = sorted(trace.calls)
    out = []
    for rank in present:
        for call in trace.calls[rank]:
            ranks = call.group.ranks
            n = len(ranks) if ranks else world
            if call.op == "recv":
                continue
            if call.op == "send":
                out.append((call, f"{rank}->{call.peer}", 2))
                continue
            lowest = min(ranks) if ranks else present[0]
            if rank == lowest:
                out.append((call, call.group.name, n))
    return out


def build_plan(
    trace: Trace,
    *,
    world: int | None = None,
    steps: int | None = None,
    table: Exchanges | None = None,
) -> Plan:
    """The plan of `trace`, replayed on `world` ranks (the trace's when None), its first
    `steps` steps (all when None); `table`: its `trace_exchanges`, when the caller has it."""
    traced = trace.world_size
    new_world = traced if world is None else world
    if not 1 <= new_world <= MAX_WORLD:
        raise UserError(f"--world {new_world}: expected 1..{MAX_WORLD} ranks")
    if steps is not None and steps < 1:
        raise UserError(f"--steps {steps}: expected at least 1 step")
    calls = counted(trace)
    _check_world(calls, traced, new_world)
    markers = sorted({c.step for c, _, _ in calls if c.step is not None})
    if steps is not None and not markers:
        raise UserError(
            f"--steps {steps}: the trace has no step markers (its job never stepped an "
            "optimizer commbench saw): replay it whole"
        )
    kept = markers if steps is None else markers[:steps]
    per_step: dict[int | None, list[Counted]] = {step: [] for step in [None, *kept]}
    for x in calls:  # one pass, not one per step
        if (into := per_step.get(x[0].step)) is not None:
            into.append(x)
    if table is None:
        table = trace_exchanges(trace)
    sections: list[PlanStep] = []
    for step, of_step in per_step.items():
        rows = _rows(of_step, traced, new_world, table)
        if rows or (step is None and not markers):
            sections.append(PlanStep(step=step, rows=rows))
    notes = []
    if steps is not None and steps > len(markers):
        notes.append(f"--steps {steps}: the trace holds {len(markers)} steps, all replayed")
    if any(not r.replayable for s in sections for r in s.rows):
        notes.append("calls of op `other` (no commbench op) are listed but not replayed")
    kept_calls = (x for of_step in per_step.values() for x in of_step)
    notes += _split_notes(kept_calls, traced, new_world, table)
    return Plan(
        world_size=new_world,
        traced_world=traced,
        sections=tuple(sections),
        total_steps=len(markers),
        notes=tuple(notes),
    )


def _split_notes(
    kept: Iterable[Counted], traced: int, new_world: int, table: Exchanges
) -> list[str]:
    """What the plan says of its all_to_alls' splits: the uneven ones replayed as recorded,
    and why others are replayed even."""
    total = exact = unknown = unmapped = 0
    for call, _, n in kept:
        exchange = table.of(call)
        if call.op != "all_to_all":
            continue
        total += 1
        if exchange is None or not exchange.uneven:
            continue
        spans = n >= traced
        if exchange.exact(not spans or new_world == traced):
            exact += 1
        elif exchange.sends is not None:
            unmapped += 1
        else:
            unknown += 1
    even = "replayed with even splits, at the busiest member's size"
    notes = []
    if exact:
        notes.append(
            f"all_to_allv: {exact} all_to_all call(s) with uneven splits, replayed with "
            "them; the size is the busiest member's bytes"
        )
    if total and not table.recorded:
        notes.append(
            "the trace records no all_to_all splits (written before commbench's trace schema "
            f"2, or by another tool): its {total} all_to_all call(s) are {even}"
        )
    elif unknown:
        notes.append(
            f"{unknown} all_to_all call(s) with uneven sizes lack a member's call in the trace "
            f"(its last calls missing?): {even}"
        )
    if unmapped:
        notes.append(
            f"--world {new_world}: the splits of {unmapped} uneven all_to_all call(s) over "
            f"the whole traced world name its {traced} ranks: {even}"
        )
    return notes


def _check_world(calls: Sequence[Counted], traced: int, new_world: int) -> None:
    if new_world == traced:
        return
    for call, name, n in calls:
        if n >= traced or call.op in P2P_OPS:
            continue
        if new_world < n:
            raise UserError(
                f"--world {new_world} is too small: the trace's group {quoted(name)} has "
                f"{n} ranks (give at least {n})"
            )
        if new_world % n:
            raise UserError(
                f"--world {new_world}: the trace's groups of {n} ranks (such as "
                f"{quoted(name)}) do not tile it: give a multiple of {n}"
            )
    if new_world < 2 and any(c.op in P2P_OPS for c, _, _ in calls):
        raise UserError(f"--world {new_world} is too small: the trace sends between ranks")


def _rows(
    of_step: Sequence[Counted], traced: int, new_world: int, table: Exchanges
) -> tuple[PlanRow, ...]:
    instances: dict[RowKey, set[str]] = {}
    calls: dict[RowKey, int] = {}
    for call, instance, n in of_step:
        key = row_key(call, n, traced, new_world, table)
        instances.setdefault(key, set()).add(instance)
        calls[key] = calls.get(key, 0) + 1
    rows = []
    for key, names in instances.items():
        op, size, dtype, n, spans, uneven = key
        groups = len(names)
        total = calls[key]
        if not spans and new_world != traced:
            scaled = max(1, groups * new_world // traced)
            total = round(total * scaled / groups)
            groups = scaled
        rows.append(
            PlanRow(
                op=op,
                size_bytes=size,
                dtype=dtype,
                group_size=n,
                spans_world=spans,
                groups=groups,
                calls=total,
                uneven=uneven,
            )
        )
    return tuple(rows)


def _amount(nbytes: int) -> str:
    """A total: exact where a short exact form exists (`4M`), else rounded (`4.0M`), never
    a long count of bytes (`4202704B`)."""
    exact = format_size(nbytes)
    return format_amount(nbytes) if exact.endswith("B") and nbytes >= 1024 else exact


def render_plan(plan: Plan) -> str:
    """The plan as text, for `commbench replay --dry-run`."""
    world = f"{plan.world_size} ranks"
    if plan.world_size != plan.traced_world:
        world += f" (traced on {plan.traced_world})"
    shown = len(plan.steps)
    head = f"replay plan: {world}, "
    head += f"{shown} of {plan.total_steps} steps" if plan.total_steps else "no step markers"
    lines = [head]
    for section in plan.sections:
        if section.step is not None:
            title = f"step {section.step}"
        elif plan.total_steps:
            title = "outside the steps (start-up)"
        else:
            title = "the whole trace"
        lines.append("")
        lines.append(
            f"{title}: {section.calls} calls, {_amount(round(section.rank_bytes))} per rank"
        )
        cells = [
            [
                r.label,
                format_size(r.size_bytes),
                r.dtype or "-",
                f"all {r.group_size}" if r.spans_world else str(r.group_size),
                str(r.groups),
                str(r.calls),
                format_size(r.traffic_bytes),
            ]
            for r in section.rows
        ]
        headers = ["op", "size", "dtype", "group", "groups", "calls", "traffic"]
        lines += ["  " + row for row in text_table(headers, cells, left=(0, 2, 3))]
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"
