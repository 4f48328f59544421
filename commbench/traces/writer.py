"""Writing a trace directory: `TraceWriter` streams one rank's calls into its rank file
(bounded memory: a line is written as it comes and flushed at least every `FLUSH_EVERY`
lines), and the writer that holds the manifest marks the trace complete when it closes
without an error; `write_manifest` writes `manifest.json` whole, never larger than the reader
reads (`traces.records` holds the records and their limits)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from commbench.errors import UserError
from commbench.files import dump_json, parse_json, shown
from commbench.traces.names import P2P_OPS
from commbench.traces.records import (
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    RANK_FILE,
    Call,
    Group,
    Manifest,
    kept_parameters,
)

_PAYLOAD_KEYS = {"async_op": "async"}
"""A `Call` field whose key in a line is another name."""
_LINE_CHANGES = frozenset({"completed_ns", "async_op"})
"""The changes `TraceWriter.write` writes without building the call's payload."""
MAX_REMEMBERED = 4096
"""Strings and groups a `TraceWriter` keeps the JSON of (past it, each is encoded anew)."""
FLUSH_EVERY = 256
"""Lines a `TraceWriter` writes between flushes: a reader of a running job sees its calls."""
MAX_RESTEP_BYTES = 64 << 20
"""Most bytes of a rank file `TraceWriter.restep` rewrites (read whole): the calls after a
job's last optimizer step, or the start-up and step 1, are a few lines in every job seen."""


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
