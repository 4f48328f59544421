"""Reading a trace directory back (`read_trace`): line by line, each line and the number of
lines bounded, refusing, in one line each, a malformed or truncated line (but the torn last
line of an incomplete trace, which a killed job leaves, is skipped and counted), a newer
schema_version, another tool's file, a pickle (never loaded), a missing rank, a rank file past
the manifest's world size, and what `traces.checks` refuses (ranks and groups the ranks
disagree on)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from commbench.errors import UserError, quoted
from commbench.fields import Fields
from commbench.files import decode, os_error, parse_json, path_kind, read_bytes, shown
from commbench.traces import splits
from commbench.traces.checks import check_groups, check_ranks
from commbench.traces.records import (
    MANIFEST_FILE,
    MAX_CALLS,
    MAX_MANIFEST_BYTES,
    RANK_FILE,
    Call,
    Manifest,
    Trace,
)

MAX_LINE_BYTES = 64 << 10
"""Longest line of a rank file: a call is a few hundred bytes, its group's ranks at most a
few kilobytes per thousand ranks."""

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
    splits.check_splits(call, f"{where}:", len(call.group.ranks) or None)
    if call.rank != rank:
        raise UserError(f"{where}: a call of rank {call.rank} in rank {rank}'s file")
    if call.seq != seq:
        raise UserError(f"{where}: call seq {call.seq} where {seq} was expected (a line lost?)")
    if call.group.ranks and rank not in call.group.ranks:
        raise UserError(
            f"{where}: rank {rank} is not in its call's group {quoted(call.group.name)}"
        )
    if not call.group.ranks and world is not None:  # the whole world: its size is the trace's
        splits.check_splits(call, f"{where}:", world)
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
