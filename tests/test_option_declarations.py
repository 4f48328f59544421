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
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import typer

from commbench.cli import app
from commbench.options import KEY, declared, use

NOT_YET_ONE: dict[str, int] = {}
"""The flags still declared in several records. Those below are not on it: each pair is two
options that share a spelling (a field of one `arguments` group is one option, whose records `use`
it with their own help and default):

* `--sizes`: the sizes a sweep measures or predicts (`collectives.settings.Sweep`, which
  `collectives` and `model` take), the one size each of `diagnose`'s tests runs at (`SIZE`),
  `history`'s filter of stored series;
* `--out`: a directory always made (`OutDir`), a file instead of stdout (`OutFile`), a new
  trace directory (`record`'s, `DIR`);
* `--baseline`: stored runs to gate against (`Against`), a suite or run directory (`run -b`),
  an expectations file (`diagnose`);
* `--format`: three sets of choices (`report`, `export`, `history plot`);
* `--label`, `runs`: one name or directory list (`Labelled`, `RunDirs`), `plot`'s one per run
  of runs, suites or loaded records;
* `--op`: the one collective a file holds (`OneOp`), `history`'s filter (a comma list);
* `--latency`: `p2p`'s switch, the fabric's latency in us (`Fabric`);
* `--world`: `replay`'s one world, `model`'s list of them;
* `--backend`: where ranks run (`PlacementRequest`), whose algorithms `model` predicts;
* `--from`: `topology`'s snapshot, `model`'s run (two keywords: from_snapshot, from_run).
"""
ALSO_TWO: dict[str, int] = {
    "--sizes": 3,
    "--out": 3,
    "--baseline": 3,
    "--format": 3,
    "--label": 2,
    "runs": 2,
    "--op": 2,
    "--latency": 2,
    "--world": 2,
    "--backend": 2,
    "--from": 2,
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
    declares (not those it inherits, nor those it `use`s: a group's, with its own help)."""
    own = inspect.get_annotations(record)
    for f in dataclasses.fields(record):
        declared = f.metadata.get(KEY)
        if declared is None or f.name not in own or declared.used:
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


ALLOWED = {**NOT_YET_ONE, **ALSO_TWO}


def test_no_option_is_declared_in_two_records() -> None:
    twice = {name: records for name, records in declarations().items() if len(records) > 1}
    new = {name: records for name, records in twice.items() if len(records) > ALLOWED.get(name, 1)}
    assert not new, (
        f"declared in more records than before: {new}; declare the option once, in a record "
        "the commands share (as PlacementRequest is), instead of again"
    )


def test_the_list_of_options_not_yet_declared_once_only_shrinks() -> None:
    found = declarations()
    stale = {
        name: (count, len(found.get(name, [])))
        for name, count in ALLOWED.items()
        if len(found.get(name, [])) < count
    }
    assert not stale, f"(listed, declared) fewer times now: lower the count to match: {stale}"


def test_a_use_is_the_groups_option_with_its_own_help_and_default() -> None:
    # `run`'s --out is OutDir's: the flag, the type and the check are the group's; the help,
    # the default and the place in --help are the suite's
    from commbench.arguments import OutDir
    from commbench.suites.request import SuiteRun

    group = {o.name: o for o in declared(OutDir)}["out"]
    used = {o.name: o for o in declared(SuiteRun)}["out"]
    assert used.declared.used and not group.declared.used
    assert used.default == "results/suites" != group.default
    assert used.declared.help != group.declared.help
    assert dataclasses.replace(used.declared, help=group.declared.help, used=False) == (
        group.declared
    )
    fields = {f.name: f for f in dataclasses.fields(SuiteRun)}
    assert fields["out"].type == {f.name: f for f in dataclasses.fields(OutDir)}["out"].type
    names = [o.name for o in declared(SuiteRun)]
    assert names.index("baseline") < names.index("out") < names.index("nproc"), names


def test_a_use_takes_only_what_a_record_it_is_built_of_declares() -> None:
    from commbench.arguments import OutFile

    with pytest.raises(TypeError, match="no record it is built of declares 'outt'"):

        @dataclass(kw_only=True)
        class Typo(OutFile):
            outt = use(help="a typo")

    @dataclass(kw_only=True)
    class Quiet(OutFile):
        out = use(default="x")

    assert Quiet().out == "x"
    assert declared(Quiet)[0].declared.help == declared(OutFile)[0].declared.help


def test_a_verb_lists_its_keywords_in_the_order_its_command_lists_its_flags() -> None:
    # (the shared launch flags aside: `--help` lists them last)
    import inspect

    from commbench import api

    for verb in (api.run_suite, api.report_run, api.export_run, api.compare_runs):
        signature = list(inspect.signature(verb).parameters)
        flags = [o.name for o in declared(verb.options) if not o.declared.late]
        assert [n for n in signature if n in flags] == flags, verb.__name__


def test_a_use_may_narrow_the_groups_optional_type_and_no_other_way() -> None:
    # p2p's --warmup has a default of its own (5): `int`, where the group's is `int | None`
    from commbench.arguments import Iterations
    from commbench.p2p.settings import P2PRequest

    fields = {f.name: f for f in dataclasses.fields(P2PRequest)}
    assert fields["warmup"].type == "int" and fields["iters"].type == "int | None"
    assert {f.name: f for f in dataclasses.fields(Iterations)}["warmup"].type == "int | None"

    with pytest.raises(
        TypeError, match=re.escape("neither the group's type int | None nor it without")
    ):

        @dataclass(kw_only=True)
        class Wrong(Iterations):
            warmup: str = use(default="5")


@pytest.mark.parametrize(
    ("verb", "keyword", "value", "line"),
    [
        (verb, keyword, value, line)
        for verb in ("run_collectives", "run_diagnose", "run_p2p", "replay_trace")
        for keyword, value, line in (
            ("iters", 0, "--iters must be >= 1, got 0"),
            ("warmup", -1, "--warmup must be >= 0, got -1"),
            ("warmup", 10**7, "--warmup must be <= 1000000, got 10000000"),
        )
    ],
)
def test_the_timing_flags_are_checked_alike_by_every_command(
    verb: str, keyword: str, value: int, line: str
) -> None:
    # one declaration, one check: refused as the request is built, in the same words
    from commbench import api
    from commbench.errors import UserError

    record = getattr(api, verb).options
    given = (
        {"trace": "no-such-trace"}
        if "trace" in {f.name for f in dataclasses.fields(record)}
        else {}
    )
    with pytest.raises(UserError, match=f"^{re.escape(line)}$"):
        record(**given, **{keyword: value})
