"""What a replay runs, from a trace and its plan (pure Python: the launcher and every worker
build the same program from the same trace, so they agree without a word).

Two phases (docs/traces.md, "Replaying"):

- **rows**: every distinct (op, S, dtype, group) of the plan over the replayed steps and the
  start-up, timed like a collectives point (`RowSpec`). A row of a subgroup runs on all its
  instances at once; instances that share a rank (a rank in two groups of the same size,
  tensor- and data-parallel) cannot run at once, so the row is timed on the first instances
  that share none (`shapes`), and `groups` says how many the job has.
- **sequence**: each rank replays its own recorded calls step by step (`rank_sequence`).

Groups with `--world N` other than the traced W (plan.py's rules): replay rank r plays
traced rank r % W, in copy k = r // W of the traced job. A group spanning every traced rank
spans the N ranks (the default group); a subgroup G of copy k is G + k x W, and a send's
peer p is p + k x W. A group or a peer that falls partly past N cannot be mapped and is
refused (in one line); one wholly past N belongs to a copy that does not exist.

The work is linear in the trace, whatever N: the subgroups are kept as the trace's own
(`Groups.shapes`) and each copy's is computed when asked for, never listed; only the last
copy can be cut by N, so it alone is checked. Each traced rank's calls are mapped once, as
copy 0 replays them (`traced_sequence`); a replay rank moves them to its copy (`in_copy`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from commbench.collectives.specs import DTYPES
from commbench.errors import UserError, quoted
from commbench.ops import OPS
from commbench.ops import traced as traced_names
from commbench.replay.buckets import Reducer
from commbench.replay.pace import DEFAULT_MAX_GAP_S, Gaps, StepClock, step_clocks
from commbench.results.replay import Elsewhere
from commbench.results.schema import NO_DTYPE
from commbench.traces.names import ELEMENT_BYTES, P2P_OPS
from commbench.traces.plan import (
    Plan,
    RowKey,
    build_plan,
    counted,
    row_key,
    size_bytes,
    sized,
    trace_exchanges,
)
from commbench.traces.records import Call, Trace
from commbench.traces.splits import Exchange, Exchanges, Matrix

WORLD = -1
"""The group index of the default group (every replayed rank)."""
DEFAULT_STEPS = 20
"""Steps a replay runs when `--steps` is not given: a long trace's steps repeat one another,
and a replay of thousands of them would take as long as the job's communication did."""

_SAME_BYTES = {1: "uint8", 2: "float16", 4: "float32", 8: "float64", 16: "float64"}
"""The dtype a call whose dtype commbench does not run (bool, complex64, float8, unknown) is
replayed in: one of the same element size, so its bytes are the recorded ones."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RowSpec:
    """One row of the rows phase: what the worker times and journals."""

    op: str
    """commbench's op (`commbench.ops.OPS`): `sendrecv` for a traced send."""
    size_bytes: int
    """S, rescaled to the replay's world (plan.py)."""
    dtype: str
    """What it runs in (`run_dtype`)."""
    traced_dtype: str
    group_size: int
    spans_world: bool
    shapes: tuple[int, ...]
    """The traced subgroups (indices into `Groups.shapes`) whose instances, in every copy,
    are timed at once: no two share a rank; (WORLD,) for the default group."""
    timed: int
    """Group instances timed at once (`shapes` over the copies)."""
    groups: int
    """Group instances making these calls in the replayed job."""
    calls: int
    """Recorded calls of this row over the replayed steps and the start-up (the plan's)."""
    splits: Matrix | None = None
    """An all_to_allv's: the recorded splits it is timed with (elements each group rank
    sends each, `traces.splits.Exchange.sends`), the first of the calls the row stands for;
    None for every other row (an even all_to_all included)."""
    skew: float | None = None
    """An all_to_allv's: its busiest member's bytes over the mean member's (`size_bytes` is
    the busiest's)."""
    patterns: int = 0
    """An all_to_allv's: the distinct splits among the calls it stands for (one is timed)."""

    @property
    def result_dtype(self) -> str:
        """The dtype its result row names: none for an op that carries no data (a barrier:
        its trace records none, and a float32 shown would be one the job never had), though
        the worker runs it with `dtype` at hand."""
        spec = OPS.get(self.op)
        return NO_DTYPE if spec is not None and spec.latency_only else self.dtype

    @property
    def label(self) -> str:
        """`all_reduce 1M float32 (all 4)`, for notes and the watchdog."""
        where = f"all {self.group_size}" if self.spans_world else f"group of {self.group_size}"
        return f"{self.op} {self.size_bytes} B {self.dtype} ({where})"


def rooted(op: str) -> bool:
    """A traced op with a root (`commbench.ops.OpSpec.rooted`): replayed from the recorded
    one."""
    found = traced_names().get(op)
    return found is not None and found[0].rooted


@dataclass(frozen=True, slots=True, kw_only=True)
class Issue:
    """One call of a rank's replayed sequence."""

    op: str
    """The traced op (`send`, `recv` kept apart)."""
    size_bytes: int
    dtype: str
    group: int
    """Index into `Program.groups`, or WORLD."""
    async_op: bool
    peer: int | None = None
    """The replay rank at the other end of a send or recv, or the root of a rooted op
    (None: the group's first rank)."""
    offset_s: float | None = None
    """When it was issued, in seconds after its step's first call on any rank, its idle
    gaps capped (`StepClock`, for `--pace`); None without recorded times."""
    in_splits: tuple[int, ...] | None = None
    """An all_to_allv's elements sent to each member (in the replay's group order, its
    sorted ranks); None: even (`size_bytes` split n ways)."""
    out_splits: tuple[int, ...] | None = None
    """An all_to_allv's elements received from each member; None: even."""
    batch: int | None = None
    """A send or recv of a batch (`Call.batch`): the consecutive issues of one batch go as
    one `batch_isend_irecv`, one group as the job's went. Where a trace does not mark its
    batches (before schema 3, other tools'), each run of consecutive async sends and
    receives of one group is taken for a batch."""
    busy_s: float = 0.0
    """The CPU time the job's process spent between its rank's previous call and this one,
    recorded on a CPU (`Call.cpu_ns`): `--pace` replays that much of the gap before it as
    computation on the host, the rest idle. 0 without the record, or for a call recorded on
    a GPU (its host's time there was launching the device's work, not doing it)."""


@dataclass(frozen=True, slots=True)
class Groups(Sequence[tuple[int, ...]]):
    """Every subgroup a replay makes, in the order every rank makes them, computed rather
    than listed: traced subgroup s (`shapes[s]`, its sorted traced ranks) in copy k of the
    traced job is the ranks shapes[s] + k x W, and has index `starts[s] + k`. Only the last
    copy may lack a subgroup (its ranks wholly past the world)."""

    traced: int
    """W, the traced world."""
    world: int
    """N, the replay's."""
    shapes: tuple[tuple[int, ...], ...]
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _index: dict[tuple[int, ...], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [0]
        for s in range(len(self.shapes)):
            starts.append(starts[-1] + self.copies(s))
        object.__setattr__(self, "_starts", tuple(starts))
        object.__setattr__(self, "_index", {shape: s for s, shape in enumerate(self.shapes)})

    @property
    def blocks(self) -> int:
        """Copies of the traced job the replay's ranks begin (the last maybe cut)."""
        return -(-self.world // self.traced)

    def copies(self, s: int) -> int:
        """Copies of traced subgroup `s` wholly inside the world."""
        last = self.blocks - 1
        return last + (self.shapes[s][-1] + last * self.traced < self.world)

    def instance(self, s: int, copy: int) -> int | None:
        """The group index of subgroup `s` in copy `copy`; None when that copy has none."""
        return self._starts[s] + copy if 0 <= copy < self.copies(s) else None

    def shape_at(self, index: int) -> int:
        """The traced subgroup whose instance `index` is."""
        if not 0 <= index < len(self):
            raise IndexError(index)
        return bisect.bisect_right(self._starts, index) - 1

    def shape_of(self, ranks: Sequence[int]) -> int:
        """The index of the traced subgroup of `ranks` (in any order)."""
        s = self._index.get(tuple(sorted(ranks)))
        if s is None:
            raise AssertionError("the sequence met a group the program did not make")
        return s

    def mine(self, shapes: Sequence[int], rank: int) -> int | None:
        """The group of replay rank `rank` among the instances of `shapes` (WORLD for the
        default group); None when it is in none of them."""
        if WORLD in shapes:
            return WORLD
        traced_rank, copy = rank % self.traced, rank // self.traced
        for s in shapes:
            if traced_rank in self.shapes[s]:
                return self.instance(s, copy)
        return None

    def total(self, shapes: Iterable[int]) -> int:
        """Group instances of `shapes` over every copy (1 for the default group)."""
        return sum(1 if s == WORLD else self.copies(s) for s in shapes)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int) -> tuple[int, ...]:  # type: ignore[override]
        if index < 0:
            index += len(self)
        s = self.shape_at(index)
        copy = index - self._starts[s]
        return tuple(r + copy * self.traced for r in self.shapes[s])

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        for s, shape in enumerate(self.shapes):
            for copy in range(self.copies(s)):
                yield tuple(r + copy * self.traced for r in shape)

    def payload(self) -> dict[str, object]:
        return {
            "traced": self.traced,
            "world": self.world,
            "shapes": [list(s) for s in self.shapes],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    world: int
    traced_world: int
    groups: Groups
    """Every subgroup the replay makes, in the order every rank makes them."""
    rows: tuple[RowSpec, ...]
    steps: tuple[int | None, ...]
    """The traced steps the sequence replays; (None,) for a trace without step markers
    (its whole trace is one step)."""
    total_steps: int
    recorded_step_s: tuple[float | None, ...]
    """Per replayed step, the recorded communication time (`recorded_step_times`)."""
    recorded_aligned_step_s: tuple[float | None, ...] = ()
    """The same, each collective counted from its last member's issue (`aligned`)."""
    clocks: tuple[StepClock | None, ...] = ()
    """Per replayed step, its recorded time line (None: no recorded times)."""
    gaps: Gaps = field(default_factory=lambda: Gaps(max_gap_s=DEFAULT_MAX_GAP_S))
    notes: tuple[str, ...]
    plan: Plan
    elsewhere: Elsewhere | None = None
    """The bucket advisor's caps predicted on another fabric (`--bw`, `--latency`)."""
    reducer: Reducer = field(default_factory=lambda: Reducer(parameters=()))
    """The recorded job's DDP, for the bucket advisor (`Reducer.of`)."""
    exchanges: Exchanges = field(default_factory=Exchanges)
    """The trace's all_to_alls over their members: their sizes and splits."""


def run_dtype(dtype: str) -> str:
    """The dtype a traced call is replayed in (`_SAME_BYTES`)."""
    if dtype in DTYPES:
        return dtype
    return _SAME_BYTES.get(ELEMENT_BYTES.get(dtype, 4), "float32")


StepCalls = Mapping[int, Sequence[Call]]
"""One step's calls: traced rank -> its calls in the step, in issue order."""


def build_program(
    trace: Trace,
    *,
    world: int | None = None,
    steps: int | None = None,
    max_gap_s: float = DEFAULT_MAX_GAP_S,
    pace: bool = False,
) -> Program:
    """The program of `trace` on `world` ranks (the trace's when None), its first `steps`
    steps (DEFAULT_STEPS at most when None), its paced gaps capped at `max_gap_s` (`pace`:
    the notes say what the cap did)."""
    markers = sorted({c.step for cs in trace.calls.values() for c in cs if c.step is not None})
    notes: list[str] = trace.notes()
    table = trace_exchanges(trace)
    plan = build_plan(trace, world=world, steps=_wanted(steps, markers, notes), table=table)
    kept: tuple[int | None, ...] = tuple(s.step for s in plan.steps) if markers else (None,)
    by_step = calls_by_step(trace, kept)
    shapes = _Shapes(trace.world_size, plan.world_size)
    made, skipped = _made(trace, plan, {None, *kept}, table, shapes)
    _check_replayed(by_step, trace.world_size, plan.world_size, shapes)
    groups = shapes.groups()
    rows = _row_specs(made, plan.calls_by_key(), groups)
    notes += _row_notes(rows, skipped)
    clocks, gaps = step_clocks(by_step, kept, max_gap_s)
    recorded, said = recorded_step_times(trace, kept, by_step=by_step)
    aligned, _ = recorded_step_times(trace, kept, aligned=True, by_step=by_step)
    return Program(
        world=plan.world_size,
        traced_world=trace.world_size,
        groups=groups,
        rows=rows,
        steps=kept,
        total_steps=len(markers),
        recorded_step_s=tuple(recorded),
        recorded_aligned_step_s=tuple(aligned),
        clocks=tuple(clocks),
        gaps=gaps,
        notes=(*notes, *plan.notes, *said, *(gaps.notes() if pace else ())),
        plan=plan,
        reducer=Reducer.of(trace),
        exchanges=table,
    )


def _wanted(steps: int | None, markers: Sequence[int], notes: list[str]) -> int | None:
    """The steps the plan keeps: `steps`, or DEFAULT_STEPS of a longer trace (said in
    `notes`)."""
    if steps is None and len(markers) > DEFAULT_STEPS:
        notes.append(
            f"the trace holds {len(markers)} steps: the first {DEFAULT_STEPS} are replayed "
            "(--steps K for more)"
        )
        return DEFAULT_STEPS
    return steps


@dataclass(slots=True)
class _Made:
    """What the calls of one plan row make: the subgroups they run in (indices into
    `Groups.shapes`, or WORLD), and for an all_to_allv the exchange its row is timed with
    (its first call's) and the distinct splits among them."""

    shapes: set[int] = field(default_factory=set)
    exchange: Exchange | None = None
    patterns: set[Matrix | None] = field(default_factory=set)


def _made(
    trace: Trace, plan: Plan, replayed: set[int | None], table: Exchanges, shapes: _Shapes
) -> tuple[dict[RowKey, _Made], set[str]]:
    """Each plan row's `_Made`, from the calls the plan counts (`counted`) in the `replayed`
    steps and the start-up, and the names of the calls commbench has no op for."""
    made: dict[RowKey, _Made] = {}
    skipped: set[str] = set()
    for call, _, n in counted(trace):
        if call.step not in replayed:
            continue
        if call.op == "other":
            skipped.add(call.name)
            continue
        key = row_key(call, n, trace.world_size, plan.world_size, table)
        _, _, _, _, spans, uneven = key
        row = made.setdefault(key, _Made())
        exchange = table.of(call)
        if uneven and exchange is not None:
            if row.exchange is None:  # the row's first call: its splits are timed
                row.exchange = exchange
            row.patterns.add(exchange.sends)
        if spans:
            row.shapes.add(WORLD)
        elif call.op == "send":
            row.shapes.add(shapes.add((call.rank, _peer(call)), "send between ranks"))
        else:
            row.shapes.add(shapes.add(call.group.ranks, f"group {quoted(call.group.name)}"))
    return made, skipped


def _check_replayed(
    by_step: Mapping[int | None, StepCalls], traced: int, new_world: int, shapes: _Shapes
) -> None:
    """Refuse now, not in a worker, a replayed call that does not map: a send without its
    receive, a group or peer partly past the new world."""
    for step, per_rank in by_step.items():
        _check_pairs(per_rank, step)
        for rank in range(min(traced, new_world)):
            for call in per_rank.get(rank, ()):
                _check_maps(call, traced, shapes)


def _row_specs(
    made: Mapping[RowKey, _Made], calls: Mapping[RowKey, int], groups: Groups
) -> tuple[RowSpec, ...]:
    """The rows phase: a `RowSpec` per plan row, its calls the plan's (`calls`)."""
    rows = []
    for key, row in made.items():
        op, size, dtype, n, spans, _ = key
        timed = _disjoint(sorted(row.shapes), groups)
        exchange = row.exchange
        rows.append(
            RowSpec(
                op="sendrecv" if op == "send" else op,
                size_bytes=size,
                dtype=run_dtype(dtype),
                traced_dtype=dtype,
                group_size=n,
                spans_world=spans,
                shapes=timed,
                timed=groups.total(timed),
                groups=groups.total(row.shapes),
                calls=calls.get(key, 0),
                splits=exchange.sends if exchange is not None else None,
                skew=exchange.skew if exchange is not None else None,
                patterns=len(row.patterns),
            )
        )
    return tuple(rows)


def _row_notes(rows: Sequence[RowSpec], skipped: set[str]) -> list[str]:
    """What the rows leave out (calls of no commbench op) or replay otherwise (a dtype
    commbench does not run)."""
    notes = []
    if skipped:
        names = ", ".join(sorted(skipped)[:5])
        notes.append(f"calls commbench has no op for are not replayed: {names}")
    odd = sorted({r.traced_dtype for r in rows if r.traced_dtype not in ("", r.dtype)})
    if odd:
        notes.append(
            f"dtype(s) {', '.join(odd)} replayed in a dtype of the same element size "
            "(commbench runs " + ", ".join(DTYPES) + ")"
        )
    return notes


def calls_by_step(trace: Trace, steps: Sequence[int | None]) -> dict[int | None, StepCalls]:
    """Each of `steps`' calls, per traced rank, in one pass over the trace; step None (a
    trace without step markers) holds every call."""
    out: dict[int | None, dict[int, list[Call]]] = {step: {} for step in steps}
    whole = out[None] if list(steps) == [None] else None
    for rank, calls in trace.calls.items():
        for c in calls:
            into = whole if whole is not None else out.get(c.step) if c.step is not None else None
            if into is not None:
                into.setdefault(rank, []).append(c)
    return dict(out)


def _peer(call: Call) -> int:
    if call.peer is None:
        raise UserError(f"call {call.seq} of rank {call.rank}: a {call.op} without its peer")
    return call.peer


MAX_NAMED = 3
"""Calls a refusal names before it counts the rest."""


def _check_pairs(per_rank: StepCalls, step: int | None) -> None:
    """Refuse a step whose sends and receives do not pair up between each two ranks: its
    replay would wait for ever on the one left over (a trace cut in that step, a window of a
    ring buffer). A send pairs with its peer's receive in their order (c10d matches the nth
    send from a to b with b's nth receive from a), so those left over are the side's last,
    and the refusal names them: rank, seq, op, peer and bytes, enough to find them in the
    rank files."""
    sent: dict[tuple[int, int], list[Call]] = {}
    received: dict[tuple[int, int], list[Call]] = {}
    for rank, calls in per_rank.items():
        for c in calls:
            if c.op == "send" and c.peer is not None:
                sent.setdefault((rank, c.peer), []).append(c)
            elif c.op == "recv" and c.peer is not None:
                received.setdefault((c.peer, rank), []).append(c)
    for pair in sorted(set(sent) | set(received)):
        sends, recvs = sent.get(pair, []), received.get(pair, [])
        if len(sends) != len(recvs):
            where = "the trace" if step is None else f"step {step}"
            longer, shorter = (sends, recvs) if len(sends) > len(recvs) else (recvs, sends)
            left = longer[len(shorter) :]
            named = ", ".join(_named(c) for c in left[:MAX_NAMED])
            more = f" and {len(left) - MAX_NAMED} more" if len(left) > MAX_NAMED else ""
            raise UserError(
                f"{where}: rank {pair[0]} sends {len(sends)} time(s) to rank {pair[1]}, which "
                f"receives {len(recvs)}; left over: {named}{more}: a replay would wait for "
                "ever on them (a trace cut in that step? --steps K replays the steps before it)"
            )


def _named(call: Call) -> str:
    """`rank 0's call 12 (send to rank 1, 512 B)`: a call as a refusal names it."""
    way = "to" if call.op == "send" else "from"
    nbytes = call.in_bytes if call.op == "send" else call.out_bytes
    return f"rank {call.rank}'s call {call.seq} ({call.op} {way} rank {call.peer}, {nbytes} B)"


class _Shapes:
    """The traced subgroups a program makes, collected as the calls name them; a subgroup
    (or a send's pair) that the last copy of the traced job would cut is refused."""

    def __init__(self, traced: int, world: int) -> None:
        self.traced = traced
        self.world = world
        self.last = (-(-world // traced) - 1) * traced
        """The first rank of the last copy: the only one the world may cut."""
        self.shapes: list[tuple[int, ...]] = []
        self._index: dict[tuple[int, ...], int] = {}

    def check(self, ranks: Sequence[int], what: str) -> tuple[int, ...]:
        key = tuple(sorted(ranks))
        if key[0] + self.last < self.world <= key[-1] + self.last:
            mapped = [r + self.last for r in ranks]
            raise UserError(
                f"--world {self.world}: the trace's {what} [{','.join(map(str, ranks))}] "
                f"maps onto ranks [{','.join(map(str, mapped))}], past the {self.world} "
                "replayed: give a multiple of the traced world size"
            )
        return key

    def add(self, ranks: Sequence[int], what: str) -> int:
        key = tuple(sorted(ranks))
        s = self._index.get(key)
        if s is None:
            self.check(ranks, what)
            s = self._index[key] = len(self.shapes)
            self.shapes.append(key)
        return s

    def groups(self) -> Groups:
        return Groups(self.traced, self.world, tuple(self.shapes))


def _check_maps(call: Call, traced: int, shapes: _Shapes) -> None:
    """Refuse a replayed call that cannot be mapped (a send or recv without its peer, a
    group the world cuts); its subgroup is made (the sequence may meet one no row counted)."""
    if call.op == "other":
        return
    if call.op in P2P_OPS:
        shapes.check((call.rank, _peer(call)), f"{call.op} between ranks")
    elif call.group.ranks and len(call.group.ranks) < traced:
        shapes.add(call.group.ranks, f"group {quoted(call.group.name)}")


def map_call(call: Call, groups: Groups, table: Exchanges) -> Issue | None:
    """`call` as its traced rank issues it in the replay (copy 0 of the traced job; `in_copy`
    moves it to another); None for `other`. Work per call, never per rank of the world. An
    all_to_all is issued at its busiest member's size (`plan.sized`), with this rank's
    recorded splits where it keeps them (`table`)."""
    if call.op == "other":
        return None
    traced = groups.traced
    ranks = call.group.ranks
    n = len(ranks) if ranks else traced
    peer = None
    uneven = False
    if call.op in P2P_OPS:
        group, peer, size = WORLD, _peer(call), size_bytes(call, 2)
    elif n >= traced:
        group = WORLD
        size, uneven = sized(call, n, groups.world, table)
        if rooted(call.op) and call.peer is not None:
            peer = call.peer  # a world group's root is the same rank of the replay
    else:
        index = groups.instance(groups.shape_of(ranks), 0)
        assert index is not None  # this rank is replayed, so is its group's copy
        group = index
        size, uneven = sized(call, n, n, table)
        if rooted(call.op) and call.peer is not None and call.peer in ranks:
            peer = call.peer  # the root of this rank's instance
    in_splits = out_splits = None
    exchange = table.of(call) if uneven else None
    if exchange is not None:
        member = table.member(call)
        in_splits, out_splits = exchange.sent(member), exchange.received(member)
    return Issue(
        op=call.op,
        size_bytes=size,
        dtype=run_dtype(call.dtype),
        group=group,
        async_op=call.async_op,
        peer=peer,
        in_splits=in_splits,
        out_splits=out_splits,
    )


def in_copy(issue: Issue, copy: int, groups: Groups) -> Issue:
    """`issue` of copy 0 (`map_call`) as the same traced rank issues it in copy `copy`: its
    subgroup is that copy's, and a peer or a subgroup's root moves with it (copy x W); the
    default group and its root stay."""
    if copy == 0:
        return issue
    group, peer = issue.group, issue.peer
    if group != WORLD:
        index = groups.instance(groups.shape_at(group), copy)
        assert index is not None  # this rank is replayed, so is its group's copy
        group = index
    if peer is not None and (issue.op in P2P_OPS or issue.group != WORLD):
        peer += copy * groups.traced
    return replace(issue, group=group, peer=peer)


def _disjoint(found: Sequence[int], groups: Groups) -> tuple[int, ...]:
    """The first subgroups that share no rank: their instances are timed at once (every
    copy of the traced job has the same subgroups, so what holds in one holds in all)."""
    if WORLD in found:
        return (WORLD,)
    taken: set[int] = set()
    out = []
    for s in found:
        ranks = set(groups.shapes[s])
        if not ranks & taken:
            out.append(s)
            taken |= ranks
    return tuple(out)


def traced_sequence(trace: Trace, program: Program, traced_rank: int) -> list[list[Issue]]:
    """Traced rank `traced_rank`'s calls as copy 0 replays them, per replayed step, in one
    pass over its calls: every copy's are these, moved (`in_copy`)."""
    whole = program.steps == (None,)
    position = {step: i for i, step in enumerate(program.steps)}
    out: list[list[Issue]] = [[] for _ in program.steps]
    cpu_before: int | None = None
    for call in trace.calls[traced_rank]:
        busy_ns, cpu_before = _busy_ns(call, cpu_before), call.cpu_ns
        i = 0 if whole else position.get(call.step) if call.step is not None else None
        if i is None:
            continue
        issue = map_call(call, program.groups, program.exchanges)
        if issue is None:
            continue
        clock = program.clocks[i] if program.clocks else None
        if clock is not None and call.issued_ns:
            issue = replace(issue, offset_s=clock.offset_s(call.issued_ns), busy_s=busy_ns / 1e9)
        if call.batch is not None and issue.op in P2P_OPS:
            issue = replace(issue, batch=call.batch)
        out[i].append(issue)
    if not trace.manifest.records_batches:
        out = [_guess_batches(step) for step in out]
    return out


def _guess_batches(issues: list[Issue]) -> list[Issue]:
    """A trace that does not mark its batches: each run of two or more consecutive async
    sends and receives of one group (a `batch_isend_irecv`'s, a pipeline's) is one batch,
    numbered by its first issue's place in the step."""
    out = list(issues)
    i = 0
    while i < len(out):
        j = i
        while (
            j < len(out)
            and out[j].op in P2P_OPS
            and out[j].async_op
            and out[j].peer is not None
            and out[j].group == out[i].group
        ):
            j += 1
        if j - i > 1:
            out[i:j] = [replace(issue, batch=i) for issue in out[i:j]]
        i = max(j, i + 1)
    return out


def _busy_ns(call: Call, cpu_before: int | None) -> int:
    """The process CPU time recorded between the rank's previous call and `call` (0 where
    either has none, the clock went back, or `call` ran on a GPU)."""
    if cpu_before is None or call.cpu_ns is None or not call.device.startswith("cpu"):
        return 0
    return max(0, call.cpu_ns - cpu_before)


def rank_sequence(trace: Trace, program: Program, rank: int) -> list[list[Issue]]:
    """Replay rank `rank`'s calls, per replayed step: traced rank rank % W's, in copy
    rank // W."""
    copy = rank // program.traced_world
    steps = traced_sequence(trace, program, rank % program.traced_world)
    return [[in_copy(i, copy, program.groups) for i in step] for step in steps]


def recorded_step_times(
    trace: Trace,
    steps: Sequence[int | None],
    *,
    aligned: bool = False,
    by_step: Mapping[int | None, StepCalls] | None = None,
) -> tuple[list[float | None], list[str]]:
    """Per step, the recorded communication time in seconds: per rank, the time covered by
    the union of its calls' [issued_ns, completed_ns] intervals, then the maximum over ranks;
    None for a step whose calls carry no times (another tool's trace). A call never seen
    complete counts as zero-length, and a note says how many did. Step None: every call.

    `aligned`: each collective's interval starts when the last member of its group issued
    it (matched by group and `group_seq`), not when this rank did: the time a rank spent
    waiting for a later peer is left out, which a replay (whose ranks start each step
    together) does not have. The ranks' clocks must agree: one host, or hosts in NTP sync.
    `by_step`: `calls_by_step(trace, steps)`, when the caller has it."""
    if by_step is None:
        by_step = calls_by_step(trace, steps)
    last_issue: dict[tuple[str, int], int] = {}
    if aligned:
        for calls in trace.calls.values():
            for c in calls:
                if c.group_seq is not None and c.issued_ns:
                    key = (c.group.name, c.group_seq)
                    last_issue[key] = max(last_issue.get(key, 0), c.issued_ns)
    out: list[float | None] = []
    open_calls = 0
    for step in steps:
        worst: float | None = None
        for mine in by_step[step].values():
            if not any(c.issued_ns for c in mine):
                continue
            spans = []
            for c in mine:
                start = c.issued_ns
                if c.group_seq is not None:
                    start = max(start, last_issue.get((c.group.name, c.group_seq), 0))
                end = c.completed_ns if c.completed_ns is not None else c.issued_ns
                open_calls += c.completed_ns is None
                spans.append((start, max(end, start)))
            seconds = covered(spans) / 1e9
            worst = seconds if worst is None else max(worst, seconds)
        out.append(worst)
    notes = []
    if open_calls and not aligned:
        notes.append(
            f"{open_calls} recorded call(s) were never seen complete: counted as zero-length "
            "in the recorded communication time"
        )
    return out, notes


def covered(spans: Iterable[Sequence[float]]) -> float:
    """What the union of the [start, end] intervals covers (the recording's nanoseconds and
    the replay's seconds alike)."""
    total, end, start = 0.0, None, 0.0
    for a, b in sorted((s[0], s[1]) for s in spans):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    return total + (end - start if end is not None else 0.0)
