"""Every message commbench's processes exchange, typed, versioned and bounded (no torch here).

Two channels carry them:

- the run directory, on one node: each rank rewrites `ranks/rank<N>.json` (its `RankBeat`)
  about twice a second, and rank 0 appends the run's journal, `events.jsonl` (context, one
  line per measured point with its samples, `Health`, `Done`, `Failed`, a diagnosis's
  `RollCallView`). The launcher tails the journal to build the result files and reads the
  heartbeats to tell a hung rank from a slow one.
- the job's c10d store, across nodes (`plane`): one `NodeDigest` per node and interval, one
  `FleetSummary` from the aggregator, the roll call after a failure (`RollCallAnswer`,
  `RollCallResult`) and diagnose's muster (`MusterSignIn`, `MusterResult`).

Each message is a frozen dataclass with a `KIND`, a `VERSION` and a size bound, each of its
fields declared once (`wire`: how it is read, its default), which both ways follow. `to_json`
writes strict JSON with `type` and `version` first and refuses to exceed the bound;
`from_json` refuses a value over the bound before parsing it, one of another kind, one from a
newer commbench (a higher version) and any field of the wrong type or out of range, always
with `ProtocolError`. The store is shared with other software, so a reader never trusts a value
under commbench's prefix: `Skips` turns a refused one into one warning per kind and reason,
never an exception in a worker, a launcher or the aggregator.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from commbench.errors import UserError
from commbench.fields import (
    Conv,
    Fields,
    anything,
    boolean,
    integer_in,
    list_of,
    number_in,
    string,
)
from commbench.files import dump_json
from commbench.processes import RUN_MARKER as RUN_MARKER  # every process of a run has it
from commbench.results.journal import ROW_EVENT as ROW_EVENT
from commbench.results.journal import JournalReader as JournalReader
from commbench.results.store import EVENTS_FILE as EVENTS_FILE  # spelled with a run's files

RANKS_DIR = "ranks"
LOGS_DIR = "logs"
HEARTBEAT_INTERVAL = 0.5
# Start-up (importing torch, creating the process group, the rendezvous of every node) is
# not progress a worker can report, and on a loaded machine it alone can take tens of
# seconds: a short --timeout meant for a stuck collective must not kill a run still starting.
STARTUP_TIMEOUT = 120.0
# A worker's exit status when it stopped because its launcher died.
LAUNCHER_GONE_EXIT = 3
# The launcher's pid, in each worker's environment.
LAUNCHER_PID_ENV = "COMMBENCH_LAUNCHER_PID"

PREFIX = "commbench/"
"""Every key commbench writes in a store starts with this."""

MAX_RANK = 1 << 20
MAX_NODES = 1 << 17
MAX_TEXT = 500
"""Characters of free text (an error, a phase) a message keeps."""
_BIG = 1 << 53
_TIME = number_in(0.0, 1e12)
_SPAN = number_in(0.0, 1e9)
_BOUNDS: dict[Conv[int], tuple[int, int]] = {}
"""Each bounded integer converter's bounds, for a reader that checks them without it
(`_rank_state_fast`)."""


def _integer_in(lo: int, hi: int) -> Conv[int]:
    conv = integer_in(lo, hi)
    _BOUNDS[conv] = (lo, hi)
    return conv


_RANK = _integer_in(0, MAX_RANK)
_NODE = _integer_in(0, MAX_NODES)
_PID = _integer_in(1, 1 << 31)
_POINT = _integer_in(-1, _BIG)
_COUNT = _integer_in(0, _BIG)


class ProtocolError(ValueError):
    """A message that cannot be decoded: malformed, oversized, of another kind or newer."""

    def __init__(self, kind: str, reason: str, detail: str) -> None:
        super().__init__(f"{kind} message: {detail}")
        self.kind = kind
        self.reason = reason
        """A short class of the fault ("malformed", "oversized", "newer", "kind"): one
        warning per kind and reason."""


def _text(value: Any, path: str) -> str:
    return string(value, path)[:MAX_TEXT]


M = TypeVar("M", bound="Message")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Given:
    """A field's converter that depends on the fields read before it (a count bounds the
    indexes that follow)."""

    conv: Callable[[dict[str, Any]], Conv[Any]]


def wire(conv: Conv[Any] | _Given, default: Any = MISSING, *, required: bool = False) -> Any:
    """A message field, declared once: how it is read (`conv`, given the value and its path)
    and its default. A field without a default is required on the wire; `required` makes one
    that has a default (for the constructor) required there too. `Message._read` reads every
    field from this, in declaration order; `payload` writes them."""
    return field(default=default, metadata={"read": conv, "required": required})


def _tuple_of(conv: Conv[T], max_items: int) -> Conv[tuple[T, ...]]:
    read = list_of(conv, max_items=max_items)

    def conv_tuple(value: Any, path: str) -> tuple[T, ...]:
        return tuple(read(value, path))

    return conv_tuple


def _nested(cls: type[M]) -> Callable[[Any, str], M]:
    """A message inside another (its fields at `path`), read as that message reads them."""

    def conv(value: Any, path: str) -> M:
        f = Fields(value, path)
        return cls._read(f)

    return conv


def _choice(choices: tuple[str, ...], expected: str) -> Conv[str]:
    """A string among `choices`; `expected` (with the `path` and what it `got`) says where
    it is not."""

    def conv(value: Any, path: str) -> str:
        name = string(value, path)
        if name not in choices:
            raise UserError(expected.format(path=path, got=repr(name[:20])))
        return name

    return conv


def _below(count: int) -> Conv[int]:
    """An index among `count` (a node of the job, say)."""
    return integer_in(0, count - 1)


def _position(value: Any, path: str) -> tuple[int, int]:
    """`[point, iteration]`; an empty list is the default, no position yet."""
    items = list_of(integer_in(-1, _BIG), max_items=2)(value, path)
    if not items:
        return (-1, 0)
    if len(items) != 2:
        raise UserError(f"{path}: expected [point, iteration]")
    return (items[0], items[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """Base of every message: `KIND`, `VERSION`, `MAX_BYTES`, strict JSON both ways."""

    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    MAX_BYTES: ClassVar[int] = 4096
    READ_FIRST: ClassVar[tuple[str, ...]] = ()
    """Fields read before the others (the rest in declaration order): which of several faults
    a refused message names first."""

    def payload(self) -> dict[str, Any]:
        """The fields as JSON values (nested messages as their payloads)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Message):
                value = value.payload()
            elif isinstance(value, tuple):
                value = [v.payload() if isinstance(v, Message) else v for v in value]
            out[f.name] = value
        return out

    def to_json(self) -> bytes:
        """One line of strict JSON (no newline), at most MAX_BYTES: a message that would not
        fit is a bug of its producer, which bounds what it puts in."""
        data = dump_json(
            {"type": self.KIND, "version": self.VERSION, **self.payload()}, indent=None
        ).strip()
        raw = data.encode()
        if len(raw) > self.MAX_BYTES:
            raise ProtocolError(
                self.KIND, "oversized", f"{len(raw)} bytes, more than {self.MAX_BYTES}"
            )
        return raw

    @classmethod
    def from_json(cls: type[M], raw: bytes | str) -> M:
        data = raw.encode() if isinstance(raw, str) else bytes(raw)
        if len(data) > cls.MAX_BYTES:
            raise ProtocolError(
                cls.KIND, "oversized", f"{len(data)} bytes, more than {cls.MAX_BYTES}"
            )
        try:
            doc = json.loads(data, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise ProtocolError(cls.KIND, "malformed", f"not JSON ({exc})") from None
        return cls.from_doc(doc)

    @classmethod
    def from_doc(cls: type[M], doc: Any) -> M:
        """From parsed JSON, validated field by field."""
        try:
            f = Fields(doc, cls.KIND)
            kind = f.req("type", string)
            if kind != cls.KIND:
                raise ProtocolError(cls.KIND, "kind", f"a {kind[:40]!r} message, not {cls.KIND!r}")
            version = f.req("version", integer_in(1, _BIG))
            if version > cls.VERSION:
                raise ProtocolError(
                    cls.KIND,
                    "newer",
                    f"version {version} (from a newer commbench; this one reads {cls.VERSION})",
                )
            return cls._read(f)
        except UserError as exc:
            raise ProtocolError(cls.KIND, "malformed", str(exc)) from None

    @classmethod
    def _read(cls: type[M], f: Fields) -> M:
        """Every field as its `wire` declaration says, in declaration order (READ_FIRST's
        first)."""
        got: dict[str, Any] = {}
        order = _ORDER.get(cls)
        if order is None:
            first = cls.READ_FIRST
            order = _ORDER[cls] = tuple(
                sorted(
                    fields(cls),
                    key=lambda f: first.index(f.name) if f.name in first else len(first),
                )
            )
        for spec in order:
            conv = spec.metadata["read"]
            if isinstance(conv, _Given):
                conv = conv.conv(got)
            if spec.default is MISSING or spec.metadata["required"]:
                got[spec.name] = f.req(spec.name, conv)
            else:
                value = f.opt(spec.name, conv)
                got[spec.name] = spec.default if value is None else value
        return cls(**got)


_ORDER: dict[type, tuple[Field[Any], ...]] = {}
"""Each message's fields in the order it reads them (`Message._read`)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# -- on one node: heartbeats and the journal ---------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPlace(Message):
    """Base of what a rank says of itself and its node's launcher says of it: who it is,
    where it runs, and how far it got."""

    rank: int = wire(_RANK)
    local_rank: int = wire(_RANK, 0)
    node: int = wire(_NODE, 0)
    host: str | None = wire(_text, None)
    pid: int | None = wire(_PID, None)
    point: int = wire(_POINT, -1)
    phase: str = wire(_text, "")
    iteration: int = wire(_COUNT, 0)
    ticks: int = wire(_COUNT, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankBeat(RankPlace):
    """A rank's heartbeat: where it is in the sweep. Its file's mtime (or the time it was
    last seen to change) is when it last showed life."""

    KIND: ClassVar[str] = "heartbeat"
    MAX_BYTES: ClassVar[int] = 4096

    phase: str = wire(_text, "init")  # in its place among RankPlace's fields
    error: str = wire(_text, "")
    time: float = wire(_TIME, 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Health(Message):
    """A node's link health snapshot (`phase` before or after), gathered to the writer: the
    snapshot is `health.capture`'s record in its dict form, validated by the reader's
    `NodeHealth`; `nics` the node's NICs with its first snapshot."""

    KIND: ClassVar[str] = "health"
    MAX_BYTES: ClassVar[int] = 4 << 20

    phase: str = wire(_choice(("before", "after"), "{path}: expected before or after, got {got}"))
    node: int = wire(_NODE)
    host: str | None = wire(_text, None)
    # a field declaration, not a shared default (ruff flags a call where the type is Any)
    snapshot: Any = wire(anything, None)  # noqa: RUF009
    nics: Any = wire(anything, None)  # noqa: RUF009


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthGathered(Message):
    """The other nodes' snapshots, as the writer journals them for its launcher."""

    KIND: ClassVar[str] = "health-gathered"
    MAX_BYTES: ClassVar[int] = 1 << 30

    phase: str = wire(string)
    node: int = wire(_NODE)
    """The writer's own node (its launcher snapshots that one itself)."""
    nodes: tuple[Health, ...] = wire(_tuple_of(_nested(Health), MAX_NODES), (), required=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Done(Message):
    """The sweep ended: every point is journaled."""

    KIND: ClassVar[str] = "done"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeMessage(Message):
    """Base of the messages a node sends in its own name: its index and its host."""

    node: int = wire(_NODE)
    host: str = wire(_text)


RESULTS_AT_FILE = "results-at.json"
"""In the run directory of every node but global rank 0's: where the run's rows are."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultsAt(NodeMessage):
    """Where a multi-node run's rows are: the node, host and run directory of global rank 0,
    the only process that journals them. torchrun's c10d rendezvous gives group rank 0 to
    whichever node it sorts first, not to the one launched with `--node-rank 0`; local rank
    0 of every other node writes this for its launcher, whose run.json then names them."""

    KIND: ClassVar[str] = "results-at"
    MAX_BYTES: ClassVar[int] = 8192

    run_dir: str = wire(string)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed(Message):
    """A journaling rank failed: its own words, before it exits."""

    KIND: ClassVar[str] = "failed"

    rank: int = wire(_RANK)
    error: str = wire(_text)


# -- across nodes: digests, the fleet summary, the roll call, the muster -----------------------

RANK_STATES = ("running", "stopped", "silent", "gone", "done", "error", "unknown")
"""What a node's launcher knows of each of its ranks: `stopped` is SIGSTOP or a debugger (from
/proc), `silent` a heartbeat older than the silence limit, `gone` a process that exited
without finishing, `unknown` a rank the node expected but never saw."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankState(RankPlace):
    """One rank as its node's launcher sees it (nested in `NodeDigest` and `FleetSummary`)."""

    KIND: ClassVar[str] = "rank"
    READ_FIRST: ClassVar[tuple[str, ...]] = ("state",)

    state: str = wire(_choice(RANK_STATES, "{path}: unknown state {got}"), "running", required=True)
    quiet_s: float = wire(_SPAN, 0.0)
    """Seconds since the rank last showed life, by its own node's clock."""
    error: str = wire(_text, "")

    @property
    def position(self) -> tuple[int, int]:
        return (self.point, self.iteration)

    @classmethod
    def _read(cls, f: Fields) -> RankState:
        fast = _rank_state_fast(f.data)
        return super(RankState, cls)._read(f) if fast is None else fast


_RANK_INTS = {
    f.name: _BOUNDS[f.metadata["read"]] for f in fields(RankState) if f.metadata["read"] in _BOUNDS
}
_RANK_TEXTS = frozenset(f.name for f in fields(RankState) if f.metadata["read"] is _text)
_RANK_KEYS = frozenset(f.name for f in fields(RankState))
_RANK_REQUIRED = frozenset(
    f.name for f in fields(RankState) if f.default is MISSING or f.metadata["required"]
)


def _rank_state_fast(d: Any) -> RankState | None:
    """A RankState from a well-formed object in plain type checks, or None for the checked
    path to name the fault: the aggregator reads 8 of these per node and interval, and the
    field-by-field reader costs ~0.1 ms each (1 s per interval at 1,024 nodes)."""
    if type(d) is not dict or not d.keys() <= _RANK_KEYS:
        return None
    given = {key: v for key, v in d.items() if v is not None}
    for key, value in given.items():
        if key in _RANK_INTS:
            lo, hi = _RANK_INTS[key]
            if type(value) is not int or not lo <= value <= hi:
                return None
        elif key in _RANK_TEXTS:
            if type(value) is not str:
                return None
            given[key] = value[:MAX_TEXT]
        elif key == "quiet_s":
            if type(value) not in (int, float) or not 0.0 <= value <= 1e9:
                return None
            given[key] = float(value)
    if not given.keys() >= _RANK_REQUIRED or given["state"] not in RANK_STATES:
        return None
    return RankState(**given)


MAX_LOCAL_RANKS = 128


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDigest(NodeMessage):
    """A node's ranks, published by its launcher once per interval: O(1) requests per node.
    `seq` grows with every publication, so a digest that stops changing means its launcher
    stopped (the aggregator's own clock decides, never the node's)."""

    KIND: ClassVar[str] = "digest"
    MAX_BYTES: ClassVar[int] = 64 << 10

    seq: int = wire(_COUNT)
    time: float = wire(_TIME)
    ranks: tuple[RankState, ...] = wire(
        _tuple_of(_nested(RankState), MAX_LOCAL_RANKS), (), required=True
    )


MAX_LISTED = 64
"""Ranks a fleet summary names at most per list: the rest are counted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSilence(Message):
    """A node whose digest stopped changing (its launcher is gone or frozen), or that never
    published one."""

    KIND: ClassVar[str] = "silence"

    node: int = wire(_NODE)
    host: str | None = wire(_text, None)
    quiet_s: float = wire(_SPAN, 0.0)
    never: bool = wire(boolean, False)
    ranks: tuple[RankState, ...] = wire(_tuple_of(_nested(RankState), MAX_LOCAL_RANKS), ())
    """Its ranks as last known (or as the job's roll names them, for a node never heard)."""


_LISTED_RANKS = _tuple_of(_nested(RankState), MAX_LISTED)
_LISTED_SILENCES = _tuple_of(_nested(NodeSilence), MAX_LISTED)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSummary(Message):
    """What the aggregator publishes once per interval and every other node reads when it
    needs to (its own ranks stalled, or a crash to explain): who is stopped, silent, gone or
    behind, where, and since when. Bounded: at most MAX_LISTED entries per list, however
    large the cluster."""

    KIND: ClassVar[str] = "fleet"
    MAX_BYTES: ClassVar[int] = 256 << 10
    READ_FIRST: ClassVar[tuple[str, ...]] = ("furthest",)

    seq: int = wire(_COUNT)
    time: float = wire(_TIME)
    interval: float = wire(number_in(0.01, 3600))
    nnodes: int = wire(integer_in(1, MAX_NODES))
    reporting: int = wire(_NODE)
    """Nodes whose digest the aggregator has read."""
    progress: int = wire(_COUNT)
    """Changes whenever any rank's position changed: the remote part of a watchdog's notion
    of progress."""
    furthest: tuple[int, int] = wire(_position, (-1, 0))
    problems: tuple[RankState, ...] = wire(_LISTED_RANKS, ())
    """Ranks stopped, silent, gone or failed, as their nodes report them."""
    silent_nodes: tuple[NodeSilence, ...] = wire(_LISTED_SILENCES, ())
    behind: tuple[RankState, ...] = wire(_LISTED_RANKS, ())
    """The least advanced ranks, when some are behind the furthest position."""
    behind_count: int = wire(_COUNT, 0)
    truncated: int = wire(_COUNT, 0)
    """Entries left out of the lists above."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSummary(Message):
    """What a group's aggregator (the launcher of the first of each GROUP_NODES nodes, past
    ONE_TIER_NODES: launch.aggregation) publishes once per interval for the fleet's aggregator
    to merge: its nodes' problems and silences, and enough of their positions for the
    fleet's furthest and behind (its `slowest` running ranks, how many run, how many are
    behind its own furthest). Bounded like the fleet summary."""

    KIND: ClassVar[str] = "group"
    MAX_BYTES: ClassVar[int] = 256 << 10
    READ_FIRST: ClassVar[tuple[str, ...]] = ("furthest",)

    group: int = wire(_NODE)
    first: int = wire(_NODE)
    """Its first node: the group holds nodes first .. first + nnodes - 1."""
    nnodes: int = wire(integer_in(1, MAX_NODES))
    seq: int = wire(_COUNT)
    time: float = wire(_TIME)
    reporting: int = wire(_NODE)
    progress: int = wire(_COUNT)
    furthest: tuple[int, int] = wire(_position, (-1, 0))
    running: int = wire(_COUNT, 0)
    behind_count: int = wire(_COUNT, 0)
    """Its running ranks behind its own furthest position."""
    problems: tuple[RankState, ...] = wire(_LISTED_RANKS, ())
    silent_nodes: tuple[NodeSilence, ...] = wire(_LISTED_SILENCES, ())
    slowest: tuple[RankState, ...] = wire(_LISTED_RANKS, ())
    """Its least advanced running ranks (MAX_BEHIND), whatever the others' positions."""
    truncated: int = wire(_COUNT, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class RollCallAnswer(NodeMessage):
    """A surviving node's one answer after a failed round (its first rank there answers)."""

    KIND: ClassVar[str] = "rollcall-answer"
    MAX_BYTES: ClassVar[int] = 2048

    rank: int = wire(_RANK)


@dataclass(frozen=True, slots=True, kw_only=True)
class RollCallResult(Message):
    """The roll call's count, published by its counter (the first node to answer): the nodes
    that did not answer within the wait. Every survivor reads it, so it names the few that
    are missing, not the many that answered."""

    KIND: ClassVar[str] = "rollcall-result"
    MAX_BYTES: ClassVar[int] = 1 << 20

    nnodes: int = wire(integer_in(1, MAX_NODES))
    missing: tuple[int, ...] = wire(_Given(lambda got: _tuple_of(_below(got["nnodes"]), MAX_NODES)))
    counter: int = wire(_Given(lambda got: _below(got["nnodes"])))
    """The node that counted."""

    @property
    def lost(self) -> list[int]:
        return sorted(self.missing)

    @property
    def answered(self) -> tuple[int, ...]:
        missing = set(self.missing)
        return tuple(n for n in range(self.nnodes) if n not in missing)


@dataclass(frozen=True, slots=True, kw_only=True)
class RollCallView(Message):
    """What one rank of a failed diagnosis saw, journaled on its node: its error, the peers it
    names, and the roll call's result where this rank took part in it (`lost` nodes), or that
    the store was gone with the node that hosted it."""

    KIND: ClassVar[str] = "rollcall"
    MAX_BYTES: ClassVar[int] = 1 << 20
    READ_FIRST: ClassVar[tuple[str, ...]] = ("answered",)

    rank: int = wire(_RANK)
    error: str = wire(_text, "")
    peers: tuple[str, ...] = wire(_tuple_of(_text, 64), ())
    answered: tuple[int, ...] | None = wire(_tuple_of(_NODE, MAX_NODES), None)
    store_lost: str | None = wire(_text, None)


@dataclass(frozen=True, slots=True, kw_only=True)
class MusterSignIn(NodeMessage):
    """A node signing in before a multi-node diagnosis (one request per node)."""

    KIND: ClassVar[str] = "muster"
    MAX_BYTES: ClassVar[int] = 1024


MUSTER_HOSTS = 256
"""Hosts a failed muster's result names (a few KB each per node that reads it): beyond,
the other nodes name who came by node rank, and node rank 0 names them all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MusterResult(Message):
    """Who is missing, published by node rank 0 once all signed in or the wait ended: the
    others need no more (node rank 0, which read the roll, names the hosts)."""

    KIND: ClassVar[str] = "muster-result"
    MAX_BYTES: ClassVar[int] = 2 << 20

    expected: int = wire(integer_in(1, MAX_NODES))
    missing: tuple[int, ...] = wire(
        _Given(lambda got: _tuple_of(_below(got["expected"]), MAX_NODES)), (), required=True
    )
    joined: tuple[MusterSignIn, ...] = wire(_tuple_of(_nested(MusterSignIn), MUSTER_HOSTS), ())
    """Who came, by host: only when some node is missing (every node's record of the failed
    muster then names the hosts), and at most MUSTER_HOSTS of them."""


MESSAGES: dict[str, type[Message]] = {
    m.KIND: m
    for m in (
        RankBeat,
        Health,
        HealthGathered,
        Done,
        Failed,
        NodeDigest,
        FleetSummary,
        GroupSummary,
        RollCallAnswer,
        RollCallResult,
        RollCallView,
        MusterSignIn,
        MusterResult,
    )
}
"""Every message that travels alone, by kind."""


class Skips:
    """Values refused on read, kept once per kind and reason (a store shared with other
    software may hold anything under our prefix; a newer commbench may share it), for the
    run's record: its owner puts `warnings` there, which the command says at its end, each
    once (`commbench: warning: skipped a ...`). Nothing is said as it happens: a garbage
    writer would otherwise put its lines between the points, and each kind twice."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self.warnings: list[str] = []

    def decode(self, cls: type[M], raw: bytes | str | None) -> M | None:
        if raw is None:
            return None
        try:
            return cls.from_json(raw)
        except ProtocolError as exc:
            self.note(exc)
            return None

    def note(self, exc: ProtocolError) -> None:
        with self._lock:
            if (exc.kind, exc.reason) in self._seen:
                return
            self._seen.add((exc.kind, exc.reason))
            self.warnings.append(f"skipped a {exc.kind} message ({exc.reason}): {exc}"[:300])


# -- files of the run directory ----------------------------------------------------------------


def heartbeat_path(run_dir: Path, rank: int) -> Path:
    return run_dir / RANKS_DIR / f"rank{rank}.json"


class Journal:
    """Append-only JSON-lines writer. A line and its newline go out in one write(), so lines
    never interleave; a short write (a full disk) is finished by the next, never left for
    the following line to be glued onto."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: Message | dict[str, Any]) -> None:
        if isinstance(event, Message):
            line = event.to_json() + b"\n"
        else:
            line = dump_json(event, indent=None).encode()  # strict: NaN is null; ends in \n
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        os.close(self._fd)


def read_beat(path: Path, skips: Skips | None = None) -> tuple[RankBeat, float] | None:
    """A heartbeat file and its mtime; None if it is gone, torn or refused. At most
    RankBeat.MAX_BYTES + 1 bytes are read, whatever the file holds."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(RankBeat.MAX_BYTES + 1)
            mtime = os.fstat(fh.fileno()).st_mtime
    except OSError:
        return None
    beat = (skips or _QUIET).decode(RankBeat, raw)
    return None if beat is None else (beat, mtime)


_QUIET = Skips()


@dataclass(frozen=True, slots=True)
class Sighting:
    """A rank's heartbeat as its node's launcher read it: the message, and `mtime`, when its
    file last changed by this node's clock (the rank's own `time` may run on another)."""

    beat: RankBeat
    mtime: float


def read_heartbeats(run_dir: Path, skips: Skips | None = None) -> dict[int, Sighting]:
    """This node's heartbeats by rank, as the watchdog and the digest read them."""
    return HeartbeatReader(run_dir, skips).read()


class HeartbeatReader:
    """This node's heartbeats by rank, read again and again (`read`): a file is decoded only
    when it changed since the last read, and otherwise gives the same `Sighting`; when no
    file changed, the same dict comes back. The launcher polls every 0.1 s and a rank
    rewrites its file every HEARTBEAT_INTERVAL, so most polls decode nothing (eight files
    cost ~0.7 ms a poll here to decode). A heartbeat is replaced whole, by a rename: a
    rewrite is a new inode, with its own times."""

    def __init__(self, run_dir: Path, skips: Skips | None = None) -> None:
        self.dir = run_dir / RANKS_DIR
        self.skips = skips
        self._files: dict[str, tuple[tuple[int, int, int, int], Sighting | None]] = {}
        self._beats: dict[int, Sighting] = {}

    def read(self) -> dict[int, Sighting]:
        files: dict[str, tuple[tuple[int, int, int, int], Sighting | None]] = {}
        changed = False
        try:
            entries = list(os.scandir(self.dir))
        except OSError:
            entries = []
        for entry in entries:
            name = entry.name
            if not (name.startswith("rank") and name.endswith(".json")):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            known = self._files.get(name)
            if known is not None and known[0] == key:
                files[name] = known
                continue
            got = read_beat(Path(entry.path), self.skips)
            files[name] = (key, None if got is None else Sighting(*got))
            changed = True
        if changed or files.keys() != self._files.keys():
            beats: dict[int, Sighting] = {}
            for _, sighting in files.values():
                if sighting is not None:
                    beats[sighting.beat.rank] = sighting
            self._beats = beats
        self._files = files
        return self._beats
