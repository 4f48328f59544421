"""What a run is: its kind, its status, its settings and context, typed; and a suite of runs.

`RunRecord` is run.json and `SuiteRecord` is suite.json. Producers (collectives, p2p, the
nccl-tests import, suites) write them through `results.lifecycle`; readers (report, compare,
plot, model, suites) read their attributes, never a dict. `from_dict` checks every field a
reader uses and names the file and field of a wrong one in one line; a version-1 file is
migrated on the way in (`_migrate_v1`).

Version 2 of run.json differs from version 1 in one place: a topology discovery that failed
is `context.topology_error`, and `context.topology` is a whole snapshot or null (version 1
wrote `{"error": ...}` in its place). Version 2 of suite.json is version 1 read strictly (an
entry's status is a `RunStatus`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, TypeVar

from commbench.errors import UserError, quoted
from commbench.fields import (
    Conv,
    Fields,
    anything,
    boolean,
    integer_in,
    kind,
    line,
    list_of,
    mapping_of,
    number_in,
    one_of,
    string,
    text,
)
from commbench.health.record import RunHealth
from commbench.numbers import MAX_ITERATIONS
from commbench.processes import ProcessId
from commbench.results.names import (
    BACKENDS,
    DEFAULT_TIMEOUT,
    DEVICES,
    DIAGNOSE_STAGES,
    DTYPES,
    IN_PLACE,
    MAX_NODES,
    MAX_NPROC,
    MAX_SECONDS,
    MIN_TIMEOUT,
    REDUCE_OPS,
    STRATEGY_NAMES,
)
from commbench.results.ranks import RankEntry
from commbench.results.replay import ReplayRecord
from commbench.results.schema import (
    IMPORTED_REDUCE_OPS,
    MAX_COUNT,
    MAX_GBPS,
    MAX_GPU,
    MAX_SIZE_BYTES,
    MAX_WORLD_SIZE,
    P2P_MODES,
    ROW_DTYPES,
    ROW_OPS,
    SCHEMA_VERSION,
)
from commbench.topology import TopologySnapshot

E = TypeVar("E", bound=Enum)


class RunStatus(str, Enum):  # str: compares equal to, and is written as, its value
    """Where a run (or a suite entry) stands; written to run.json and suite.json as its value.

    A reader takes "running" with care: a launcher killed outright leaves it behind
    (`RunRecord.recognised`)."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"

    def __str__(self) -> str:  # f"{status}" is the word, as with StrEnum (3.11+)
        return self.value


class RunKind(str, Enum):
    """What produced a run directory."""

    COLLECTIVES = "collectives"
    P2P = "p2p"
    NCCL_TESTS = "nccl-tests"
    DIAGNOSE = "diagnose"
    REPLAY = "replay"

    def __str__(self) -> str:
        return self.value

    @property
    def family(self) -> RunKind:
        """What its points measure: an nccl-tests import times the same collectives as a
        collectives run (comparing the two is what an import is for; the gate and the
        history's series both join them); p2p copies, diagnose's tests and a replay's rows
        are of their own kinds."""
        return RunKind.COLLECTIVES if self is RunKind.NCCL_TESTS else self


def enum_of(cls: type[E]) -> Conv[E]:
    """A converter to one of `cls`'s values, naming them when the value is another."""

    def conv(value: Any, path: str) -> E:
        name = string(value, path)
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise UserError(f"{path}: {quoted(name)} is not one of {known}") from None

    return conv


# Every field of a record has a reader: a registry (what the command line takes), a bound, or
# `line` (a text of one line: a name, a host, a version) / `text` (a failure, a note: lines,
# but no other control character). An object whose every key is not known here (settings,
# the launch, a rank's entry) has its known keys checked and the others kept as they are:
# a newer commbench adds keys without a new schema version, and no reader reads them.
_line = line
_lines = list_of(line, max_items=MAX_WORLD_SIZE)
_texts = list_of(text, max_items=MAX_COUNT)
_world = integer_in(1, MAX_WORLD_SIZE)
_rank = integer_in(0, MAX_WORLD_SIZE - 1)
_count = integer_in(0, MAX_COUNT)
_gpu = integer_in(0, MAX_GPU)
_pid = integer_in(0, (1 << 31) - 1)
_size = integer_in(1, MAX_SIZE_BYTES)
"""A size to measure, as `--sizes` takes it (`sizes.check_size`)."""
_positive_seconds = number_in(1e-9, MAX_SECONDS)
"""A positive number of seconds (`--min-time`, `--timeout`)."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _known(readers: dict[str, Conv[Any]]) -> Conv[dict[str, Any]]:
    """An object whose keys named in `readers` are checked (null: not given); the others are
    kept as they are."""

    def read(value: Any, path: str) -> dict[str, Any]:
        f = Fields(value, path)
        for key, conv in readers.items():
            f.opt(key, conv)
        return dict(f.data)

    return read


def _scalar(value: Any, path: str) -> Any:
    """A value of one line: a string, a number, true/false or null (an environment knob)."""
    if isinstance(value, dict | list):
        raise UserError(f"{path}: expected a string or a number, got {kind(value)}")
    if isinstance(value, str):
        return line(value, path)
    if isinstance(value, float):
        return number_in(-1e300, 1e300)(value, path)
    return value


def _env(value: Any, path: str) -> dict[str, Any]:
    """`context.env`: variable names to their values, each of one line."""
    env = mapping_of(_scalar)(value, path)
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise UserError(f"{path}: {quoted(name)} is not the name of an environment variable")
    return env


def _in_place(value: Any, path: str) -> bool | str:
    """`settings.in_place`: yes, no or both (`IN_PLACE`), or a bool (stored before `both`)."""
    return value if isinstance(value, bool) else one_of(IN_PLACE)(value, path)


def _pair(value: Any, path: str) -> list[int]:
    pair = list_of(_gpu, max_items=2)(value, path)
    if len(pair) != 2:
        raise UserError(f"{path}: expected [source, destination], got {len(pair)} GPUs")
    return pair


_LIST = 1 << 16
"""Items in a list of settings: past what any command line or suite gives."""
_SETTINGS_FIELDS: dict[str, Conv[Any]] = {
    # collectives (`CollectivesSettings`), and what the nccl-tests import and diagnose share
    "ops": list_of(one_of(ROW_OPS), max_items=_LIST),
    "strategies": list_of(one_of(STRATEGY_NAMES), max_items=_LIST),
    "sizes": list_of(_size, max_items=_LIST),
    "nproc": integer_in(1, MAX_NPROC),
    "backend": one_of(BACKENDS),
    "device": one_of(DEVICES),
    "dtype": one_of(ROW_DTYPES),
    "dtypes": list_of(one_of(DTYPES), max_items=_LIST),
    "reduce_op": one_of((*REDUCE_OPS, *IMPORTED_REDUCE_OPS)),
    "reduce_ops": list_of(one_of(REDUCE_OPS), max_items=_LIST),
    "warmup": integer_in(0, MAX_ITERATIONS),
    "iters": integer_in(1, MAX_ITERATIONS),
    "min_iters": integer_in(1, MAX_ITERATIONS),
    "max_iters": integer_in(1, MAX_ITERATIONS),
    "min_time": _positive_seconds,
    "in_place": _in_place,
    "check": boolean,
    "async_op": boolean,
    "graph": boolean,
    "profile": boolean,
    "ranks": list_of(integer_in(0, MAX_NPROC * MAX_NODES), max_items=_LIST),
    "timeout": number_in(MIN_TIMEOUT, MAX_SECONDS),
    # p2p (`P2PSettings`)
    "src": _gpu,
    "dsts": list_of(_gpu, max_items=_LIST),
    "pairs": list_of(_pair, max_items=_LIST),
    "matrix": boolean,
    "modes": list_of(one_of(P2P_MODES), max_items=len(P2P_MODES)),
    "bidirectional": boolean,
    "host": boolean,
    "latency": boolean,
    "latency_sizes": list_of(_size, max_items=_LIST),
    # the nccl-tests import: its log's header line
    "nccl_tests": mapping_of(_scalar),
    # diagnose (`DiagnoseSettings`)
    "diagnose": _known(
        {
            "size_bytes": _size,
            "stages": list_of(one_of(DIAGNOSE_STAGES), max_items=len(DIAGNOSE_STAGES)),
            "tolerance": number_in(0, 1),
            "alpha": number_in(0, 1),
            "group": integer_in(1, MAX_NODES),
            "max_rounds": integer_in(1, MAX_NODES),
            "expected_gbps": mapping_of(number_in(0, MAX_GBPS)),
        }
    ),
    # replay (`ReplaySettings`)
    "replay": _known(
        {
            "trace": text,
            "world": _world,
            "steps": integer_in(1, MAX_COUNT),
            "rebucket": list_of(_size, max_items=_LIST),
            "repeats": integer_in(1, MAX_ITERATIONS),
        }
    ),
}
_LAUNCH_FIELDS: dict[str, Conv[Any]] = {
    "nnodes": integer_in(1, MAX_NODES),
    "node_rank": integer_in(0, MAX_NODES - 1),
    "rdzv_endpoint": line,
    "rdzv_id": line,
    "source": one_of(("flags", "slurm", "single")),
    "debug": boolean,
    "watch": mapping_of(anything),  # what the cross-node watch cost: for people, never read
}
_RANK_FIELDS: dict[str, Conv[Any]] = {
    "rank": _rank,
    "local_rank": _rank,
    "node": integer_in(0, MAX_NODES - 1),
    "group": _count,
    "pid": _pid,
    "host": line,
    "address": line,
    "device": line,
    "device_name": line,
    "pci_bus_id": line,
}
_PROBE_FIELDS: dict[str, Conv[Any]] = {
    "ok": boolean,
    "torch": line,
    "device_count": integer_in(0, MAX_GPU),
    "error": text,
    "memory": mapping_of(list_of(integer_in(0, 1 << 62), max_items=2)),
}
_SECTION_FIELDS: dict[str, Conv[Any]] = {
    "op": one_of(ROW_OPS),
    "header": mapping_of(_scalar),
    "rows": _count,
    "dropped_zero_size_rows": _count,
    "avg_busbw_gbps": number_in(0, MAX_GBPS),
}


def _process(f: Fields | None) -> ProcessId | None:
    """A record's writer stamp; one that does not name a pid names no writer."""
    if f is None:
        return None
    match f.data:
        case {"pid": int(pid)} if not isinstance(pid, bool):
            return ProcessId(
                pid=pid,
                host=f.opt("host", _line),
                boot_id=f.opt("boot_id", _line),
                start_ticks=f.opt("start_ticks", integer_in(0, 1 << 62)),
            )
    return None


# -- the context -------------------------------------------------------------------------------


# The context's plain fields, each with its type; read and written by name.
_CONTEXT_FIELDS: dict[str, Conv[Any]] = {
    "host": _line,
    "hosts": _lines,
    "platform": _line,
    "python": _line,
    "commbench": _line,
    "command": text,  # a command line may quote an argument that holds a line break
    "cwd_git_commit": _line,
    "started_at": _line,
    "backend": one_of(BACKENDS),
    "device": one_of(DEVICES),
    "world_size": _world,
    "group_size": _world,
    "nnodes": _world,
    "device_count": integer_in(0, MAX_WORLD_SIZE),
    "device_names": _lines,
    "ranks": list_of(_known(_RANK_FIELDS), max_items=MAX_WORLD_SIZE),
    "torch": _line,
    "cuda": _line,
    "nccl": _line,
    "driver": _line,
    "env": _env,
    "probe": _known(_PROBE_FIELDS),
    "topology_error": text,
}


@dataclass(kw_only=True, slots=True)
class RunContext:
    """Where and what was measured. `comparable()` is the part that must match for two runs
    to be compared (backend, devices, world size, topology); the rest (host, times,
    versions) informs."""

    host: str | None = None
    hosts: list[str] = field(default_factory=list)
    platform: str | None = None
    python: str | None = None
    commbench: str | None = None
    command: str | None = None
    cwd_git_commit: str | None = None
    started_at: str | None = None
    backend: str | None = None
    device: str | None = None
    world_size: int | None = None
    group_size: int | None = None
    """Ranks taking part (the subgroup with --ranks)."""
    nnodes: int | None = None
    device_count: int | None = None
    """GPUs a p2p run saw."""
    device_names: list[str] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    """One object per rank as the workers reported it (host, node, device name, pid)."""
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
    """The communication knobs (NCCL_*, TORCH_*, ...) the workers ran with."""
    probe: dict[str, Any] | None = None
    """The launcher's probe of the devices before the launch."""
    topology: TopologySnapshot | None = None
    topology_error: str | None = None
    """Why there is no snapshot: its discovery failed."""
    health: RunHealth | None = None
    """Link health counters (per GPU, per RDMA port) taken before and after the run by the
    process that writes this record; absent from records older than it."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this commbench does not know (kept as they are, unchecked)."""

    @classmethod
    def from_dict(cls, data: Any, where: str) -> RunContext:
        f = Fields(data, where)
        values = {key: f.opt(key, conv) for key, conv in _CONTEXT_FIELDS.items()}
        ctx = cls(**{k: v for k, v in values.items() if v is not None})
        ctx._check(f)
        ctx.topology = _snapshot(f)
        health = f.sub("health")
        ctx.health = None if health is None else RunHealth.from_dict(health.data, health.where)
        known = {*_CONTEXT_FIELDS, "topology", "health"}
        ctx.extra = {k: v for k, v in f.data.items() if k not in known}
        return ctx

    @property
    def rank_entries(self) -> tuple[RankEntry, ...]:
        """`ranks`, typed: the objects themselves stay as the workers wrote them (with any
        key a newer commbench adds), for the record to write them back unchanged."""
        return tuple(map(RankEntry.read, self.ranks))

    def _check(self, f: Fields) -> None:
        """What one field cannot say alone: the group, the nodes and each rank fit the world."""
        world = self.world_size
        if world is None:
            return
        for name in ("group_size", "nnodes"):
            value = getattr(self, name)
            if value is not None and value > world:
                raise UserError(f"{f.at(name)}: {value}, more than the world size {world}")
        for i, entry in enumerate(self.rank_entries):
            rank = entry.rank
            if rank is not None and rank >= world:
                raise UserError(
                    f"{f.at('ranks')}[{i}].rank: {rank} is outside 0..{world - 1} (world size {world})"
                )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key in _CONTEXT_FIELDS:
            value = getattr(self, key)
            if key == "env" or value not in (None, [], {}):
                data[key] = value
        data["topology"] = None if self.topology is None else self.topology.to_dict()
        if self.health is not None:
            data["health"] = self.health.to_dict()
        return {**data, **self.extra}

    def comparable(self) -> dict[str, Any]:
        """The part of the context that must match for two runs to be compared."""
        pairs = self.topology.pairs if self.topology is not None else []
        links = sorted((p.src, p.dst, p.link) for p in pairs)
        return {
            "backend": self.backend,
            "device": self.device,
            "device_names": self.device_names or None,
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "topology_links": links or None,
        }


def _snapshot(f: Fields) -> TopologySnapshot | None:
    topo = f.sub("topology")
    if topo is None:
        return None
    # what a reader meets first, checked first, so a wrong pair names itself
    for item in topo.items("gpus", required=False):
        item.obj()
    for item in topo.items("pairs", required=False):
        pair = item.obj()
        pair.opt("src", integer_in(0, MAX_WORLD_SIZE))
        pair.opt("dst", integer_in(0, MAX_WORLD_SIZE))
        pair.opt("link", _line)
    return TopologySnapshot.from_dict(topo.data, topo.where)


# -- the run -----------------------------------------------------------------------------------


# The record's plain fields, each with its type; `kind`, `status`, `context` and `launcher`
# are read apart.
_RUN_FIELDS: dict[str, Conv[Any]] = {
    "run_id": _line,
    "settings": _known(_SETTINGS_FIELDS),
    "launch": _known(_LAUNCH_FIELDS),
    "failure": text,
    "note": text,
    "points_total": _count,
    "points_done": _count,
    "steps_total": _count,
    "steps_done": _count,
    "failed_ranks": list_of(_rank, max_items=MAX_WORLD_SIZE),
    "holds_results": boolean,
    "duration_s": number_in(0, 1e10),
    "finished_at": _line,
    "imported_at": _line,
    "source": _line,
    "format": _line,
    "notes": _texts,
    "warnings": _texts,
    "suspicious": _texts,
    "sections": list_of(_known(_SECTION_FIELDS), max_items=MAX_COUNT),
}
_RUN_KEYS = {*_RUN_FIELDS, "schema_version", "kind", "status", "context", "launcher", "replay"}


@dataclass(kw_only=True, slots=True)
class RunRecord:
    """run.json: one run of any kind."""

    kind: RunKind
    status: RunStatus | None = None
    """None only in memory (a stand-in for a run that is absent): a record is written, and
    read, with its status."""
    settings: dict[str, Any] = field(default_factory=dict)
    """As the kind's settings dataclass writes them (`CollectivesSettings.to_dict()`)."""
    context: RunContext = field(default_factory=RunContext)
    run_id: str | None = None
    failure: str | None = None
    """Why the run did not complete."""
    note: str | None = None
    """Something a reader should know about a run that did complete."""
    launcher: ProcessId | None = None
    """Who writes the record while it says "running" (`lifecycle` stamps it)."""
    launch: dict[str, Any] | None = None
    """How a collectives run was launched (nodes, rendezvous)."""
    points_total: int | None = None
    points_done: int | None = None
    steps_total: int | None = None
    steps_done: int | None = None
    failed_ranks: list[int] = field(default_factory=list)
    holds_results: bool | None = None
    """False on a node of a multi-node run that did not run global rank 0."""
    duration_s: float | None = None
    finished_at: str | None = None
    imported_at: str | None = None
    source: str | None = None
    """The file an imported run came from."""
    format: str | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    suspicious: list[str] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)
    replay: ReplayRecord | None = None
    """A replay's recorded and replayed communication times and its bucket advisor; None
    for every other kind."""
    recorded_status: RunStatus | None = None
    """Set by a reader only: the status the file says, where the reader took it otherwise
    (a "running" record whose launcher is gone). Never written."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this commbench does not know (kept as they are, unchecked)."""

    @classmethod
    def from_dict(cls, data: Any, where: str) -> RunRecord:
        """The record in `data` (a run.json of version 1 or 2), every field checked; UserError
        naming `where` and the field."""
        f = Fields(data, f"{where}:")
        match f.data:
            case {"schema_version": 1}:
                f = Fields(_migrate_v1(dict(f.data)), f.where)
        values = {key: f.opt(key, conv) for key, conv in _RUN_FIELDS.items()}
        record_kind = f.req("kind", enum_of(RunKind))
        status = f.req("status", enum_of(RunStatus))
        context = f.sub("context")
        if context is None:
            raise UserError(f"{f.at('context')}: missing")
        record = cls(
            kind=record_kind,
            status=status,
            context=RunContext.from_dict(context.data, context.where),
            launcher=_process(f.sub("launcher")),
            **{k: v for k, v in values.items() if v is not None},
        )
        replay = f.sub("replay")
        if replay is not None:
            record.replay = ReplayRecord.read(replay)
        record.extra = {k: v for k, v in f.data.items() if k not in _RUN_KEYS}
        return record._checked(f)

    def _checked(self, f: Fields) -> RunRecord:
        """What one field cannot say alone: progress within its total, failed ranks and the
        node within the world."""
        for done, total in (("points_done", "points_total"), ("steps_done", "steps_total")):
            d, t = getattr(self, done), getattr(self, total)
            if d is not None and t is not None and d > t:
                raise UserError(f"{f.at(done)}: {d}, more than {total} ({t})")
        world = self.context.world_size
        for i, rank in enumerate(self.failed_ranks):
            if world is not None and rank >= world:
                raise UserError(
                    f"{f.at('failed_ranks')}[{i}]: {rank} is outside 0..{world - 1} "
                    f"(world size {world})"
                )
        match self.launch:  # checked integers, where given
            case {"nnodes": int(nnodes), "node_rank": int(node)} if node >= nnodes:
                raise UserError(f"{f.at('launch')}.node_rank: {node} is outside 0..{nnodes - 1}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """run.json's content: the fields that say something (None and empty lists left out)."""
        if self.status is None:
            raise ValueError("a run record is written with its status (readers refuse one without)")
        data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind.value,
            "status": self.status.value,
        }
        for f in fields(self):
            if f.name in ("kind", "status", "recorded_status", "extra"):
                continue
            value = getattr(self, f.name)
            if f.name == "context":
                value = value.to_dict()
            elif f.name == "launcher":
                if self.status is not RunStatus.RUNNING or value is None:
                    continue
                value = value.to_dict()
            elif f.name == "replay" and value is not None:
                value = value.to_dict()
            if f.name not in ("failure", "failed_ranks") and value in (None, []):
                continue  # says nothing (failure is written as null: "no failure")
            data[f.name] = value
        return {**data, **self.extra}

    def recognised(self, silence: Silence | None = None) -> RunRecord:
        """The record as a reader must take it: one saying "running" whose launcher is gone
        (this host, its pid gone or reused, or a reboot since) is interrupted; on another host
        it is interrupted too once its directory has been `silence` for longer than its
        timeout, and otherwise whether it still runs cannot be told: the failure says so."""
        status, failure = recognise(self.status, self.launcher, self.failure, silence)
        if status is self.status and failure == self.failure:
            return self
        recorded = self.status if status is not self.status else None
        return replace(self, status=status, failure=failure, recorded_status=recorded)

    @property
    def timeout_s(self) -> float:
        """Seconds without progress before its launcher ends the run as hung: its settings'
        `timeout`, else the default (`Silence`)."""
        return _timeout_in(self.settings) or DEFAULT_TIMEOUT

    @property
    def unfinished(self) -> str | None:
        """How the run did not finish, e.g. "was interrupted (its launcher (pid 7) is gone)";
        None when it did, or does not say."""
        return unfinished(self.status, self.failure)


def unfinished(status: RunStatus | None, failure: str | None) -> str | None:
    """How a run or suite with this status did not finish; None when it did, or does not
    say."""
    if status in (None, RunStatus.COMPLETE):
        return None
    how = _UNFINISHED.get(status, f"is {status}")
    return how + (f" ({failure})" if failure else "")


_UNFINISHED = {
    RunStatus.FAILED: "failed",
    RunStatus.INTERRUPTED: "was interrupted",
    RunStatus.RUNNING: "has not finished",
}


def _timeout_in(settings: Any) -> float | None:
    """The `timeout` of a settings object as it is stored (a run's settings, a suite
    section's `timing`): a positive finite number of seconds, else None. The only field read
    of them here, to tell a hung run from a dead one: the settings are kept as written."""
    match settings:
        case {"timeout": int() | float() as value} if not isinstance(value, bool):
            return float(value) if 0 < value < float("inf") else None
    return None


SILENCE_MARGIN_S = 60.0
"""Added to a record's timeout before its silence means its writer is dead: the phases no
watchdog times (preflight, plotting) and clocks of two hosts that disagree (a shared
file system stamps files with the writer's or the server's clock)."""


@dataclass(frozen=True, slots=True)
class Silence:
    """How long nothing has changed where a record's writer writes (its run or suite
    directory: the record, the journal, the ranks' heartbeats twice a second), and the
    timeout its writer works under (a hung run is ended by then)."""

    seconds: float
    timeout_s: float

    @property
    def dead(self) -> bool:
        return self.seconds > self.timeout_s + SILENCE_MARGIN_S


def recognise(
    status: RunStatus | None,
    writer: ProcessId | None,
    failure: str | None,
    silence: Silence | None = None,
) -> tuple[RunStatus | None, str | None]:
    """(status, failure) of a record as a reader must take it, run.json and suite.json alike
    (`RunRecord.recognised`): "running" stays so while its writer runs; it is interrupted when
    its writer is gone (this host), or cannot be seen (another host, or none recorded) and
    has written nothing for longer than its timeout (`Silence`)."""
    if status is not RunStatus.RUNNING:
        return status, failure
    running = writer.running() if writer is not None else None
    if running:
        return status, failure
    if running is False and writer is not None:
        return RunStatus.INTERRUPTED, f"its launcher (pid {writer.pid}) is gone"
    if silence is not None and silence.dead:
        who = "its launcher" if writer is None else f"its launcher (pid {writer.pid})"
        where = "" if writer is None else f" on host {writer.host}"
        return RunStatus.INTERRUPTED, (
            f"{who}{where} has written nothing for {silence.seconds:.0f} s, longer than its "
            f"timeout ({silence.timeout_s:g} s)"
        )
    if writer is None:
        return status, failure or "no launcher is recorded: whether it still runs cannot be told"
    return status, (
        f"its launcher (pid {writer.pid}) runs on host {writer.host}: "
        "whether it still runs cannot be told from here"
    )


def _migrate_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run.json in version 2's form: a failed topology discovery
    (`context.topology: {"error": ...}`) becomes `context.topology_error`."""
    match data:
        case {"context": {"topology": {"error": error} as topo} as context} if "gpus" not in topo:
            data["context"] = {**context, "topology": None, "topology_error": error}
    return {**data, "schema_version": SCHEMA_VERSION}


# -- the suite ---------------------------------------------------------------------------------


SUITE_SECTIONS = ("topo", "collectives", "strategies", "p2p")
"""What a suite runs (`suites.runner`), each entry in one of them."""


def _entry_path(value: Any, path: str) -> str:
    """An entry's run directory: relative, inside the suite directory (a reader opens it)."""
    relative = line(value, path)
    parts = relative.replace("\\", "/").split("/")
    if not relative or relative.startswith("/") or ".." in parts:
        raise UserError(f"{path}: {quoted(relative)} is not a directory inside the suite")
    return relative


_GATE_FIELDS: dict[str, Conv[Any]] = {
    "tolerance": number_in(0, 0.999999),
    "latency_tolerance": number_in(0, 0.999999),
    "alpha": number_in(1e-12, 0.999999),
    "noisy_cv": number_in(1e-12, 1e12),
    "allow_mismatch": boolean,
}
"""The gate a suite ran with (`compare.GateSettings`, whose bounds these are): `compare`
judges with it."""


@dataclass(kw_only=True, slots=True)
class Entry:
    """One thing a suite ran: a run directory, or why there is none."""

    name: str
    section: str
    path: str | None = None
    """Run directory, relative to the suite directory."""
    status: RunStatus = RunStatus.PENDING
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "section": self.section,
            "path": self.path,
            "status": self.status.value,
            "failure": self.failure,
        }


SUITE_KIND = "suite"


@dataclass(kw_only=True, slots=True)
class SuiteRecord:
    """suite.json: the runs one suite made, and how the suite went."""

    name: str
    status: RunStatus = RunStatus.RUNNING
    entries: list[Entry] = field(default_factory=list)
    description: str | None = None
    config_path: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    """The suite's configuration as it ran (`SuiteConfig.to_dict()`)."""
    machine: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    finished_at: str | None = None
    topology_file: str | None = None
    """topology.json when the suite has `topo: true`."""
    warnings: list[str] = field(default_factory=list)
    baseline: str | None = None
    exit_code: int | None = None
    failure: str | None = None
    launcher: ProcessId | None = None
    recorded_status: RunStatus | None = None
    """As in `RunRecord`: set by a reader only, never written."""

    @classmethod
    def from_dict(cls, data: Any, where: str) -> SuiteRecord:
        f = Fields(data, f"{where}:")
        if f.opt("kind", anything) != SUITE_KIND:
            raise UserError(f"{where}: not a suite file")
        config = f.sub("config")
        if config is not None:
            config.opt("gate", _known(_GATE_FIELDS))
        entries = []
        for item in f.items("entries", max_items=MAX_COUNT):
            e = item.obj()
            entries.append(
                Entry(
                    name=e.req("name", line),
                    section=e.req("section", one_of(SUITE_SECTIONS)),
                    path=e.opt("path", _entry_path),
                    status=e.opt("status", enum_of(RunStatus)) or RunStatus.PENDING,
                    failure=e.opt("failure", text),
                )
            )
        record = cls(
            name=f.opt("name", line) or "?",
            entries=entries,
            description=f.opt("description", text),
            config_path=f.opt("config_path", line),
            config=dict(config.data) if config is not None else {},
            machine=f.opt("machine", mapping_of(anything)) or {},
            started_at=f.opt("started_at", line),
            finished_at=f.opt("finished_at", line),
            topology_file=f.opt("topology_file", _entry_path),
            warnings=f.opt("warnings", _texts) or [],
            baseline=f.opt("baseline", line),
            exit_code=f.opt("exit_code", integer_in(0, 255)),
            failure=f.opt("failure", text),
            launcher=_process(f.sub("launcher")),
        )
        # last: a file whose other fields are wrong is told about those first
        record.status = f.req("status", enum_of(RunStatus))
        return record

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": SUITE_KIND,
            "name": self.name,
            "description": self.description,
            "config_path": self.config_path,
            "config": self.config,
            "machine": self.machine,
            "status": self.status.value,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "topology_file": self.topology_file,
            "warnings": self.warnings,
            "baseline": self.baseline,
            "exit_code": self.exit_code,
            "failure": self.failure,
        }
        if self.status is RunStatus.RUNNING and self.launcher is not None:
            data["launcher"] = self.launcher.to_dict()
        data["entries"] = [e.to_dict() for e in self.entries]
        return data

    @property
    def unfinished(self) -> str | None:
        """How the suite did not finish (as `RunRecord.unfinished`); None when it did."""
        return unfinished(self.status, self.failure)

    @property
    def timeout_s(self) -> float:
        """The longest timeout of the suite's sections (`timing.timeout`), else the default:
        one of its runs may be silent that long before its launcher ends it (`Silence`)."""
        found = []
        for section in self.config.values():
            match section:
                case {"timing": timing}:
                    found.append(_timeout_in(timing))
        return max([t for t in found if t is not None], default=DEFAULT_TIMEOUT)

    def recognised(self, silence: Silence | None = None) -> SuiteRecord:
        """As `RunRecord.recognised`; an entry still running when the suite's launcher went
        went with it."""
        found, failure = recognise(self.status, self.launcher, self.failure, silence)
        status = found or self.status
        if status is self.status and failure == self.failure:
            return self
        entries = self.entries
        if status is RunStatus.INTERRUPTED:
            entries = [
                replace(e, status=status, failure=failure) if e.status is RunStatus.RUNNING else e
                for e in self.entries
            ]
        recorded = self.status if status is not self.status else None
        return replace(
            self, status=status, failure=failure, entries=entries, recorded_status=recorded
        )
