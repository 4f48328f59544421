"""commbench's trace directory: what `commbench record` writes and `commbench replay` reads
(issue 26); docs/traces.md describes the files.

    TRACE/manifest.json      the job: the command, world size, hosts, torch, times, `complete`
    TRACE/rank-<N>.jsonl     rank N's calls, one strict-JSON `Call` a line, in issue order

`TraceWriter` streams one rank's calls (bounded memory: a line is written as it comes and
flushed at least every `FLUSH_EVERY` lines), and the writer that holds the manifest marks the
trace complete when it closes without an error. `read_trace` reads a directory back line by
line, each line and the number of lines bounded, and refuses, in one line each: a malformed
or truncated line (but the torn last line of an incomplete trace, which a killed job leaves,
is skipped and counted), a newer schema_version, another tool's file, a pickle (never
loaded), a missing rank, and groups whose ranks or call sequences disagree between ranks
(`check_groups`, which the readers of other tools' traces run too).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from commbench.errors import UserError, quoted
from commbench.fields import (
    Conv,
    Fields,
    anything,
    boolean,
    integer,
    integer_in,
    line,
    list_of,
    number_in,
    one_of,
    pick,
    string,
)
from commbench.files import decode, dump_json, os_error, parse_json, path_kind, read_bytes, shown
from commbench.ops import derived, traced
from commbench.traces import splits
from commbench.traces.names import ELEMENT_BYTES, MAX_WORLD, P2P_OPS, no_data, trace_ops

SCHEMA_VERSION = 3
"""The version of the trace directory's files this commbench writes and reads (and older).
2: an all_to_all's splits (`Call.in_splits`, `out_splits`), left out when even; a trace of
1 recorded none, and its all_to_alls are replayed even (`splits`).
3: the sends and receives of one `batch_isend_irecv` carry `Call.batch`; a trace of 2 or
before does not say, and its consecutive async sends and receives are replayed as one batch."""
SPLITS_SINCE = 2
BATCHES_SINCE = 3
_PAYLOAD_KEYS = {"async_op": "async"}
"""A `Call` field whose key in a line is another name."""
_LINE_CHANGES = frozenset({"completed_ns", "async_op"})
"""The changes `TraceWriter.write` writes without building the call's payload."""
MAX_REMEMBERED = 4096
"""Strings and groups a `TraceWriter` keeps the JSON of (past it, each is encoded anew)."""


def _json_value(value: Any) -> str:
    """An int, bool or None as JSON; anything else as `dump_json` writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    return dump_json(value, indent=None)[:-1]


def _json_list(values: Sequence[Any]) -> str:
    return "[" + ", ".join(map(_json_value, values)) + "]"


"""The first version whose all_to_all without splits was even (before it: not recorded)."""
TOOL = "commbench"
MANIFEST_FILE = "manifest.json"
RANK_FILE = "rank-{rank}.jsonl"

MAX_LINE_BYTES = 64 << 10
"""Longest line of a rank file: a call is a few hundred bytes, its group's ranks at most a
few kilobytes per thousand ranks."""
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
FLUSH_EVERY = 256
MAX_RESTEP_BYTES = 64 << 20
"""Most bytes of a rank file `TraceWriter.restep` rewrites (read whole): the calls after a
job's last optimizer step, or the start-up and step 1, are a few lines in every job seen."""

PICKLE_PROTOCOLS = range(2, 6)


def is_pickle(head: bytes) -> bool:
    """True for the start of a Python pickle of protocol 2 to 5 (0x80, then the protocol)."""
    return len(head) >= 2 and head[0] == 0x80 and head[1] in PICKLE_PROTOCOLS


def refuse_pickle(where: str, how: str = "") -> UserError:
    """The one line for a pickle: commbench never unpickles (loading one runs code)."""
    advice = how or "write the trace as JSON"
    return UserError(
        f"{where}: a Python pickle, which commbench never loads (it can run code): {advice}"
    )


# -- the records ---------------------------------------------------------------------------------


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
        group = f.sub("group")
        if group is None:
            raise UserError(f"{f.at('group')}: missing")
        call = cls(
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
        call.check_splits(f.where, len(call.group.ranks) or None)
        return call

    def check_splits(self, where: str, members: int | None) -> None:
        """Refuse splits this call cannot hold (`splits.check_call`): on another op than
        all_to_all, not one per member of a group of `members` ranks (None: not known), or
        not summing to its input's or output's bytes. `where` names the line (`FILE: line
        3:`), which the message follows with the field."""
        element = splits.call_element(self)
        for name, side, nbytes, value in (
            ("in_splits", "input", self.in_bytes, self.in_splits),
            ("out_splits", "output", self.out_bytes, self.out_splits),
        ):
            splits.check_call(
                value,
                where=f"{where} {name}",
                side=side,
                op=self.op,
                nbytes=nbytes,
                element=element,
                members=members,
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
        version = f.req("schema_version", integer)
        if version > SCHEMA_VERSION:
            raise UserError(
                f"{where}: schema_version {version} is from a newer commbench (this one reads "
                f"up to {SCHEMA_VERSION}): upgrade commbench"
            )
        if version < 1:
            raise UserError(f"{where}: schema_version {version} is not a trace's")
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


# -- writing -------------------------------------------------------------------------------------


def write_manifest(directory: Path, manifest: Manifest) -> Manifest:
    """Write `manifest.json` whole (a new temporary file renamed over it), so that a reader
    never sees half of one, and never larger than a reader reads (MAX_MANIFEST_BYTES): a
    parameter list that would make it so is left out, and counted (`parameters_left_out`),
    and a manifest the reader would refuse otherwise is not written. Returns the manifest as
    written; UserError, naming the file and what is wrong, when it cannot be."""
    path = directory / MANIFEST_FILE
    # the reader's own checks, on all but the parameter list (typed, and counted below)
    head = replace(manifest, parameters=())
    Manifest.read(parse_json(dump_json(head.payload()), shown(path)), shown(path))
    kept, left_out = kept_parameters(manifest.parameters)
    manifest = replace(
        manifest, parameters=kept, parameters_left_out=manifest.parameters_left_out + left_out
    )
    data = dump_json(manifest.payload()).encode()
    if len(data) > MAX_MANIFEST_BYTES and manifest.parameters:
        manifest = replace(
            manifest,
            parameters=(),
            parameters_left_out=manifest.parameters_left_out + len(manifest.parameters),
        )
        data = dump_json(manifest.payload()).encode()
    if len(data) > MAX_MANIFEST_BYTES:
        raise UserError(
            f"{shown(path)}: the manifest would be {len(data)} bytes, more than the "
            f"{MAX_MANIFEST_BYTES} a reader reads"
        )
    # The job shares the directory: whatever it left under the temporary name (a FIFO would
    # block the open, a link would redirect it) is removed, and the file created anew.
    tmp = directory / f".{MANIFEST_FILE}.{os.getpid()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(tmp, flags, 0o644), "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UserError(f"cannot write {shown(path)}: {exc.strerror or exc}") from None
    return manifest


@dataclass(frozen=True, slots=True)
class Mark:
    """A place in a rank file being written: the byte offset of a line and its call's seq."""

    offset: int
    seq: int


class TraceWriter:
    """Streams one rank's calls into `rank-<N>.jsonl`. The writer given the `manifest` (one
    process of the job, rank 0's) writes it first with complete=false, and at `close` with
    the end time and complete=true, unless the job failed (`close(complete=False)`, or the
    `with` block raised)."""

    def __init__(self, directory: Path, rank: int, *, manifest: Manifest | None = None) -> None:
        self.directory = Path(directory)
        self.rank = rank
        self.manifest = manifest
        self.directory.mkdir(parents=True, exist_ok=True)
        if manifest is not None:
            write_manifest(self.directory, replace(manifest, complete=False, ended=None))
        # read back too, by `restep`; every line is ASCII (strict JSON, ensure_ascii)
        self._fh: IO[bytes] | None = open(  # noqa: SIM115 (closed by close())
            self.directory / RANK_FILE.format(rank=rank), "w+b"
        )
        self._seq = 0
        self._offset = 0
        self._group_seq: dict[str, int] = {}
        self._unflushed = 0
        self._texts: dict[Any, str] = {}
        self._groups: dict[str, tuple[Group, str]] = {}

    def write(self, call: Call, **changes: Any) -> None:
        """Append `call` as this rank's next: its `rank`, `seq` and `group_seq` are the
        writer's (a send or recv has no group_seq); `changes` are fields of it written
        otherwise (`completed_ns=`, `async_op=`), without a copy of the call: the capture
        writes a line per call the job makes, on the job's own thread."""
        if self._fh is None:
            raise ValueError("the trace writer is closed")
        group_seq = None
        if call.op not in P2P_OPS:
            group_seq = self._group_seq.get(call.group.name, 0)
            self._group_seq[call.group.name] = group_seq + 1
        if changes.keys() <= _LINE_CHANGES:
            data = self._line(call, group_seq, changes).encode("ascii")
        else:
            payload = call.payload()
            payload.update(rank=self.rank, seq=self._seq, group_seq=group_seq)
            for name, value in changes.items():
                payload[_PAYLOAD_KEYS.get(name, name)] = value
            data = dump_json(payload, indent=None).encode("ascii")
        self._fh.write(data)
        self._offset += len(data)
        self._seq += 1
        self._unflushed += 1
        if self._unflushed >= FLUSH_EVERY:
            self.flush()

    def _line(self, call: Call, group_seq: int | None, changes: Mapping[str, Any]) -> str:
        """`call`'s line as `dump_json(payload)` writes it, character for character, without
        building the payload: the capture writes one per call the job makes, on the job's
        thread, and the dict, the merges and a fresh encoder cost it 15 us a call, this a few
        (tests/test_trace_writer.py holds the two to the same text)."""
        text = self._text
        value = _json_value
        completed = changes.get("completed_ns", call.completed_ns)
        async_op = changes.get("async_op", call.async_op)
        head = (
            f'{{"rank": {value(self.rank)}, "seq": {value(self._seq)}, "op": {text(call.op)}, '
            f'"name": {text(call.name)}, "in_bytes": {value(call.in_bytes)}, '
            f'"out_bytes": {value(call.out_bytes)}, "dtype": {text(call.dtype)}, '
            f'"count": {value(call.count)}, "group": {self._group_text(call.group)}, '
            f'"async": {value(async_op)}, "issued_ns": {value(call.issued_ns)}, '
            f'"completed_ns": {value(completed)}, "host": {text(call.host)}, '
            f'"device": {text(call.device)}, "step": {value(call.step)}, '
            f'"group_seq": {value(group_seq)}, "peer": {value(call.peer)}'
        )
        tail = []
        if call.in_splits is not None:
            tail.append(f', "in_splits": {_json_list(call.in_splits)}')
        if call.out_splits is not None:
            tail.append(f', "out_splits": {_json_list(call.out_splits)}')
        if call.graph:
            tail.append(', "graph": true')
        if call.batch is not None:
            tail.append(f', "batch": {value(call.batch)}')
        if call.cpu_ns is not None:
            tail.append(f', "cpu_ns": {value(call.cpu_ns)}')
        return head + "".join(tail) + "}\n"

    def _text(self, value: Any) -> str:
        """A string as JSON (ASCII, escaped), remembered: a job's names, dtypes, hosts and
        devices are a handful, written again on every line."""
        out = self._texts.get(value)
        if out is None:
            out = dump_json(value, indent=None)[:-1]
            if len(self._texts) < MAX_REMEMBERED:
                self._texts[value] = out
        return out

    def _group_text(self, group: Group) -> str:
        known = self._groups.get(group.name)
        if known is not None and (known[0] is group or known[0] == group):
            return known[1]
        out = dump_json(group.payload(), indent=None)[:-1]
        if len(self._groups) < MAX_REMEMBERED:
            self._groups[group.name] = (group, out)
        return out

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            self._unflushed = 0

    @property
    def written(self) -> int:
        """Calls written so far: the next call's `seq`."""
        return self._seq

    def mark(self) -> Mark:
        """Where the next call will be written, for `restep`."""
        return Mark(offset=self._offset, seq=self._seq)

    def restep(self, start: Mark, seqs: range, step: int | None) -> bool:
        """Give the calls of `seqs`, written at or after `start`, the step `step`: the capture
        learns a call's step after writing it (the last calls of the start-up repeat step 2's
        first ones: they were step 1's; the calls after the job's last optimizer step belong to
        none). Rewrites the file from `start` on, the other calls byte for byte, through the
        handle it writes with (a job that moved or removed its trace directory changes
        nothing here). False, and nothing changed, when more than MAX_RESTEP_BYTES follow
        `start`: the calls keep the step they were written with."""
        if self._fh is None:
            raise ValueError("the trace writer is closed")
        if not seqs or self._offset - start.offset > MAX_RESTEP_BYTES:
            return False
        self._fh.flush()
        self._fh.seek(start.offset)
        lines = self._fh.read(self._offset - start.offset).splitlines(keepends=True)
        out = []
        for seq, raw in enumerate(lines, start.seq):
            if seq in seqs:
                payload = json.loads(raw)
                payload["step"] = step
                raw = dump_json(payload, indent=None).encode("ascii")
            out.append(raw)
        data = b"".join(out)
        self._fh.seek(start.offset)
        self._fh.write(data)
        self._fh.truncate()
        self._fh.flush()
        self._offset = start.offset + len(data)
        return True

    def close(self, *, complete: bool = True) -> None:
        if self._fh is None:
            return
        self._fh.close()
        self._fh = None
        if self.manifest is not None:
            write_manifest(
                self.directory, replace(self.manifest, complete=complete, ended=time.time())
            )

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc_info: object) -> None:
        self.close(complete=kind is None)


# -- reading -------------------------------------------------------------------------------------


def _open_regular(path: Path, what: str) -> IO[bytes]:
    """`path` opened for reading, when it is a regular file (a FIFO would block)."""
    kind = path_kind(path, what)
    if kind != "file":
        raise UserError(f"{shown(path)}: {'no such' if kind == 'missing' else 'not a'} {what}")
    try:
        fh = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except OSError as exc:
        raise os_error(path, exc, what) from None
    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
        fh.close()
        raise UserError(f"{shown(path)}: not a regular file, expected a {what}")
    return fh


def read_lines(path: Path, what: str) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line of `path`, read one at a time, none longer than
    MAX_LINE_BYTES (UserError naming the line); a pickle is refused at its first bytes."""
    with _open_regular(path, what) as fh:
        number = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if number == 1 and is_pickle(raw):
                raise refuse_pickle(shown(path))
            if len(raw) > MAX_LINE_BYTES:
                raise UserError(
                    f"{shown(path)}: line {number} is longer than {MAX_LINE_BYTES} bytes: "
                    f"not a {what} commbench reads"
                )
            yield number, raw


def held_calls(path: Path, chunk: int = 1 << 20) -> int:
    """The calls rank file `path` holds, counted without parsing them: its whole lines (a
    torn last line, of a rank killed while writing it, is no call). What a summary counts
    where the rank's own count may be stale (a rank killed outright)."""
    with _open_regular(path, "trace rank file") as fh:
        lines = 0
        while block := fh.read(chunk):
            lines += block.count(b"\n")
        return lines


def read_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST_FILE
    data = read_bytes(path, "trace manifest", limit=MAX_MANIFEST_BYTES)
    if is_pickle(data):
        raise refuse_pickle(shown(path))
    text = decode(data, shown(path), "trace manifest")
    return Manifest.read(parse_json(text, shown(path)), shown(path))


def read_rank(
    path: Path, rank: int, *, complete: bool, budget: int, world: int | None = None
) -> tuple[list[Call], int]:
    """Rank `rank`'s calls from `path`, and how many torn last lines were skipped. At most
    `budget` calls (the trace's remaining share of MAX_CALLS); `world`, the trace's world
    size, is the size of a group whose ranks are not said (for its splits)."""
    where = shown(path)
    calls: list[Call] = []
    torn = 0
    pending: tuple[int, bytes] | None = None  # the line read last, checked once we know
    for number, raw in read_lines(path, "trace rank file"):
        if pending is not None:
            calls.append(_call(pending[1], f"{where}: line {pending[0]}", rank, len(calls), world))
        if not raw.strip():
            pending = None
            continue
        if len(calls) >= budget:
            raise UserError(
                f"{where}: the trace holds more than {MAX_CALLS} calls: too many to read"
            )
        pending = (number, raw)
    if pending is not None:
        number, raw = pending
        if raw.endswith(b"\n") or complete:
            calls.append(_call(raw, f"{where}: line {number}", rank, len(calls), world))
        else:
            try:
                calls.append(_call(raw, f"{where}: line {number}", rank, len(calls), world))
            except UserError:
                torn = 1  # a killed writer's half line: the journal's rule
    return calls, torn


def _call(raw: bytes, where: str, rank: int, seq: int, world: int | None) -> Call:
    text = decode(raw, where, "trace line")
    if not text.strip().startswith("{"):
        raise UserError(f"{where}: not a call (a trace line is a JSON object)")
    call = Call.read(Fields(parse_json(text, where), f"{where}:"))
    if call.rank != rank:
        raise UserError(f"{where}: a call of rank {call.rank} in rank {rank}'s file")
    if call.seq != seq:
        raise UserError(f"{where}: call seq {call.seq} where {seq} was expected (a line lost?)")
    if call.group.ranks and rank not in call.group.ranks:
        raise UserError(
            f"{where}: rank {rank} is not in its call's group {quoted(call.group.name)}"
        )
    if not call.group.ranks and world is not None:  # the whole world: its size is the trace's
        call.check_splits(f"{where}:", world)
    return call


def read_trace(directory: Path | str) -> Trace:
    """A trace directory, read and checked (see the module's docstring)."""
    directory = Path(directory)
    kind = path_kind(directory, "trace directory")
    if kind != "dir":
        what = "no such" if kind == "missing" else "not a"
        raise UserError(f"{shown(directory)}: {what} trace directory")
    manifest = read_manifest(directory)
    calls: dict[int, tuple[Call, ...]] = {}
    torn: dict[int, int] = {}
    total = 0
    for rank in range(manifest.world_size):
        path = directory / RANK_FILE.format(rank=rank)
        if path_kind(path, "trace rank file") == "missing":
            raise UserError(
                f"{shown(directory)}: rank {rank}'s calls are missing ({path.name}): a trace "
                f"of world size {manifest.world_size} has a file for every rank"
            )
        rank_calls, rank_torn = read_rank(
            path,
            rank,
            complete=manifest.complete,
            budget=MAX_CALLS - total,
            world=manifest.world_size,
        )
        calls[rank] = tuple(rank_calls)
        total += len(rank_calls)
        if rank_torn:
            torn[rank] = rank_torn
    check_no_rank_past_world(directory, manifest.world_size)
    check_ranks(calls, manifest.world_size, shown(directory))
    check_groups(calls, shown(directory), whole=manifest.complete)
    if manifest.records_splits:  # members that disagree on what they exchange: refused here
        splits.exchanges(calls, manifest.world_size, recorded=True, where=shown(directory))
    return Trace(manifest=manifest, calls=calls, torn=torn, source=shown(directory))


# -- the checks every trace passes ---------------------------------------------------------------

_RANK_FILE_NAME = re.compile(re.escape(RANK_FILE).replace(re.escape("{rank}"), "(0|[1-9][0-9]*)"))


def check_no_rank_past_world(directory: Path, world: int) -> None:
    """Refuse a trace directory holding a rank's calls past the manifest's world size: the
    manifest and the files disagree (a world written short, a rank that left calls but
    never said so), and a replay of the world alone would leave that rank's calls out
    without a word. One pass over the directory's names."""
    try:
        with os.scandir(directory) as entries:
            past = sorted(
                int(m[1])
                for e in entries
                if (m := _RANK_FILE_NAME.fullmatch(e.name)) is not None and int(m[1]) >= world
            )
    except OSError as exc:
        raise os_error(directory, exc, "trace directory") from None
    if past:
        more = f" and {len(past) - 1} more" if len(past) > 1 else ""
        raise UserError(
            f"{shown(directory)}: holds {RANK_FILE.format(rank=past[0])}{more}, past the "
            f"manifest's world size {world}: the manifest and the rank files disagree"
        )


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


@derived
def _op_field() -> Conv[str]:
    """A call's `op`: one of `trace_ops()`, naming them when it is another."""
    return one_of(trace_ops())


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
