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

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, TypeVar

from commbench.collectives.settings import DEFAULT_TIMEOUT
from commbench.errors import UserError
from commbench.fields import (
    Conv,
    Fields,
    anything,
    boolean,
    integer_in,
    list_of,
    mapping_of,
    number_in,
    string,
)
from commbench.health.record import RunHealth
from commbench.processes import ProcessId
from commbench.results.schema import MAX_COUNT, MAX_WORLD_SIZE, SCHEMA_VERSION
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

    def __str__(self) -> str:
        return self.value


def enum_of(cls: type[E]) -> Conv[E]:
    """A converter to one of `cls`'s values, naming them when the value is another."""

    def conv(value: Any, path: str) -> E:
        text = string(value, path)
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise UserError(f"{path}: {text[:40]!r} is not one of {known}") from None

    return conv


_text = string
_texts = list_of(string)
_world = integer_in(1, MAX_WORLD_SIZE)
_count = integer_in(0, MAX_COUNT)


def _scalar(value: Any, path: str) -> Any:
    if isinstance(value, dict | list):
        raise UserError(f"{path}: expected a string or a number, got a {type(value).__name__}")
    return value


def _process(f: Fields | None) -> ProcessId | None:
    """A record's writer stamp; one that does not name a pid names no writer."""
    if f is None or not isinstance(f.data.get("pid"), int) or isinstance(f.data["pid"], bool):
        return None
    return ProcessId(
        pid=f.data["pid"],
        host=f.opt("host", _text),
        boot_id=f.opt("boot_id", _text),
        start_ticks=f.opt("start_ticks", integer_in(0, 1 << 62)),
    )


# -- the context -------------------------------------------------------------------------------


# The context's plain fields, each with its type; read and written by name.
_CONTEXT_FIELDS: dict[str, Conv[Any]] = {
    "host": _text,
    "hosts": _texts,
    "platform": _text,
    "python": _text,
    "commbench": _text,
    "command": _text,
    "cwd_git_commit": _text,
    "started_at": _text,
    "backend": _text,
    "device": _text,
    "world_size": _world,
    "group_size": _world,
    "nnodes": _world,
    "device_count": integer_in(0, MAX_WORLD_SIZE),
    "device_names": _texts,
    "ranks": list_of(mapping_of(anything)),
    "torch": _text,
    "cuda": _text,
    "nccl": _text,
    "driver": _text,
    "env": mapping_of(_scalar),
    "probe": mapping_of(anything),
    "topology_error": _text,
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
        ctx.topology = _snapshot(f)
        health = f.sub("health")
        ctx.health = None if health is None else RunHealth.from_dict(health.data, health.where)
        known = {*_CONTEXT_FIELDS, "topology", "health"}
        ctx.extra = {k: v for k, v in f.data.items() if k not in known}
        return ctx

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
        pair.opt("link", _text)
    return TopologySnapshot.from_dict(topo.data, topo.where)


# -- the run -----------------------------------------------------------------------------------


# The record's plain fields, each with its type; `kind`, `status`, `context` and `launcher`
# are read apart.
_RUN_FIELDS: dict[str, Conv[Any]] = {
    "run_id": _text,
    "settings": mapping_of(anything),
    "launch": mapping_of(anything),
    "failure": _text,
    "note": _text,
    "points_total": _count,
    "points_done": _count,
    "steps_total": _count,
    "steps_done": _count,
    "failed_ranks": list_of(integer_in(0, MAX_WORLD_SIZE)),
    "holds_results": boolean,
    "duration_s": number_in(0, 1e10),
    "finished_at": _text,
    "imported_at": _text,
    "source": _text,
    "format": _text,
    "notes": _texts,
    "warnings": _texts,
    "suspicious": _texts,
    "sections": list_of(mapping_of(anything)),
}
_RUN_KEYS = {*_RUN_FIELDS, "schema_version", "kind", "status", "context", "launcher"}


@dataclass(kw_only=True, slots=True)
class RunRecord:
    """run.json: one run of any kind."""

    kind: RunKind
    status: RunStatus | None = None
    """None: the file does not say (hand-made files)."""
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
        if f.data.get("schema_version") == 1:
            f = Fields(_migrate_v1(dict(f.data)), f.where)
        values = {key: f.opt(key, conv) for key, conv in _RUN_FIELDS.items()}
        context = f.sub("context")
        record = cls(
            kind=f.req("kind", enum_of(RunKind)),
            status=f.opt("status", enum_of(RunStatus)),
            context=RunContext()
            if context is None
            else RunContext.from_dict(context.data, context.where),
            launcher=_process(f.sub("launcher")),
            **{k: v for k, v in values.items() if v is not None},
        )
        record.extra = {k: v for k, v in f.data.items() if k not in _RUN_KEYS}
        return record

    def to_dict(self) -> dict[str, Any]:
        """run.json's content: the fields that say something (None and empty lists left out)."""
        data: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "kind": self.kind.value}
        if self.status is not None:
            data["status"] = self.status.value
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
        return _seconds(self.settings.get("timeout")) or DEFAULT_TIMEOUT

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


def _seconds(value: Any) -> float | None:
    """A timeout as settings store it: a positive finite number of seconds, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value < float("inf") else None


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
    context = data.get("context")
    if isinstance(context, dict):
        topo = context.get("topology")
        if isinstance(topo, dict) and "error" in topo and "gpus" not in topo:
            context = {**context, "topology": None, "topology_error": topo["error"]}
            data["context"] = context
    return {**data, "schema_version": SCHEMA_VERSION}


# -- the suite ---------------------------------------------------------------------------------


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
        if f.data.get("kind") != SUITE_KIND:
            raise UserError(f"{where}: not a suite file")
        config = f.sub("config")
        if config is not None:
            config.opt("gate", mapping_of(anything))
        entries = []
        for item in f.items("entries"):
            e = item.obj()
            entries.append(
                Entry(
                    name=e.req("name", string),
                    section=e.req("section", string),
                    path=e.opt("path", string),
                    status=e.opt("status", enum_of(RunStatus)) or RunStatus.PENDING,
                    failure=e.opt("failure", string),
                )
            )
        record = cls(
            name=f.opt("name", string) or "?",
            status=f.opt("status", enum_of(RunStatus)) or RunStatus.COMPLETE,
            entries=entries,
            description=f.opt("description", string),
            config_path=f.opt("config_path", string),
            config=dict(config.data) if config is not None else {},
            machine=f.opt("machine", mapping_of(anything)) or {},
            started_at=f.opt("started_at", string),
            finished_at=f.opt("finished_at", string),
            topology_file=f.opt("topology_file", string),
            warnings=f.opt("warnings", list_of(string)) or [],
            baseline=f.opt("baseline", string),
            exit_code=f.opt("exit_code", integer_in(0, 255)),
            failure=f.opt("failure", string),
            launcher=_process(f.sub("launcher")),
        )
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
        found = [
            _seconds(section["timing"].get("timeout"))
            for section in self.config.values()
            if isinstance(section, dict) and isinstance(section.get("timing"), dict)
        ]
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
