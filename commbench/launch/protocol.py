"""Every message commbench's processes exchange, typed, versioned and bounded (no torch here).

Two channels carry them:

- the run directory, on one node: each rank rewrites `ranks/rank<N>.json` (its `RankBeat`)
  about twice a second, and rank 0 appends the run's journal, `events.jsonl` (context, one
  line per measured point with its samples, `Health`, `Done`, `Failed`, a diagnosis's
  `RollCallView`). The launcher tails the journal to build the result files and reads the
  heartbeats to tell a hung rank from a slow one.
- the job's c10d store, across nodes (`control`): one `NodeDigest` per node and interval, one
  `FleetSummary` from the aggregator, the roll call after a failure (`RollCallAnswer`,
  `RollCallResult`) and diagnose's muster (`MusterSignIn`, `MusterResult`).

Each message is a frozen dataclass with a `KIND`, a `VERSION` and a size bound. `to_json`
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
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from commbench.errors import UserError
from commbench.fields import (
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """Base of every message: `KIND`, `VERSION`, `MAX_BYTES`, strict JSON both ways."""

    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    MAX_BYTES: ClassVar[int] = 4096

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
        raise NotImplementedError


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# -- on one node: heartbeats and the journal ---------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RankBeat(Message):
    """A rank's heartbeat: where it is in the sweep. Its file's mtime (or the time it was
    last seen to change) is when it last showed life."""

    KIND: ClassVar[str] = "heartbeat"
    MAX_BYTES: ClassVar[int] = 4096

    rank: int
    local_rank: int = 0
    node: int = 0
    host: str | None = None
    pid: int | None = None
    point: int = -1
    phase: str = "init"
    iteration: int = 0
    ticks: int = 0
    error: str = ""
    time: float = 0.0

    @classmethod
    def _read(cls, f: Fields) -> RankBeat:
        return cls(
            rank=f.req("rank", integer_in(0, MAX_RANK)),
            local_rank=f.opt("local_rank", integer_in(0, MAX_RANK)) or 0,
            node=f.opt("node", integer_in(0, MAX_NODES)) or 0,
            host=f.opt("host", _text),
            pid=f.opt("pid", integer_in(1, 1 << 31)),
            point=_opt(f, "point", integer_in(-1, _BIG), -1),
            phase=_opt(f, "phase", _text, "init"),
            iteration=f.opt("iteration", integer_in(0, _BIG)) or 0,
            ticks=f.opt("ticks", integer_in(0, _BIG)) or 0,
            error=f.opt("error", _text) or "",
            time=f.opt("time", _TIME) or 0.0,
        )


def _opt(f: Fields, key: str, conv: Any, default: Any) -> Any:
    value = f.opt(key, conv)
    return default if value is None else value


@dataclass(frozen=True, slots=True, kw_only=True)
class Health(Message):
    """A node's link health snapshot (`phase` before or after), gathered to the writer: the
    snapshot is `health.capture`'s record in its dict form, validated by the reader's
    `NodeHealth`; `nics` the node's NICs with its first snapshot."""

    KIND: ClassVar[str] = "health"
    MAX_BYTES: ClassVar[int] = 4 << 20

    phase: str
    node: int
    host: str | None = None
    snapshot: Any = None
    nics: Any = None

    @classmethod
    def _read(cls, f: Fields) -> Health:
        phase = f.req("phase", string)
        if phase not in ("before", "after"):
            raise UserError(f"{f.at('phase')}: expected before or after, got {phase[:20]!r}")
        return cls(
            phase=phase,
            node=f.req("node", integer_in(0, MAX_NODES)),
            host=f.opt("host", _text),
            snapshot=f.opt("snapshot", anything),
            nics=f.opt("nics", anything),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthGathered(Message):
    """The other nodes' snapshots, as the writer journals them for its launcher."""

    KIND: ClassVar[str] = "health-gathered"
    MAX_BYTES: ClassVar[int] = 1 << 30

    phase: str
    node: int
    """The writer's own node (its launcher snapshots that one itself)."""
    nodes: tuple[Health, ...] = ()

    @classmethod
    def _read(cls, f: Fields) -> HealthGathered:
        return cls(
            phase=f.req("phase", string),
            node=f.req("node", integer_in(0, MAX_NODES)),
            nodes=tuple(f.req("nodes", list_of(_nested(Health), max_items=MAX_NODES))),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Done(Message):
    """The sweep ended: every point is journaled."""

    KIND: ClassVar[str] = "done"

    @classmethod
    def _read(cls, f: Fields) -> Done:
        return cls()


RESULTS_AT_FILE = "results-at.json"
"""In the run directory of every node but global rank 0's: where the run's rows are."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultsAt(Message):
    """Where a multi-node run's rows are: the node, host and run directory of global rank 0,
    the only process that journals them. torchrun's c10d rendezvous gives group rank 0 to
    whichever node it sorts first, not to the one launched with `--node-rank 0`; local rank
    0 of every other node writes this for its launcher, whose run.json then names them."""

    KIND: ClassVar[str] = "results-at"
    MAX_BYTES: ClassVar[int] = 8192

    node: int
    host: str
    run_dir: str

    @classmethod
    def _read(cls, f: Fields) -> ResultsAt:
        return cls(
            node=f.req("node", integer_in(0, MAX_NODES)),
            host=f.req("host", _text),
            run_dir=f.req("run_dir", string),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed(Message):
    """A journaling rank failed: its own words, before it exits."""

    KIND: ClassVar[str] = "failed"

    rank: int
    error: str

    @classmethod
    def _read(cls, f: Fields) -> Failed:
        return cls(rank=f.req("rank", integer_in(0, MAX_RANK)), error=f.req("error", _text))


# -- across nodes: digests, the fleet summary, the roll call, the muster -----------------------

RANK_STATES = ("running", "stopped", "silent", "gone", "done", "error", "unknown")
"""What a node's launcher knows of each of its ranks: `stopped` is SIGSTOP or a debugger (from
/proc), `silent` a heartbeat older than the silence limit, `gone` a process that exited
without finishing, `unknown` a rank the node expected but never saw."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankState(Message):
    """One rank as its node's launcher sees it (nested in `NodeDigest` and `FleetSummary`)."""

    KIND: ClassVar[str] = "rank"

    rank: int
    local_rank: int = 0
    node: int = 0
    host: str | None = None
    pid: int | None = None
    point: int = -1
    phase: str = ""
    iteration: int = 0
    ticks: int = 0
    state: str = "running"
    quiet_s: float = 0.0
    """Seconds since the rank last showed life, by its own node's clock."""
    error: str = ""

    @property
    def position(self) -> tuple[int, int]:
        return (self.point, self.iteration)

    @classmethod
    def _read(cls, f: Fields) -> RankState:
        if (fast := _rank_state_fast(f.data)) is not None:
            return fast
        state = f.req("state", string)
        if state not in RANK_STATES:
            raise UserError(f"{f.at('state')}: unknown state {state[:20]!r}")
        return cls(
            rank=f.req("rank", integer_in(0, MAX_RANK)),
            local_rank=f.opt("local_rank", integer_in(0, MAX_RANK)) or 0,
            node=f.opt("node", integer_in(0, MAX_NODES)) or 0,
            host=f.opt("host", _text),
            pid=f.opt("pid", integer_in(1, 1 << 31)),
            point=_opt(f, "point", integer_in(-1, _BIG), -1),
            phase=f.opt("phase", _text) or "",
            iteration=f.opt("iteration", integer_in(0, _BIG)) or 0,
            ticks=f.opt("ticks", integer_in(0, _BIG)) or 0,
            state=state,
            quiet_s=f.opt("quiet_s", _SPAN) or 0.0,
            error=f.opt("error", _text) or "",
        )


_RANK_INTS = {
    "rank": (0, MAX_RANK),
    "local_rank": (0, MAX_RANK),
    "node": (0, MAX_NODES),
    "pid": (1, 1 << 31),
    "point": (-1, _BIG),
    "iteration": (0, _BIG),
    "ticks": (0, _BIG),
}
_RANK_TEXTS = ("host", "phase", "error")
_RANK_KEYS = {*_RANK_INTS, *_RANK_TEXTS, "state", "quiet_s"}


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
    if "rank" not in given or "state" not in given or given["state"] not in RANK_STATES:
        return None
    return RankState(**given)


def _nested(cls: type[M]) -> Callable[[Any, str], M]:
    def conv(value: Any, path: str) -> M:
        f = Fields(value, path)
        return cls._read(f)

    return conv


MAX_LOCAL_RANKS = 128


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDigest(Message):
    """A node's ranks, published by its launcher once per interval: O(1) requests per node.
    `seq` grows with every publication, so a digest that stops changing means its launcher
    stopped (the aggregator's own clock decides, never the node's)."""

    KIND: ClassVar[str] = "digest"
    MAX_BYTES: ClassVar[int] = 64 << 10

    node: int
    host: str
    seq: int
    time: float
    ranks: tuple[RankState, ...] = ()

    @classmethod
    def _read(cls, f: Fields) -> NodeDigest:
        return cls(
            node=f.req("node", integer_in(0, MAX_NODES)),
            host=f.req("host", _text),
            seq=f.req("seq", integer_in(0, _BIG)),
            time=f.req("time", _TIME),
            ranks=tuple(f.req("ranks", list_of(_nested(RankState), max_items=MAX_LOCAL_RANKS))),
        )


MAX_LISTED = 64
"""Ranks a fleet summary names at most per list: the rest are counted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSilence(Message):
    """A node whose digest stopped changing (its launcher is gone or frozen), or that never
    published one."""

    KIND: ClassVar[str] = "silence"

    node: int
    host: str | None = None
    quiet_s: float = 0.0
    never: bool = False
    ranks: tuple[RankState, ...] = ()
    """Its ranks as last known (or as the job's roll names them, for a node never heard)."""

    @classmethod
    def _read(cls, f: Fields) -> NodeSilence:
        return cls(
            node=f.req("node", integer_in(0, MAX_NODES)),
            host=f.opt("host", _text),
            quiet_s=f.opt("quiet_s", _SPAN) or 0.0,
            never=bool(f.opt("never", boolean)),
            ranks=tuple(
                f.opt("ranks", list_of(_nested(RankState), max_items=MAX_LOCAL_RANKS)) or ()
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSummary(Message):
    """What the aggregator publishes once per interval and every other node reads when it
    needs to (its own ranks stalled, or a crash to explain): who is stopped, silent, gone or
    behind, where, and since when. Bounded: at most MAX_LISTED entries per list, however
    large the cluster."""

    KIND: ClassVar[str] = "fleet"
    MAX_BYTES: ClassVar[int] = 256 << 10

    seq: int
    time: float
    interval: float
    nnodes: int
    reporting: int
    """Nodes whose digest the aggregator has read."""
    progress: int
    """Changes whenever any rank's position changed: the remote part of a watchdog's notion
    of progress."""
    furthest: tuple[int, int] = (-1, 0)
    problems: tuple[RankState, ...] = ()
    """Ranks stopped, silent, gone or failed, as their nodes report them."""
    silent_nodes: tuple[NodeSilence, ...] = ()
    behind: tuple[RankState, ...] = ()
    """The least advanced ranks, when some are behind the furthest position."""
    behind_count: int = 0
    truncated: int = 0
    """Entries left out of the lists above."""

    @classmethod
    def _read(cls, f: Fields) -> FleetSummary:
        furthest = f.opt("furthest", list_of(integer_in(-1, _BIG), max_items=2)) or [-1, 0]
        if len(furthest) != 2:
            raise UserError(f"{f.at('furthest')}: expected [point, iteration]")
        ranks = list_of(_nested(RankState), max_items=MAX_LISTED)
        return cls(
            seq=f.req("seq", integer_in(0, _BIG)),
            time=f.req("time", _TIME),
            interval=f.req("interval", number_in(0.01, 3600)),
            nnodes=f.req("nnodes", integer_in(1, MAX_NODES)),
            reporting=f.req("reporting", integer_in(0, MAX_NODES)),
            progress=f.req("progress", integer_in(0, _BIG)),
            furthest=(furthest[0], furthest[1]),
            problems=tuple(f.opt("problems", ranks) or ()),
            silent_nodes=tuple(
                f.opt("silent_nodes", list_of(_nested(NodeSilence), max_items=MAX_LISTED)) or ()
            ),
            behind=tuple(f.opt("behind", ranks) or ()),
            behind_count=f.opt("behind_count", integer_in(0, _BIG)) or 0,
            truncated=f.opt("truncated", integer_in(0, _BIG)) or 0,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSummary(Message):
    """What a group's aggregator (the launcher of the first of each GROUP_NODES nodes, past
    ONE_TIER_NODES: launch.control) publishes once per interval for the fleet's aggregator
    to merge: its nodes' problems and silences, and enough of their positions for the
    fleet's furthest and behind (its `slowest` running ranks, how many run, how many are
    behind its own furthest). Bounded like the fleet summary."""

    KIND: ClassVar[str] = "group"
    MAX_BYTES: ClassVar[int] = 256 << 10

    group: int
    first: int
    """Its first node: the group holds nodes first .. first + nnodes - 1."""
    nnodes: int
    seq: int
    time: float
    reporting: int
    progress: int
    furthest: tuple[int, int] = (-1, 0)
    running: int = 0
    behind_count: int = 0
    """Its running ranks behind its own furthest position."""
    problems: tuple[RankState, ...] = ()
    silent_nodes: tuple[NodeSilence, ...] = ()
    slowest: tuple[RankState, ...] = ()
    """Its least advanced running ranks (MAX_BEHIND), whatever the others' positions."""
    truncated: int = 0

    @classmethod
    def _read(cls, f: Fields) -> GroupSummary:
        furthest = f.opt("furthest", list_of(integer_in(-1, _BIG), max_items=2)) or [-1, 0]
        if len(furthest) != 2:
            raise UserError(f"{f.at('furthest')}: expected [point, iteration]")
        ranks = list_of(_nested(RankState), max_items=MAX_LISTED)
        return cls(
            group=f.req("group", integer_in(0, MAX_NODES)),
            first=f.req("first", integer_in(0, MAX_NODES)),
            nnodes=f.req("nnodes", integer_in(1, MAX_NODES)),
            seq=f.req("seq", integer_in(0, _BIG)),
            time=f.req("time", _TIME),
            reporting=f.req("reporting", integer_in(0, MAX_NODES)),
            progress=f.req("progress", integer_in(0, _BIG)),
            furthest=(furthest[0], furthest[1]),
            running=f.opt("running", integer_in(0, _BIG)) or 0,
            behind_count=f.opt("behind_count", integer_in(0, _BIG)) or 0,
            problems=tuple(f.opt("problems", ranks) or ()),
            silent_nodes=tuple(
                f.opt("silent_nodes", list_of(_nested(NodeSilence), max_items=MAX_LISTED)) or ()
            ),
            slowest=tuple(f.opt("slowest", ranks) or ()),
            truncated=f.opt("truncated", integer_in(0, _BIG)) or 0,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RollCallAnswer(Message):
    """A surviving node's one answer after a failed round (its first rank there answers)."""

    KIND: ClassVar[str] = "rollcall-answer"
    MAX_BYTES: ClassVar[int] = 2048

    node: int
    host: str
    rank: int

    @classmethod
    def _read(cls, f: Fields) -> RollCallAnswer:
        return cls(
            node=f.req("node", integer_in(0, MAX_NODES)),
            host=f.req("host", _text),
            rank=f.req("rank", integer_in(0, MAX_RANK)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RollCallResult(Message):
    """The roll call's count, published by its counter (the first node to answer): the nodes
    that did not answer within the wait. Every survivor reads it, so it names the few that
    are missing, not the many that answered."""

    KIND: ClassVar[str] = "rollcall-result"
    MAX_BYTES: ClassVar[int] = 1 << 20

    nnodes: int
    missing: tuple[int, ...]
    counter: int
    """The node that counted."""

    @property
    def lost(self) -> list[int]:
        return sorted(self.missing)

    @property
    def answered(self) -> tuple[int, ...]:
        missing = set(self.missing)
        return tuple(n for n in range(self.nnodes) if n not in missing)

    @classmethod
    def _read(cls, f: Fields) -> RollCallResult:
        nnodes = f.req("nnodes", integer_in(1, MAX_NODES))
        return cls(
            nnodes=nnodes,
            missing=tuple(
                f.req("missing", list_of(integer_in(0, nnodes - 1), max_items=MAX_NODES))
            ),
            counter=f.req("counter", integer_in(0, nnodes - 1)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RollCallView(Message):
    """What one rank of a failed diagnosis saw, journaled on its node: its error, the peers it
    names, and the roll call's result where this rank took part in it (`lost` nodes), or that
    the store was gone with the node that hosted it."""

    KIND: ClassVar[str] = "rollcall"
    MAX_BYTES: ClassVar[int] = 1 << 20

    rank: int
    error: str = ""
    peers: tuple[str, ...] = ()
    answered: tuple[int, ...] | None = None
    store_lost: str | None = None

    @classmethod
    def _read(cls, f: Fields) -> RollCallView:
        answered = f.opt("answered", list_of(integer_in(0, MAX_NODES), max_items=MAX_NODES))
        return cls(
            rank=f.req("rank", integer_in(0, MAX_RANK)),
            error=f.opt("error", _text) or "",
            peers=tuple(f.opt("peers", list_of(_text, max_items=64)) or ()),
            answered=None if answered is None else tuple(answered),
            store_lost=f.opt("store_lost", _text),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MusterSignIn(Message):
    """A node signing in before a multi-node diagnosis (one request per node)."""

    KIND: ClassVar[str] = "muster"
    MAX_BYTES: ClassVar[int] = 1024

    node: int
    host: str

    @classmethod
    def _read(cls, f: Fields) -> MusterSignIn:
        return cls(node=f.req("node", integer_in(0, MAX_NODES)), host=f.req("host", _text))


@dataclass(frozen=True, slots=True, kw_only=True)
class MusterResult(Message):
    """Who is missing, published by node rank 0 once all signed in or the wait ended: the
    others need no more (node rank 0, which read the roll, names the hosts)."""

    KIND: ClassVar[str] = "muster-result"
    MAX_BYTES: ClassVar[int] = 2 << 20

    expected: int
    missing: tuple[int, ...] = ()
    joined: tuple[MusterSignIn, ...] = ()
    """Who came, by host: only when some node is missing (every node's record of the failed
    muster then names the hosts), and at most MUSTER_HOSTS of them."""

    @classmethod
    def _read(cls, f: Fields) -> MusterResult:
        expected = f.req("expected", integer_in(1, MAX_NODES))
        missing = f.req("missing", list_of(integer_in(0, expected - 1), max_items=MAX_NODES))
        joined = f.opt("joined", list_of(_nested(MusterSignIn), max_items=MUSTER_HOSTS)) or []
        return cls(expected=expected, missing=tuple(missing), joined=tuple(joined))


MUSTER_HOSTS = 256
"""Hosts a failed muster's result names (a few KB each per node that reads it): beyond,
the other nodes name who came by node rank, and node rank 0 names them all."""


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
