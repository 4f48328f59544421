"""No option declared twice (issue 44): a flag's name, default, help and check live in one
record, and every command that takes it takes that record (nested or as a base), so that a
default or a range cannot differ between two commands' copies of one flag.

The records are found from the commands themselves (each command's options record, and the
records it is built of), so a new command's records are walked with no edit here. The flags
still declared in several records are listed in `NOT_YET_ONE` with how many: the list may
only shrink. A flag newly declared twice fails, and so does one of the list declared fewer
times than listed (take it off the list: it is one declaration now, or closer to it).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import typer

from commbench.cli import app
from commbench.options import KEY

NOT_YET_ONE: dict[str, int] = {
    # what a command writes or reads: the same spelling, a different meaning per command
    "--out": 8,
    "--baseline": 4,
    "--allow-mismatch": 4,
    "--history": 3,
    "--label": 3,
    "--format": 3,
    "--op": 3,
    "--from": 2,
    "runs": 3,
    "run": 2,
    # the timing flags: per command their own default and help (a point, a test, a row)
    "--warmup": 4,
    "--iters": 4,
    "--timeout": 3,
    # the sweep and the placement, as commands other than `collectives` take them
    "--sizes": 4,
    "--strategies": 2,
    "--tolerance": 3,
    "--latency": 3,
    "--backend": 3,
    "--nproc": 2,
    "--device": 2,
    "--no-plot": 2,
    "--dry-run": 2,
    "--world": 2,
    "--bw": 2,
}


def _records() -> Iterator[type]:
    """Every options record of every command, and every dataclass it is built of."""
    seen: set[type] = set()

    def walk(command: Any) -> Iterator[type]:
        if hasattr(command, "commands"):  # a group (`history`, `import`)
            for sub in command.commands.values():
                yield from walk(sub)
            return
        record = getattr(command.callback, "options", None)
        if record is None:
            return
        for base in record.__mro__:
            if dataclasses.is_dataclass(base) and base not in seen:
                seen.add(base)
                yield base

    yield from walk(typer.main.get_group(app))


def _own_options(record: type) -> Iterator[tuple[str, Any]]:
    """(the flag, or an argument's name; the field) of each option `record`'s own body
    declares (not those it inherits)."""
    own = inspect.get_annotations(record)
    for f in dataclasses.fields(record):
        declared = f.metadata.get(KEY)
        if declared is None or f.name not in own:
            continue
        if declared.argument:
            yield f.name, f
        else:
            names = declared.names or ("--" + f.name.replace("_", "-"),)
            yield names[0].split("/")[0], f


def declarations() -> dict[str, list[str]]:
    """Each option, with the records that declare it."""
    out: dict[str, list[str]] = defaultdict(list)
    for record in _records():
        for name, _ in _own_options(record):
            out[name].append(f"{record.__module__}.{record.__qualname__}")
    return out


def test_the_walk_finds_the_records() -> None:
    # the test below is only as good as this walk: the shared groups and the verbs' own
    names = {r.__name__ for r in _records()}
    assert {"PlacementRequest", "LaunchRequest", "CollectivesRequest", "SuiteRun"} <= names
    assert declarations()["--sizes"], "no --sizes found: the walk sees no option"


def test_no_option_is_declared_in_two_records() -> None:
    twice = {name: records for name, records in declarations().items() if len(records) > 1}
    new = {
        name: records for name, records in twice.items() if len(records) > NOT_YET_ONE.get(name, 1)
    }
    assert not new, (
        f"declared in more records than before: {new}; declare the option once, in a record "
        "the commands share (as PlacementRequest is), instead of again"
    )


def test_the_list_of_options_not_yet_declared_once_only_shrinks() -> None:
    found = declarations()
    stale = {
        name: (count, len(found.get(name, [])))
        for name, count in NOT_YET_ONE.items()
        if len(found.get(name, [])) < count
    }
    assert not stale, f"(listed, declared) fewer times now: lower NOT_YET_ONE to match: {stale}"
