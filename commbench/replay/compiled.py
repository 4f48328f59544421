"""The program a replay's workers run, written once by the launcher and read by each worker
in its part: `program.json` (the world, the subgroups, the rows, the parameters) and one
`rank-<N>.jsonl` per traced rank (its calls as copy 0 of the traced job replays them, a
line per step). Replay rank r reads traced rank r % W's file and moves each call to its
copy r // W (`program.in_copy`): the files are the trace's size, whatever `--world` is.

Why not let every worker read the trace: a trace holds every rank's calls, up to 20 million;
read by each of a node's workers, its memory would be paid once per GPU. The launcher reads
and checks it once; a worker then holds its own calls only. The files are commbench's own,
written just before the workers start and kept in the run directory (`program/`) as the
record of what was replayed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from commbench.files import dump_json
from commbench.replay.buckets import Reducer
from commbench.replay.program import Groups, Issue, Program, RowSpec, in_copy, traced_sequence
from commbench.traces.records import Parameter, Trace

PROGRAM_FILE = "program.json"
RANK_FILE = "rank-{rank}.jsonl"
_ISSUE_FIELDS = (
    "op",
    "size_bytes",
    "dtype",
    "group",
    "async_op",
    "peer",
    "offset_s",
    "in_splits",
    "out_splits",
    "busy_s",
    "batch",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Compiled:
    """What a worker needs of the program besides its own calls."""

    world: int
    groups: Groups
    rows: tuple[RowSpec, ...]
    steps: int
    """Steps each rank's file holds."""
    reducer: Reducer
    """The recorded job's DDP: what the bucket advisor regroups."""
    directory: Path

    def sequence(self, rank: int) -> list[list[Issue]]:
        """Replay rank `rank`'s calls, per step: its traced rank's, read a line at a time,
        moved to its copy."""
        copy, traced_rank = divmod(rank, self.groups.traced)
        path = self.directory / RANK_FILE.format(rank=traced_rank)
        return [[in_copy(i, copy, self.groups) for i in step] for step in _read_steps(path)]


def write(trace: Trace, program: Program, directory: Path) -> None:
    """Write the program of `trace` into `directory` (made here)."""
    directory.mkdir(parents=True, exist_ok=True)
    head = {
        "world": program.world,
        "groups": program.groups.payload(),
        "rows": [asdict(r) for r in program.rows],
        "steps": len(program.steps),
        "reducer": program.reducer.payload(),
    }
    (directory / PROGRAM_FILE).write_text(dump_json(head))
    for rank in range(min(program.traced_world, program.world)):  # the traced ranks replayed
        with open(directory / RANK_FILE.format(rank=rank), "w", encoding="utf-8") as fh:
            for issues in traced_sequence(trace, program, rank):
                line = [[getattr(i, name) for name in _ISSUE_FIELDS] for i in issues]
                fh.write(dump_json(line, indent=None))


def read(directory: Path) -> Compiled:
    head: dict[str, Any] = json.loads((directory / PROGRAM_FILE).read_text())
    rows = []
    for r in head["rows"]:
        r["shapes"] = tuple(r["shapes"])
        if r["splits"] is not None:
            r["splits"] = tuple(map(tuple, r["splits"]))
        rows.append(RowSpec(**r))
    groups = head["groups"]
    return Compiled(
        world=head["world"],
        groups=Groups(groups["traced"], groups["world"], tuple(map(tuple, groups["shapes"]))),
        rows=tuple(rows),
        steps=head["steps"],
        reducer=Reducer(
            parameters=tuple(Parameter(**p) for p in head["reducer"]["parameters"]),
            find_unused=head["reducer"]["find_unused"],
        ),
        directory=directory,
    )


def _read_steps(path: Path) -> Iterator[list[Issue]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            yield [_issue(item) for item in json.loads(line)]


def _issue(item: list[Any]) -> Issue:
    fields = dict(zip(_ISSUE_FIELDS, item, strict=True))
    for name in ("in_splits", "out_splits"):
        if fields[name] is not None:
            fields[name] = tuple(fields[name])
    return Issue(**fields)
