"""What a replay runs, from a trace and its plan (pure Python: the launcher and every worker
build the same program from the same trace, so they agree without a word).

Two phases (docs/traces.md, "Replaying"):

- **rows**: every distinct (op, S, dtype, group) of the plan over the replayed steps and the
  start-up, timed like a collectives point (`RowSpec`). A row of a subgroup runs on all its
  instances at once; instances that share a rank (a rank in two groups of the same size,
  tensor- and data-parallel) cannot run at once, so the row is timed on the first instances
  that share none (`instances`), and `groups` says how many the job has.
- **sequence**: each rank replays its own recorded calls step by step (`rank_sequence`).

Groups with `--world N` other than the traced W (plan.py's rules): replay rank r plays
traced rank r % W, in copy k = r // W of the traced job. A group spanning every traced rank
spans the N ranks (the default group); a subgroup G of copy k is G + k x W, and a send's
peer p is p + k x W. A group or a peer that falls partly past N cannot be mapped and is
refused (in one line); one wholly past N belongs to a copy that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from commbench.collectives.specs import DTYPES
from commbench.errors import UserError, quoted
from commbench.results.replay import Elsewhere
from commbench.traces.names import ELEMENT_BYTES, P2P_OPS
from commbench.traces.plan import Plan, build_plan, rescaled, size_bytes
from commbench.traces.trace import Call, Trace

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
    """commbench's op (`collectives.specs.OPS`): `sendrecv` for a traced send."""
    size_bytes: int
    """S, rescaled to the replay's world (plan.py)."""
    dtype: str
    """What it runs in (`run_dtype`)."""
    traced_dtype: str
    group_size: int
    spans_world: bool
    instances: tuple[int, ...]
    """Indices into `Program.groups` (or WORLD) timed at once: no two share a rank."""
    groups: int
    """Group instances making these calls in the replayed job."""
    calls: int
    """Recorded calls of this row over the replayed steps and the start-up (the plan's)."""

    @property
    def label(self) -> str:
        """`all_reduce 1M float32 (all 4)`, for notes and the watchdog."""
        where = f"all {self.group_size}" if self.spans_world else f"group of {self.group_size}"
        return f"{self.op} {self.size_bytes} B {self.dtype} ({where})"


ROOTED = ("broadcast", "reduce", "gather", "scatter")
"""Ops with a root: replayed from the recorded one."""


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
    """When it was issued, in seconds after its step's first call on any rank (`--pace`);
    None without recorded times."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    world: int
    traced_world: int
    groups: tuple[tuple[int, ...], ...]
    """Every subgroup the replay makes, in the order every rank makes them (sorted ranks)."""
    rows: tuple[RowSpec, ...]
    steps: tuple[int | None, ...]
    """The traced steps the sequence replays; (None,) for a trace without step markers
    (its whole trace is one step)."""
    total_steps: int
    recorded_step_s: tuple[float | None, ...]
    """Per replayed step, the recorded communication time (`recorded_step_times`)."""
    recorded_aligned_step_s: tuple[float | None, ...] = ()
    """The same, each collective counted from its last member's issue (`aligned`)."""
    notes: tuple[str, ...]
    plan: Plan
    elsewhere: Elsewhere | None = None
    """The bucket advisor's caps predicted on another fabric (`--bw`, `--latency`)."""


def run_dtype(dtype: str) -> str:
    """The dtype a traced call is replayed in (`_SAME_BYTES`)."""
    if dtype in DTYPES:
        return dtype
    return _SAME_BYTES.get(ELEMENT_BYTES.get(dtype, 4), "float32")


def build_program(trace: Trace, *, world: int | None = None, steps: int | None = None) -> Program:
    """The program of `trace` on `world` ranks (the trace's when None), its first `steps`
    steps (DEFAULT_STEPS at most when None)."""
    traced = trace.world_size
    markers = sorted({c.step for cs in trace.calls.values() for c in cs if c.step is not None})
    notes: list[str] = trace.notes()
    wanted = steps
    if steps is None and len(markers) > DEFAULT_STEPS:
        wanted = DEFAULT_STEPS
        notes.append(
            f"the trace holds {len(markers)} steps: the first {DEFAULT_STEPS} are replayed "
            "(--steps K for more)"
        )
    plan = build_plan(trace, world=world, steps=wanted)
    new_world = plan.world_size
    kept: tuple[int | None, ...] = tuple(s.step for s in plan.steps) if markers else (None,)
    replayed = {None, *kept}
    mapper = _Mapper(traced, new_world)
    instances: dict[tuple[str, int, str, int, bool], set[int]] = {}
    skipped: set[str] = set()
    for call, n in _counted(trace, replayed):
        if call.op == "other":
            skipped.add(call.name)
            continue
        spans = n >= traced and call.op not in P2P_OPS
        new_n = new_world if spans else n
        size = rescaled(call.op, size_bytes(call, n), n, new_n)
        key = (call.op, size, call.dtype, new_n, spans)
        found = instances.setdefault(key, set())
        if spans:
            found.add(WORLD)
            continue
        for block in range(mapper.blocks):
            index = mapper.instance(call, block)
            if index is not None:
                found.add(index)
    calls: dict[tuple[str, int, str, int, bool], int] = {}
    for section in plan.sections:
        if section.step not in replayed:
            continue
        for r in section.rows:
            key = (r.op, r.size_bytes, r.dtype, r.group_size, r.spans_world)
            calls[key] = calls.get(key, 0) + r.calls
    rows = []
    for key, found in instances.items():
        op, size, dtype, n, spans = key
        rows.append(
            RowSpec(
                op="sendrecv" if op == "send" else op,
                size_bytes=size,
                dtype=run_dtype(dtype),
                traced_dtype=dtype,
                group_size=n,
                spans_world=spans,
                instances=_disjoint(sorted(found), mapper.groups),
                groups=len(found),
                calls=calls.get(key, 0),
            )
        )
    if skipped:
        names = ", ".join(sorted(skipped)[:5])
        notes.append(f"calls commbench has no op for are not replayed: {names}")
    odd = sorted({r.traced_dtype for r in rows if r.traced_dtype not in ("", r.dtype)})
    if odd:
        notes.append(
            f"dtype(s) {', '.join(odd)} replayed in a dtype of the same element size "
            "(commbench runs " + ", ".join(DTYPES) + ")"
        )
    for step in kept:  # the sequence maps every replayed call: refuse now, not in a worker
        _check_pairs(trace, step, bool(markers))
        for rank in range(min(new_world, traced * mapper.blocks)):
            for call in _step_calls(trace.calls[rank % traced], step, bool(markers)):
                mapper.issue(call, rank // traced)
    recorded, said = recorded_step_times(trace, kept)
    aligned, _ = recorded_step_times(trace, kept, aligned=True)
    return Program(
        world=new_world,
        traced_world=traced,
        groups=tuple(mapper.groups),
        rows=tuple(rows),
        steps=kept,
        total_steps=len(markers),
        recorded_step_s=tuple(recorded),
        recorded_aligned_step_s=tuple(aligned),
        notes=(*notes, *plan.notes, *said),
        plan=plan,
    )


def _counted(trace: Trace, replayed: set[int | None]) -> Iterable[tuple[Call, int]]:
    """Every call a row counts (plan.py's rule: a collective from its group's lowest rank, a
    send from its sender), with its group's size, in the replayed steps and the start-up."""
    world = trace.world_size
    present = sorted(trace.calls)
    for rank in present:
        for call in trace.calls[rank]:
            if call.step not in replayed or call.op == "recv":
                continue
            if call.op == "send":
                yield call, 2
                continue
            ranks = call.group.ranks
            if rank == (min(ranks) if ranks else present[0]):
                yield call, len(ranks) if ranks else world


def _check_pairs(trace: Trace, step: int | None, markers: bool) -> None:
    """Refuse a step whose sends and receives do not pair up between each two ranks: its
    replay would wait for ever on the one left over (a trace cut in that step, a window of a
    ring buffer)."""
    sent: dict[tuple[int, int], int] = {}
    received: dict[tuple[int, int], int] = {}
    for rank, calls in trace.calls.items():
        for c in _step_calls(calls, step, markers):
            if c.op == "send" and c.peer is not None:
                sent[(rank, c.peer)] = sent.get((rank, c.peer), 0) + 1
            elif c.op == "recv" and c.peer is not None:
                received[(c.peer, rank)] = received.get((c.peer, rank), 0) + 1
    for pair in sorted(set(sent) | set(received)):
        a, b = sent.get(pair, 0), received.get(pair, 0)
        if a != b:
            where = "the trace" if step is None else f"step {step}"
            raise UserError(
                f"{where}: rank {pair[0]} sends {a} time(s) to rank {pair[1]}, which receives "
                f"{b}: a replay would wait for ever on the one left over (a trace cut in that "
                "step? --steps K replays the steps before it)"
            )


def _step_calls(calls: Sequence[Call], step: int | None, markers: bool) -> list[Call]:
    if not markers:
        return list(calls)
    return [c for c in calls if c.step == step]


class _Mapper:
    """Traced groups and peers onto the replay's ranks (see the module), and the subgroups
    made, in order."""

    def __init__(self, traced: int, world: int) -> None:
        self.traced = traced
        self.world = world
        self.blocks = -(-world // traced)
        self.groups: list[tuple[int, ...]] = []
        self._index: dict[tuple[int, ...], int] = {}

    def _add(self, ranks: tuple[int, ...]) -> int:
        ranks = tuple(sorted(ranks))
        if ranks not in self._index:
            self._index[ranks] = len(self.groups)
            self.groups.append(ranks)
        return self._index[ranks]

    def _mapped(self, ranks: Sequence[int], block: int, what: str) -> tuple[int, ...] | None:
        mapped = tuple(r + block * self.traced for r in ranks)
        inside = [r < self.world for r in mapped]
        if all(inside):
            return mapped
        if any(inside):
            raise UserError(
                f"--world {self.world}: the trace's {what} [{','.join(map(str, ranks))}] "
                f"maps onto ranks [{','.join(map(str, mapped))}], past the {self.world} "
                "replayed: give a multiple of the traced world size"
            )
        return None

    def instance(self, call: Call, block: int) -> int | None:
        """The group index a counted call's instance has in copy `block` (None: no copy)."""
        if call.op == "send":
            if call.peer is None:
                raise UserError(f"call {call.seq} of rank {call.rank}: a send without its peer")
            pair = self._mapped((call.rank, call.peer), block, "send between ranks")
            return None if pair is None else self._add(pair)
        mapped = self._mapped(call.group.ranks, block, f"group {quoted(call.group.name)}")
        return None if mapped is None else self._add(mapped)

    def issue(self, call: Call, block: int) -> Issue | None:
        """`call` as replay rank (call.rank + block x W) issues it; None for `other`."""
        if call.op == "other":
            return None
        ranks = call.group.ranks
        n = len(ranks) if ranks else self.traced
        peer = None
        if call.op in P2P_OPS:
            if call.peer is None:
                raise UserError(
                    f"call {call.seq} of rank {call.rank}: a {call.op} without its peer"
                )
            pair = self._mapped((call.rank, call.peer), block, f"{call.op} between ranks")
            assert pair is not None  # this rank is in the replay, so is its copy
            group, peer, size = WORLD, pair[1], size_bytes(call, 2)
        elif n >= self.traced:
            group = WORLD
            size = rescaled(call.op, size_bytes(call, n), n, self.world)
            if call.op in ROOTED and call.peer is not None:
                peer = call.peer  # a world group's root is the same rank of the replay
        else:
            mapped = self._mapped(ranks, block, f"group {quoted(call.group.name)}")
            assert mapped is not None
            group, size = self._add(mapped), size_bytes(call, n)
            if call.op in ROOTED and call.peer is not None and call.peer in ranks:
                peer = call.peer + block * self.traced  # the root of this rank's instance
        return Issue(
            op=call.op,
            size_bytes=size,
            dtype=run_dtype(call.dtype),
            group=group,
            async_op=call.async_op,
            peer=peer,
        )


def _disjoint(found: Sequence[int], groups: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """The first instances that share no rank: those timed at once."""
    if WORLD in found:
        return (WORLD,)
    taken: set[int] = set()
    out = []
    for index in found:
        ranks = set(groups[index])
        if not ranks & taken:
            out.append(index)
            taken |= ranks
    return tuple(out)


def step_origins(trace: Trace, program: Program) -> list[int | None]:
    """Per replayed step, its first issue on any rank (ns), for `--pace`'s offsets; None
    for a step without recorded times."""
    markers = program.steps != (None,)
    return [
        min(
            (
                c.issued_ns
                for calls in trace.calls.values()
                for c in _step_calls(calls, step, markers)
                if c.issued_ns
            ),
            default=None,
        )
        for step in program.steps
    ]


def rank_sequence(
    trace: Trace, program: Program, rank: int, origins: Sequence[int | None] | None = None
) -> list[list[Issue]]:
    """Replay rank `rank`'s calls, per replayed step: traced rank rank % W's, mapped.
    `origins`: `step_origins`, computed once for every rank when given."""
    traced = program.traced_world
    mapper = _Mapper(traced, program.world)
    for group in program.groups:  # the same indices as the program's
        mapper._add(group)
    markers = program.steps != (None,)
    if origins is None:
        origins = step_origins(trace, program)
    out = []
    for step, origin in zip(program.steps, origins, strict=True):
        issues = []
        for call in _step_calls(trace.calls[rank % traced], step, markers):
            issue = mapper.issue(call, rank // traced)
            if issue is None:
                continue
            if origin is not None and call.issued_ns:
                issue = replace(issue, offset_s=(call.issued_ns - origin) / 1e9)
            issues.append(issue)
        out.append(issues)
    if len(mapper.groups) != len(program.groups):  # every group was made in build_program
        raise AssertionError("the sequence met a group the program did not make")
    return out


def recorded_step_times(
    trace: Trace, steps: Sequence[int | None], *, aligned: bool = False
) -> tuple[list[float | None], list[str]]:
    """Per step, the recorded communication time in seconds: per rank, the time covered by
    the union of its calls' [issued_ns, completed_ns] intervals, then the maximum over ranks;
    None for a step whose calls carry no times (another tool's trace). A call never seen
    complete counts as zero-length, and a note says how many did. Step None: every call.

    `aligned`: each collective's interval starts when the last member of its group issued
    it (matched by group and `group_seq`), not when this rank did: the time a rank spent
    waiting for a later peer is left out, which a replay (whose ranks start each step
    together) does not have. The ranks' clocks must agree: one host, or hosts in NTP sync."""
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
        for calls in trace.calls.values():
            mine = [c for c in calls if step is None or c.step == step]
            if not mine or not any(c.issued_ns for c in mine):
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
