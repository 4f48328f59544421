"""What each recorded process says of itself beside its calls: `rank-<N>.meta.json`.

The capture rewrites it at every step's end and when the process ends (`closed`); `commbench
record` reads them all when the job has ended to write the trace's manifest: the world size,
the hosts, the backends, the optimizer's parameters (rank 0's), and whether every rank
closed its file (a rank killed without a chance to close leaves `closed` false: the trace is
then incomplete, whatever the job's exit code)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.fields import Fields, anything, boolean, integer_in, line, list_of
from commbench.files import decode, parse_json, read_bytes, shown
from commbench.traces.trace import MAX_ARGV, MAX_WORLD, Parameter

META_FILE = "rank-{rank}.meta.json"
MAX_META_BYTES = 64 << 20
"""A meta file holds at most a parameter list of MAX_PARAMETERS entries."""


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
    parameters: tuple[Parameter, ...] = ()
    error: str | None = None
    """Why the capture stopped noting calls early (the job itself went on)."""
    closed: bool = False
    """The process ended normally and its rank file is whole."""

    def with_state(self, **changes: Any) -> RankMeta:
        return replace(self, **changes)

    def payload(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "host": self.host,
            "pid": self.pid,
            "torch_version": self.torch_version,
            "argv": list(self.argv),
            "backends": list(self.backends),
            "steps": self.steps,
            "calls": self.calls,
            "unfinished": self.unfinished,
            "parameters": [p.payload() for p in self.parameters],
            "error": self.error,
            "closed": self.closed,
        }

    @classmethod
    def read(cls, path: Path) -> RankMeta:
        where = shown(path)
        text = decode(read_bytes(path, "rank meta file", limit=MAX_META_BYTES), where, "rank meta")
        f = Fields(parse_json(text, where), f"{where}:")
        count = integer_in(0, 1 << 62)
        return cls(
            rank=f.req("rank", integer_in(0, MAX_WORLD - 1)),
            world_size=f.req("world_size", integer_in(1, MAX_WORLD)),
            host=f.req("host", line),
            pid=f.req("pid", count),
            torch_version=f.req("torch_version", line),
            argv=tuple(str(a) for a in f.req("argv", list_of(anything, max_items=MAX_ARGV))),
            backends=tuple(f.opt("backends", list_of(line, max_items=16)) or ()),
            steps=f.opt("steps", count) or 0,
            calls=f.opt("calls", count) or 0,
            unfinished=f.opt("unfinished", count) or 0,
            parameters=Parameter.read_list(f, where),
            error=f.opt("error", line),
            closed=bool(f.opt("closed", boolean)),
        )


def read_metas(directory: Path) -> tuple[list[RankMeta], list[str]]:
    """Every rank meta file of `directory`, by rank, and one line for each that could not be
    read (a process killed while rewriting it leaves only its temporary file)."""
    metas: list[RankMeta] = []
    problems: list[str] = []
    for path in sorted(directory.glob("rank-*.meta.json")):
        try:
            metas.append(RankMeta.read(path))
        except UserError as exc:
            problems.append(str(exc))
    metas.sort(key=lambda m: m.rank)
    return metas, problems
