"""The records of commbench's trace directory (issue 26; docs/traces.md describes the files):
a `Manifest` (`manifest.json`: the job), a `Call` per line of a rank file, and a `Trace`
read back (the manifest and every rank's calls). Each record reads itself from its parsed
JSON, every field bounded (the limits below); `traces.writer` writes them, `traces.reader`
reads a directory back and `traces.checks` checks what one rank's calls cannot say alone.

    TRACE/manifest.json      the job: the command, world size, hosts, torch, times, `complete`
    TRACE/rank-<N>.jsonl     rank N's calls, one strict-JSON `Call` a line, in issue order
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from commbench.errors import UserError, quoted
from commbench.fields import (
    Conv,
    Fields,
    anything,
    boolean,
    integer_in,
    line,
    list_of,
    number_in,
    one_of,
    pick,
    string,
)
from commbench.files import dump_json
from commbench.ops import derived
from commbench.traces.names import ELEMENT_BYTES, MAX_WORLD, trace_ops

SCHEMA_VERSION = 3
"""The version of the trace directory's files this commbench writes and reads (and older).
2: an all_to_all's splits (`Call.in_splits`, `out_splits`), left out when even; a trace of
1 recorded none, and its all_to_alls are replayed even (`splits`).
3: the sends and receives of one `batch_isend_irecv` carry `Call.batch`; a trace of 2 or
before does not say, and its consecutive async sends and receives are replayed as one batch."""
SPLITS_SINCE = 2
"""The first version whose all_to_all without splits was even (before it: not recorded)."""
BATCHES_SINCE = 3
TOOL = "commbench"
MANIFEST_FILE = "manifest.json"
RANK_FILE = "rank-{rank}.jsonl"

MAX_CALLS = 20_000_000
"""Most calls a trace (all its ranks together) may hold: hours of a large job at a few
hundred calls per step; past it a replay plan would not fit in memory either."""
MAX_PARAMETERS = 1 << 18
"""Most parameters a trace lists (`Manifest.parameters`, rank 0's `parameters.json`):
262,144 tensors, five times the largest public mixture-of-experts models (DeepSeek-V3 has
about 45,000: 58 layers of 256 experts of 3 matrices), and a hundred times a model DDP
trains (the bucket advisor's case: DDP holds a whole model per GPU, a few thousand tensors
at most). A job with more has its list left out, and counted (`kept_parameters`): a part of
a list would advise wrong buckets."""
MAX_MANIFEST_BYTES = 32 << 20
"""Largest `manifest.json`: the one limit of its reader (`read_manifest`) and its writer
(`write_manifest`, which writes nothing larger). It holds MAX_PARAMETERS parameters as they
are written (at most 77 bytes each: 20 MB) and the rest of the job (its command, hosts)."""
MAX_ARGV = 1 << 18
"""Words of a recorded command: as many as `exec` passes under Linux's default 8 MiB stack
limit (ARG_MAX, 2 MiB, at 8 bytes of pointer and 2 of text and NUL at least each); `record`
refuses a longer command before it runs it."""
MAX_HOSTS = 1 << 17
MAX_BACKENDS = 16
MAX_NOT_CAPTURED = 256
"""Operators a manifest names as not captured (symm_mem has a few dozen)."""
MAX_BYTES = 1 << 50
"""Largest buffer a call may name (a petabyte): past it a byte count is corrupt."""
_MAX_NS = (1 << 63) - 1
_MAX_TIME = 1e11  # seconds since the epoch, past year 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    """The process group a call ran in."""

    name: str
    """Its name as torch gives it (`0` for the default group), or the producer's id for it."""
    ranks: tuple[int, ...]
    """Its members' global ranks, in group-rank order; empty when the producer did not say
    (then it counts as the whole world)."""

    def payload(self) -> dict[str, Any]:
        return {"name": self.name, "ranks": list(self.ranks)}

    @classmethod
    def read(cls, f: Fields) -> Group:
        return cls(
            name=f.req("name", line),
            ranks=tuple(f.req("ranks", list_of(integer_in(0, MAX_WORLD - 1), max_items=MAX_WORLD))),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One call a rank made: a line of its `rank-<N>.jsonl`."""

    rank: int
    """The global rank that made it."""
    seq: int
    """Its place among the rank's calls, from 0."""
    op: str
    """commbench's op (`names.trace_ops`), `other` where it maps to none."""
    name: str
    """The original name (`allgather_into_tensor_coalesced`, `nccl:all_reduce`)."""
    in_bytes: int
    """Bytes of this rank's input (all of its input tensors)."""
    out_bytes: int
    """Bytes of this rank's output (the input again for an in-place op)."""
    dtype: str
    """`names.ELEMENT_BYTES`' names, `""` without data, `unknown` when not said."""
    count: int
    """Elements of the input."""
    group: Group
    async_op: bool = False
    """Still in flight when its rank issued the next call (commbench's capture: DDP's
    buckets, an async_op=True call not yet waited), or issued async as another tool says."""
    issued_ns: int = 0
    """When it was issued (ns, the producer's clock: time.time_ns() for commbench)."""
    completed_ns: int | None = None
    """When it was seen complete; None when it never was, or not known."""
    host: str = ""
    device: str = ""
    """`cuda:0`, `cpu`."""
    step: int | None = None
    """The training step it belongs to (steps are counted by the optimizer); None in the
    start-up, after the last step, or without step markers."""
    group_seq: int | None = None
    """Its place among its group's collectives, from 0 (every member counts the same
    calls); None for a send or recv, and when the producer did not say."""
    peer: int | None = None
    """The other rank of a send or recv (global), or the root of a rooted op; None
    otherwise or when not said."""
    in_splits: tuple[int, ...] | None = None
    """An all_to_all's elements (of `dtype`) sent to each member of its group, in group-rank
    order (`traces.splits`); None when even (total / n each), or not recorded."""
    out_splits: tuple[int, ...] | None = None
    """An all_to_all's elements received from each member; None when even, or not recorded."""
    graph: bool = False
    """Made while a CUDA graph was being captured: in the trace once, though every replay of
    the graph makes it again without reaching the dispatcher (the manifest counts them)."""
    batch: int | None = None
    """A send or recv issued by `dist.batch_isend_irecv`: which of its rank's batches, from 0
    (a batch's calls went as one group: one NCCL group launch); None otherwise."""
    cpu_ns: int | None = None
    """The process's CPU time when it was issued (every thread's, ns: `time.process_time_ns`
    for commbench): what the job computed on its host between two calls, which `--pace`
    replays as computation (docs/traces.md, "Replaying"); None when not recorded."""

    def __post_init__(self) -> None:
        if self.op not in trace_ops():
            raise UserError(f"call {self.seq} of rank {self.rank}: {quoted(self.op)} is not an op")
        if min(self.rank, self.seq, self.in_bytes, self.out_bytes, self.count) < 0:
            raise UserError(f"call {self.seq} of rank {self.rank}: a negative rank, size or count")

    def payload(self) -> dict[str, Any]:
        return {
            **pick(self, "rank", "seq", "op", "name", "in_bytes", "out_bytes", "dtype", "count"),
            "group": self.group.payload(),
            "async": self.async_op,
            **pick(
                self, "issued_ns", "completed_ns", "host", "device", "step", "group_seq", "peer"
            ),
            # written only where uneven: most calls have none, and a line stays short
            **({"in_splits": list(self.in_splits)} if self.in_splits is not None else {}),
            **({"out_splits": list(self.out_splits)} if self.out_splits is not None else {}),
            **({"graph": True} if self.graph else {}),
            **({"batch": self.batch} if self.batch is not None else {}),
            **({"cpu_ns": self.cpu_ns} if self.cpu_ns is not None else {}),
        }

    def to_line(self) -> str:
        """One line of strict JSON, with its newline."""
        return dump_json(self.payload(), indent=None)

    @classmethod
    def read(cls, f: Fields) -> Call:
        """A call from its line's fields, each bounded; what its splits may be depends on its
        group and the trace's world, which the reader checks (`splits.check_splits`)."""
        group = f.sub("group")
        if group is None:
            raise UserError(f"{f.at('group')}: missing")
        return cls(
            rank=f.req("rank", integer_in(0, MAX_WORLD - 1)),
            seq=f.req("seq", integer_in(0, MAX_CALLS)),
            op=f.req("op", _op_field()),
            name=f.req("name", line),
            in_bytes=f.req("in_bytes", integer_in(0, MAX_BYTES)),
            out_bytes=f.req("out_bytes", integer_in(0, MAX_BYTES)),
            dtype=_dtype(f),
            count=f.req("count", integer_in(0, MAX_BYTES)),
            group=Group.read(group),
            async_op=bool(f.opt("async", boolean)),
            issued_ns=(issued := _issued_ns(f)),
            completed_ns=_completed_ns(f, issued),
            host=f.opt("host", line) or "",
            device=f.opt("device", line) or "",
            step=f.opt("step", integer_in(0, _MAX_NS)),
            group_seq=f.opt("group_seq", integer_in(0, _MAX_NS)),
            peer=f.opt("peer", integer_in(0, MAX_WORLD - 1)),
            in_splits=_splits(f, "in_splits"),
            out_splits=_splits(f, "out_splits"),
            graph=bool(f.opt("graph", boolean)),
            batch=f.opt("batch", integer_in(0, MAX_CALLS)),
            cpu_ns=f.opt("cpu_ns", integer_in(0, _MAX_NS)),
        )


def _splits(f: Fields, name: str) -> tuple[int, ...] | None:
    """A split list: a count of elements (0 or more) per member of the group."""
    value = f.opt(name, list_of(integer_in(0, MAX_BYTES), max_items=MAX_WORLD))
    return None if value is None else tuple(value)


def _issued_ns(f: Fields) -> int:
    """`issued_ns`: 0 (or absent) when not known; the writer never writes null, so a null
    here is a NaN or an infinity the JSON reader turned into one, and no time."""
    if "issued_ns" in f.data and f.data["issued_ns"] is None:
        raise UserError(f"{f.at('issued_ns')}: null, NaN or infinite: not a time in nanoseconds")
    return f.opt("issued_ns", integer_in(0, _MAX_NS)) or 0


MAX_CALL_NS = 7 * 24 * 3600 * 10**9
"""The longest a recorded call may have taken: a week. Longer is no time a process group
waits (c10d's timeouts are minutes; a recorded job ran days at most), and a step of 292
years (a completed_ns of 2^63 - 1) turned every figure of the replay into nonsense."""


def _completed_ns(f: Fields, issued: int) -> int | None:
    """`completed_ns`: absent where never seen complete; never before the call was issued,
    nor more than MAX_CALL_NS after (where the issue time is known)."""
    completed = f.opt("completed_ns", integer_in(0, _MAX_NS))
    if completed is None or not issued:
        return completed
    if completed < issued:
        raise UserError(
            f"{f.at('completed_ns')}: {completed}, before the call was issued ({issued})"
        )
    if completed - issued > MAX_CALL_NS:
        raise UserError(
            f"{f.at('completed_ns')}: {completed - issued} ns after the call was issued, "
            f"longer than any call takes (at most {MAX_CALL_NS // (24 * 3600 * 10**9)} days)"
        )
    return completed


def _dtype(f: Fields) -> str:
    value = f.data.get("dtype")
    if value == "" or value is None:
        return ""
    return f.req("dtype", one_of((*ELEMENT_BYTES, "unknown")))


def _argument(value: Any, path: str) -> str:
    """One word of the recorded command: any string (a `python -c` script holds lines and
    tabs), bounded."""
    word = string(value, path)
    if len(word) > MAX_MANIFEST_BYTES:
        raise UserError(f"{path}: {len(word)} characters, more than {MAX_MANIFEST_BYTES}")
    return word


@dataclass(frozen=True, slots=True, kw_only=True)
class Parameter:
    """One parameter the job's optimizer steps: what the DDP bucket advisor regroups."""

    numel: int
    dtype: str

    @property
    def nbytes(self) -> int:
        return self.numel * ELEMENT_BYTES.get(self.dtype, 4)

    def payload(self) -> dict[str, Any]:
        return {"numel": self.numel, "dtype": self.dtype}

    @classmethod
    def read_list(cls, f: Fields, where: str) -> tuple[Parameter, ...]:
        """The `parameters` list of a manifest or a rank's meta file (empty when absent)."""
        items = f.opt("parameters", list_of(anything, max_items=MAX_PARAMETERS)) or ()
        return tuple(cls.read(Fields(p, f"{where}: parameters[{i}]")) for i, p in enumerate(items))

    @classmethod
    def read(cls, f: Fields) -> Parameter:
        return cls(
            numel=f.req("numel", integer_in(0, MAX_BYTES)),
            dtype=f.req("dtype", one_of((*ELEMENT_BYTES, "unknown"))),
        )


def kept_parameters(parameters: Sequence[Parameter]) -> tuple[tuple[Parameter, ...], int]:
    """The parameter list as a trace keeps it, and how many it left out: all of it, or past
    MAX_PARAMETERS (which the readers refuse) none of it."""
    if len(parameters) > MAX_PARAMETERS:
        return (), len(parameters)
    return tuple(parameters), 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    """The job a trace recorded: `manifest.json`."""

    argv: tuple[str, ...]
    """The command recorded."""
    world_size: int
    hosts: tuple[str, ...] = ()
    torch_version: str | None = None
    backends: tuple[str, ...] = ()
    """The process groups' backends (`nccl`, `gloo`)."""
    started: float = 0.0
    """Seconds since the epoch."""
    ended: float | None = None
    complete: bool = False
    """False while recording, and for a job that failed or was killed: its last calls may
    be missing, and its files' last line torn."""
    parameters: tuple[Parameter, ...] = ()
    """The parameters rank 0's optimizer stepped, in the order it holds them (the model's
    `parameters()` order for a plain optimizer); empty when no optimizer step was seen."""
    parameters_left_out: int = 0
    """Parameters the job stepped but the trace does not list (more than MAX_PARAMETERS, or
    more than a manifest holds): `replay --rebucket` says so instead of advising on none."""
    not_captured: tuple[tuple[str, int], ...] = ()
    """Calls the job made that the trace cannot hold, by operator, with their number over
    all ranks: symmetric-memory ops (`symm_mem::*`: not c10d ops, no process group)."""
    graph_captured: int = 0
    """Calls made while a CUDA graph was being captured, over all ranks: each is in the
    trace once (marked `graph`), but the graph's replays never reach the dispatcher."""
    tool: str = TOOL
    """Who wrote the trace: `commbench`, or the format a foreign trace was read from."""
    schema_version: int = SCHEMA_VERSION

    @property
    def records_splits(self) -> bool:
        """Its all_to_alls' splits are recorded (an all_to_all without them was even):
        commbench's own, from schema 2 on. Other tools' traces and older ones say nothing
        of them."""
        return self.tool == TOOL and self.schema_version >= SPLITS_SINCE

    @property
    def records_batches(self) -> bool:
        """Its batch_isend_irecv's calls are marked (`Call.batch`: a send or recv without one
        was issued on its own): commbench's own, from schema 3 on."""
        return self.tool == TOOL and self.schema_version >= BATCHES_SINCE

    def payload(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "argv": list(self.argv),
            "world_size": self.world_size,
            "hosts": list(self.hosts),
            "torch_version": self.torch_version,
            "backends": list(self.backends),
            "started": self.started,
            "ended": self.ended,
            "complete": self.complete,
            "parameters": [p.payload() for p in self.parameters],
            "parameters_left_out": self.parameters_left_out,
            "not_captured": [{"op": op, "calls": n} for op, n in self.not_captured],
            "graph_captured": self.graph_captured,
        }

    @classmethod
    def read(cls, doc: Any, where: str) -> Manifest:
        f = Fields(doc, f"{where}:")
        tool = f.opt("tool", line)
        if tool != TOOL:
            said = f"written by {quoted(tool)}" if tool else "without a tool named"
            raise UserError(f"{where}: {said}, not a commbench trace manifest")
        version = f.version(
            SCHEMA_VERSION,
            newer=lambda version: (
                f"{where}: schema_version {version} is from a newer commbench (this one reads "
                f"up to {SCHEMA_VERSION}): upgrade commbench"
            ),
            invalid=lambda version: f"{where}: schema_version {version} is not a trace's",
        )
        return cls(
            schema_version=version,
            tool=tool,
            argv=tuple(f.req("argv", list_of(_argument, max_items=MAX_ARGV))),
            world_size=f.req("world_size", integer_in(1, MAX_WORLD)),
            hosts=tuple(f.opt("hosts", list_of(line, max_items=MAX_HOSTS)) or ()),
            torch_version=f.opt("torch_version", line),
            backends=tuple(f.opt("backends", list_of(line, max_items=MAX_BACKENDS)) or ()),
            started=f.opt("started", number_in(0, _MAX_TIME)) or 0.0,
            ended=f.opt("ended", number_in(0, _MAX_TIME)),
            complete=bool(f.opt("complete", boolean)),
            parameters=Parameter.read_list(f, where),
            parameters_left_out=f.opt("parameters_left_out", integer_in(0, _MAX_NS)) or 0,
            not_captured=tuple(
                (g.req("op", line), g.req("calls", integer_in(1, _MAX_NS)))
                for g in (
                    v.obj()
                    for v in f.items("not_captured", required=False, max_items=MAX_NOT_CAPTURED)
                )
            ),
            graph_captured=f.opt("graph_captured", integer_in(0, _MAX_NS)) or 0,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Trace:
    """A trace read back: its manifest and every rank's calls, in issue order."""

    manifest: Manifest
    calls: Mapping[int, tuple[Call, ...]]
    """Rank -> its calls."""
    torn: Mapping[int, int] = field(default_factory=dict)
    """Rank -> torn last lines skipped (only an incomplete trace has any)."""
    source: str = ""
    """Where it was read from, for messages."""

    @property
    def world_size(self) -> int:
        return self.manifest.world_size

    def notes(self) -> list[str]:
        """What a reader of the trace should be told: an incomplete trace, torn lines."""
        out = []
        if not self.manifest.complete:
            out.append(
                f"{self.source}: the trace is incomplete (recording was still running, or "
                "the job failed or was killed): its last calls may be missing"
            )
        for op, n in self.manifest.not_captured:
            out.append(f"{self.source}: not captured: {n} call(s) of {op} (not replayed)")
        if self.manifest.graph_captured:
            out.append(
                f"{self.source}: {self.manifest.graph_captured} call(s) were captured into "
                "CUDA graphs: each is in the trace once; the graphs' replays never reach the "
                "dispatcher and are not recorded"
            )
        torn = sum(self.torn.values())
        if torn:
            ranks = ", ".join(str(r) for r, n in sorted(self.torn.items()) if n)
            out.append(f"{self.source}: skipped {torn} torn last line(s) (rank {ranks})")
        return out


@derived
def _op_field() -> Conv[str]:
    """A call's `op`: one of `trace_ops()`, naming them when it is another."""
    return one_of(trace_ops())
