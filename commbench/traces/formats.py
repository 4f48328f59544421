"""Which trace a path holds, told from its content (never its name), and the reading of
other tools' per-rank files into one `Trace`.

A directory with `manifest.json` is commbench's own trace. Any other directory, or files,
are another tool's, one file per rank: each file's format is detected from what it holds
(`FORMATS`), and its rank is the number that ends its name (`rank_3`, `3.json`,
`chakra.3.json`), the convention of every producer read here (the Flight Recorder's
`<prefix><rank>`, PARAM's `<rank>.json`). A file no reader knows is one line naming the
formats known; a pickle is refused without being loaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.files import MAX_FILE_BYTES, check_depth, decode, path_kind, read_bytes, shown
from commbench.traces import chakra, flight_recorder, param
from commbench.traces.checks import check_groups, check_ranks
from commbench.traces.names import MAX_WORLD
from commbench.traces.reader import is_pickle, read_trace, refuse_pickle
from commbench.traces.records import MANIFEST_FILE, MAX_CALLS, Call, Manifest, Trace

MAX_TRACE_FILE_BYTES = MAX_FILE_BYTES
"""Largest foreign trace file read (it is parsed whole, unlike commbench's own)."""
MAX_FILES = 1 << 14
FORMATS = {
    "commbench": f"commbench trace directory (with {MANIFEST_FILE})",
    param.FORMAT: param.TITLE,
    flight_recorder.FORMAT: flight_recorder.TITLE,
    chakra.FORMAT: chakra.TITLE,
}
"""Every format read, and how a message names it."""
_RANK = re.compile(r"(\d+)$")
_MAX_INT_DIGITS = 40


def known() -> str:
    return "; ".join(FORMATS.values())


def _bounded_int(text: str) -> int:
    if len(text) > _MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def parse_documents(text: str, where: str) -> list[Any]:
    """The JSON documents of `text`, one after another (the jsonizer writes its objects
    back to back), bounded as `files.parse_json` bounds one."""
    decoder = json.JSONDecoder(parse_int=_bounded_int, parse_constant=lambda _: None)
    docs: list[Any] = []
    at = 0
    end = len(text)
    while True:
        while at < end and text[at] in " \t\r\n":
            at += 1
        if at >= end:
            return docs
        if len(docs) >= MAX_CALLS:
            raise UserError(f"{where}: more than {MAX_CALLS} JSON documents: too many to read")
        try:
            doc, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        except (ValueError, RecursionError) as exc:
            raise UserError(f"{where}: not a trace commbench reads: {exc}") from None
        check_depth(doc, where)
        docs.append(doc)


def detect(docs: list[Any]) -> str | None:
    """The format of a file's parsed documents, None when no reader knows them."""
    if len(docs) == 1 and flight_recorder.detect(docs[0]):
        return flight_recorder.FORMAT
    if len(docs) == 1 and param.detect(docs[0]):
        return param.FORMAT
    if chakra.detect(docs):
        return chakra.FORMAT
    if len(docs) == 1 and isinstance(docs[0], list) and chakra.detect(docs[0]):
        return chakra.FORMAT
    return None


def _read_file(path: Path) -> tuple[str, list[Any]]:
    where = shown(path)
    data = read_bytes(path, "trace file", limit=MAX_TRACE_FILE_BYTES)
    if is_pickle(data):
        raise refuse_pickle(
            where,
            f"a Flight Recorder dump is pickled unless asked for JSON; {flight_recorder.PICKLE_ADVICE}",
        )
    try:
        text = decode(data, where, "trace file")
        if not text.strip():
            raise UserError(f"{where}: empty: not a trace")
        docs = parse_documents(text, where)
    except UserError as exc:
        raise UserError(f"{exc}; commbench reads: {known()}") from None
    fmt = detect(docs)
    if fmt is None:
        raise UserError(f"{where}: not a trace commbench reads; it reads: {known()}")
    if fmt == chakra.FORMAT and len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    return fmt, docs


def rank_of(path: Path, files: int) -> int:
    """The rank a file is for: the number its name (without the extension) ends with; 0
    for a single file without one."""
    match = _RANK.search(path.stem if path.suffix == ".json" else path.name)
    if match is None:
        match = _RANK.search(path.stem)
    if match is None:
        if files == 1:
            return 0
        raise UserError(
            f"{shown(path)}: cannot tell which rank it is for: end each file's name with its "
            "rank (rank_0, 1.json)"
        )
    rank = int(match.group(1)[-8:])
    if rank >= MAX_WORLD:
        raise UserError(f"{shown(path)}: rank {rank} is past {MAX_WORLD - 1}")
    return rank


def load_any(path: Path | str) -> Trace:
    """The trace at `path`: commbench's trace directory, or another tool's file or
    directory of per-rank files."""
    path = Path(path)
    kind = path_kind(path, "trace")
    if kind == "missing":
        raise UserError(f"{shown(path)}: no such trace")
    if kind == "dir":
        if path_kind(path / MANIFEST_FILE, "trace manifest") != "missing":
            return read_trace(path)
        files = sorted(p for p in path.iterdir() if not p.name.startswith("."))
        files = [p for p in files if path_kind(p, "trace file") == "file"]
        if not files:
            raise UserError(
                f"{shown(path)}: no {MANIFEST_FILE} and no trace files: not a trace; "
                f"commbench reads: {known()}"
            )
        return load_files(files)
    return load_files([path])


def load_files(paths: Sequence[Path]) -> Trace:
    """Another tool's per-rank files (one format), read into one checked `Trace`."""
    if len(paths) > MAX_FILES:
        raise UserError(f"{len(paths)} trace files, more than {MAX_FILES}")
    read: list[tuple[Path, int, str, list[Any]]] = []
    for p in paths:
        fmt, docs = _read_file(p)
        read.append((p, rank_of(p, len(paths)), fmt, docs))
    formats = {fmt for _, _, fmt, _ in read}
    if len(formats) > 1:
        raise UserError(f"the trace files mix formats ({', '.join(sorted(formats))}): give one")
    fmt = formats.pop()
    ranks = [r for _, r, _, _ in read]
    if len(set(ranks)) != len(ranks):
        raise UserError("two trace files are for the same rank (the number that ends their names)")
    world = max(ranks) + 1
    _check_every_rank(fmt, ranks, world)  # before the calls, which the world helps read
    calls: dict[int, tuple[Call, ...]] = {}
    total = 0
    for p, rank, _, docs in read:
        where = shown(p)
        if fmt == param.FORMAT:
            got = param.read(docs[0], rank, where, world_size=world)
        elif fmt == flight_recorder.FORMAT:
            got = flight_recorder.read(docs[0], rank, where, world_size=world)
        else:
            got = chakra.read(docs, rank, where, world_size=world)
        total += len(got)
        if total > MAX_CALLS:
            raise UserError(f"the trace holds more than {MAX_CALLS} calls: too many to read")
        calls[rank] = tuple(got)
    world = max([world, *(max(c.group.ranks, default=0) + 1 for cs in calls.values() for c in cs)])
    _check_every_rank(fmt, list(calls), world)
    where = shown(paths[0].parent) if len(paths) > 1 else shown(paths[0])
    check_ranks(calls, world, where)
    check_groups(calls, where)
    manifest = Manifest(argv=(), world_size=world, complete=True, tool=fmt)
    return Trace(manifest=manifest, calls=calls, source=where)


def _check_every_rank(fmt: str, ranks: Sequence[int], world: int) -> None:
    """Refuse files that leave a rank of the world out (work per file, not per rank)."""
    have = sorted(set(ranks))
    if len(have) == world:
        return
    missing = next((i for i, r in enumerate(have) if r != i), len(have))
    shown_ranks = ", ".join(str(r) for r in have[:8]) + (", ..." if len(have) > 8 else "")
    raise UserError(
        f"the {FORMATS[fmt]} files cover ranks {shown_ranks} of {world}: rank {missing}'s "
        "file is missing"
    )
