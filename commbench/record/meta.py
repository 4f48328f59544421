"""What each recorded process says of itself beside its calls: `rank-<N>.meta.json`, and
rank 0's optimizer's parameters: `parameters.json`.

The capture rewrites a meta file at every step's end and when the process ends (`closed`);
`commbench record` reads them all when the job has ended to write the trace's manifest: the
world size, the hosts, the backends, and whether every rank closed its file (a rank killed
without a chance to close leaves `closed` false: the trace is then incomplete, whatever the
job's exit code). The parameters are written once, at rank 0's first optimizer step, in a
file of their own: a meta file rewritten at every step would rewrite a model's hundred
thousand parameters at every step too (seconds of JSON, on the job's time)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.fields import Fields, anything, boolean, integer_in, line, list_of, pick
from commbench.files import decode, dump_json, parse_json, path_kind, read_bytes, shown
from commbench.traces.names import MAX_WORLD
from commbench.traces.records import (
    MAX_ARGV,
    MAX_BACKENDS,
    MAX_MANIFEST_BYTES,
    MAX_NOT_CAPTURED,
    Parameter,
    kept_parameters,
)

META_FILE = "rank-{rank}.meta.json"
PARAMETERS_FILE = "parameters.json"
MAX_META_BYTES = MAX_MANIFEST_BYTES
"""A meta file or the parameters' file holds no more than the manifest they are written into
(its parameter list at most MAX_PARAMETERS entries, `kept_parameters`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankMeta:
    rank: int
    world_size: int
    host: str
    pid: int
    torch_version: str
    argv: tuple[str, ...]
    """The process's own command line (`train.py --lr ...`; torchrun's worker's)."""
    backends: tuple[str, ...] = ()
    steps: int = 0
    """Steps closed so far (optimizer steps, or `commbench.record.step()`)."""
    calls: int = 0
    unfinished: int = 0
    """Calls written without having been seen complete."""
    error: str | None = None
    """Why the capture stopped noting calls early (the job itself went on)."""
    not_captured: tuple[tuple[str, int], ...] = ()
    """Calls of operators the trace cannot hold (`symm_mem::*`), by operator."""
    graph_captured: int = 0
    """Calls noted while a CUDA graph was being captured."""
    closed: bool = False
    """The process ended normally and its rank file is whole."""
    ended: str | None = None
    """How the process ended, as its capture saw it when it closed the file: "exit" (its
    program ran to its end), "exception <type>" (it died of one), "SIGTERM". A job that exits
    non-zero after every rank's program ran to its end failed in its teardown (torch's, at
    exit): its trace holds every call."""

    def with_state(self, **changes: Any) -> RankMeta:
        return replace(self, **changes)

    def payload(self) -> dict[str, Any]:
        return {
            **pick(self, "rank", "world_size", "host", "pid", "torch_version"),
            "argv": list(self.argv),
            "backends": list(self.backends),
            **pick(self, "steps", "calls", "unfinished", "error"),
            "not_captured": [{"op": op, "calls": n} for op, n in self.not_captured],
            "graph_captured": self.graph_captured,
            "closed": self.closed,
            "ended": self.ended,
        }

    @classmethod
    def read(cls, path: Path) -> RankMeta:
        f = _read(path, "rank meta file")
        count = _COUNT
        return cls(
            rank=f.req("rank", integer_in(0, MAX_WORLD - 1)),
            world_size=f.req("world_size", integer_in(1, MAX_WORLD)),
            host=f.req("host", line),
            pid=f.req("pid", count),
            torch_version=f.req("torch_version", line),
            argv=tuple(str(a) for a in f.req("argv", list_of(anything, max_items=MAX_ARGV))),
            backends=tuple(f.opt("backends", list_of(line, max_items=MAX_BACKENDS)) or ()),
            steps=f.opt("steps", count) or 0,
            calls=f.opt("calls", count) or 0,
            unfinished=f.opt("unfinished", count) or 0,
            error=f.opt("error", line),
            not_captured=tuple(
                (g.req("op", line), g.req("calls", count))
                for g in (
                    v.obj()
                    for v in f.items("not_captured", required=False, max_items=MAX_NOT_CAPTURED)
                )
            ),
            graph_captured=f.opt("graph_captured", count) or 0,
            closed=bool(f.opt("closed", boolean)),
            ended=f.opt("ended", line),
        )


def read_metas(paths: Iterable[Path]) -> tuple[list[RankMeta], list[str]]:
    """The rank meta files `paths`, by rank, and one line for each that could not be read (a
    process killed while rewriting it leaves only its temporary file; a job may have written
    anything under the name)."""
    metas: list[RankMeta] = []
    problems: list[str] = []
    for path in sorted(paths):
        try:
            metas.append(RankMeta.read(path))
        except UserError as exc:
            problems.append(str(exc))
    metas.sort(key=lambda m: m.rank)
    return metas, problems


@dataclass(frozen=True, slots=True)
class Stepped:
    """The parameters rank 0's optimizer stepped (`parameters.json`): in its order, or none
    of them and how many (`kept_parameters`: past what a trace lists)."""

    parameters: tuple[Parameter, ...]
    left_out: int = 0

    @classmethod
    def of(cls, parameters: Sequence[Parameter]) -> Stepped:
        return cls(*kept_parameters(parameters))

    def write(self, directory: Path) -> None:
        """Once, whole (a temporary file renamed), compact: a quarter of a second for a
        hundred thousand parameters, where indented JSON takes seconds."""
        path = directory / PARAMETERS_FILE
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        payload = {
            "parameters": [p.payload() for p in self.parameters],
            "parameters_left_out": self.left_out,
        }
        tmp.write_text(dump_json(payload, indent=None))
        os.replace(tmp, path)

    @classmethod
    def read(cls, directory: Path) -> Stepped | None:
        """What rank 0 wrote; None when it wrote nothing (no optimizer step)."""
        path = directory / PARAMETERS_FILE
        if path_kind(path, "parameter list") == "missing":
            return None
        f = _read(path, "parameter list")
        return cls(Parameter.read_list(f, shown(path)), f.opt("parameters_left_out", _COUNT) or 0)


_COUNT = integer_in(0, 1 << 62)


def _read(path: Path, what: str) -> Fields:
    where = shown(path)
    text = decode(read_bytes(path, what, limit=MAX_META_BYTES), where, what)
    return Fields(parse_json(text, where), f"{where}:")
