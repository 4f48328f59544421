"""Every public verb checks its arguments where they enter (issue 33, D3): for every verb and
every parameter, a value of the wrong type, None, a bool, or out of range raises commbench's
UserError naming the parameter, before anything is read, written or launched.

The bad values are read off each parameter's annotation here, independently of the checks
in commbench.arguments; the test is unmarked, so the conftest fails it if a process starts.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy
import pytest
import yaml

import commbench
from commbench.arguments import GIVEN, Request
from commbench.errors import UserError
from commbench.options import KEY

REQUIRED = {
    "compare_runs": {"baseline": "base", "new": "new"},
    "export_run": {"run": "run"},
    "import_nccl_tests": {"logs": ["x.log"]},
    "k8s_manifest": {"image": "registry/commbench:1"},
    "load_run": {"path": "run"},
    "plot_run": {"runs": ["run"]},
    "replay_trace": {"trace": "trace"},
    "report_run": {"run": "run"},
    "run_suite": {"config": "suite.yaml"},
    "history_add": {"runs": ["run"]},
    "history_show": {"target": "run"},
    "settle_runs": {"runs": ["run"]},
}
"""A valid value of each verb's required parameters: the bad one is the only one."""

VERBS = [name for name in commbench.__all__ if name != "__version__"]


def top_level(annotation: str) -> list[str]:
    """The members of `a | Sequence[b | c] | None`, brackets kept whole."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(annotation):
        depth += (c == "[") - (c == "]")
        if c == "|" and depth == 0:
            parts.append(annotation[start:i].strip())
            start = i + 1
    return [*parts, annotation[start:].strip()]


def bad_values(f: dataclasses.Field[Any]) -> Iterator[tuple[str, object]]:
    """(why, value) that the parameter `f` must refuse, read off its annotation."""
    # a declared kind (`OpList`, `Fraction`) takes what its declaration says it is given
    members = [m for part in top_level(str(f.type)) for m in top_level(GIVEN.get(part, part))]
    heads = {m.split("[")[0] for m in members}
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    declared = f.metadata.get(KEY)
    choices = getattr(declared, "type", None)
    yield "an object of no accepted type", object()
    if "None" not in heads:
        yield "None", None
    if "bool" not in heads:
        yield "a bool", True
    if "float" not in heads:
        yield "a float", 2.5
    if not heads & {"str", "Path", "PathLike"}:
        yield "a string", "8"
    if "Sequence" not in heads:
        yield "a list", ["8"]
    if "int" in heads and getattr(declared, "minimum", 0) > 0:
        yield "an integer below its minimum", int(declared.minimum) - 1
    if "int" in heads:
        yield "a negative integer", -1
        yield "an integer past int64", 1 << 64
    if "float" in heads:
        yield "a negative number", -1.0
        yield "NaN", math.nan
        yield "infinity", math.inf
    if heads & {"str", "Path", "PathLike"}:
        yield "an empty string", ""
        yield "a NUL character", "a\x00b"
    if "str" in heads and isinstance(choices, type) and hasattr(choices, "__members__"):
        yield "no member of its enum", "nonesuch"
    if "Sequence" in heads:
        yield "a list holding an object", [object()]
        if required:
            yield "an empty list", []


def cases() -> Iterator[Any]:
    for verb in VERBS:
        for f in dataclasses.fields(getattr(commbench, verb).options):
            for why, value in bad_values(f):
                yield pytest.param(verb, f.name, value, id=f"{verb}-{f.name}-{why}")


@pytest.mark.parametrize(("verb", "name", "value"), list(cases()))
def test_a_bad_argument_is_refused_where_it_enters(
    tmp_path: Path, verb: str, name: str, value: object
) -> None:
    kwargs = {**REQUIRED.get(verb, {}), name: value}
    with pytest.raises(UserError) as caught:
        getattr(commbench, verb)(**kwargs)
    message = str(caught.value)
    assert name in message or "--" + name.replace("_", "-") in message, message
    assert "\n" not in message
    assert not list(tmp_path.iterdir())  # nothing was written (the cwd is tmp_path)


def test_every_verb_has_a_checked_request_and_every_parameter_a_case() -> None:
    for verb in VERBS:
        record = getattr(commbench, verb).options
        assert issubclass(record, Request), verb
        for f in dataclasses.fields(record):
            assert list(bad_values(f)), f"{verb}.{f.name}"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: commbench.compare_runs("base", None), "new: expected a path, a Run or a Suite, got null"),
        (lambda: commbench.compare_runs("base", 42), "new: expected a path, a Run or a Suite, got the number 42"),
        (lambda: commbench.export_run("run", op=5), "--op: expected a string, got the number 5"),
        (lambda: commbench.replay_trace(trace="t", rebucket=5), "--rebucket: expected a string"),
        (lambda: commbench.slurm_script(time_limit=None), "time_limit (--time): expected a string, got null"),
        (lambda: commbench.run_collectives(nproc=2.5), "--nproc: expected an integer, got the number 2.5"),
        (lambda: commbench.k8s_manifest(image="i", nodes=2.5), "--nodes: expected an integer"),
        (lambda: commbench.k8s_manifest(image="i", nodes=True), "--nodes: expected an integer, got a boolean"),
        (lambda: commbench.slurm_script(job_name=None), "--job-name: expected a string, got null"),
        (lambda: commbench.replay_trace(trace="t", world=True), "--world: expected an integer, got a boolean"),
        (lambda: commbench.import_nccl_tests([]), "logs is empty"),
        (lambda: commbench.record_job(["true"], out=3), "--out: expected a path, got the number 3"),
        (lambda: commbench.export_run("run", fmt="yaml"), "fmt (--format): 'yaml' is not one of"),
        (lambda: commbench.slurm_script(["collectives", 5]), "command[1]: expected a string"),
        (lambda: commbench.run_collectives(timeout=math.inf), "--timeout: expected a finite number"),
    ],
)  # fmt: skip
def test_the_issues_cases(call: Any, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        call()


def test_a_path_may_be_any_path_like(tmp_path: Path) -> None:
    """str and os.PathLike name a path alike: the refusal is the verb's own (no such run),
    never `'str' object has no attribute ...`."""

    class Named:
        def __fspath__(self) -> str:
            return str(tmp_path / "nowhere")

    for path in (str(tmp_path / "nowhere"), tmp_path / "nowhere", Named()):
        with pytest.raises(UserError, match="nowhere"):
            commbench.load_run(path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "command", [["collectives"], ["diagnose"], ["replay", "TRACE", "--dry-run"]]
)
@pytest.mark.parametrize("nproc", ["0", "-1", str(1 << 21)])
def test_every_command_that_places_ranks_takes_one_range_of_nproc(
    tmp_path: Path, command: list[str], nproc: str
) -> None:
    """--nproc is declared once (PlacementRequest) with its range: `replay --nproc 0` took 0
    and then asked for `--world 0`, which it refuses, where collectives refused it at once."""
    from typer.testing import CliRunner

    from commbench.cli import app
    from tests.factories import ddp_trace

    trace = ddp_trace(tmp_path / "trace", world=2, steps=1)
    args = [str(trace) if a == "TRACE" else a for a in command]
    result = CliRunner().invoke(app, [*args, "--nproc", nproc])
    assert result.exit_code == 2, result.output
    bound = ">= 1" if int(nproc) < 1 else "<= 1048576"
    assert result.output.strip().splitlines() == [
        f"commbench: error: --nproc must be {bound}, got {nproc}"
    ]


class _Two(enum.IntEnum):
    two = 2


class _Text(str, enum.Enum):
    text = "collectives"


class _Half(float):
    pass


def plain_cases() -> Iterator[Any]:
    """(verb, field, stand-in, plain) for every int, float and str field of every verb: a
    value of a subclass of the field's kind, as a caller's enum or numpy scalar gives it."""
    for verb in VERBS:
        for f in dataclasses.fields(getattr(commbench, verb).options):
            heads = {m.split("[")[0] for m in top_level(str(f.type))}
            declared = f.metadata.get(KEY)
            if isinstance(getattr(declared, "type", None), type) and issubclass(
                declared.type, enum.Enum
            ):
                continue  # a choice takes its enum's member as it is
            if "int" in heads:
                yield pytest.param(verb, f.name, _Two.two, 2, id=f"{verb}-{f.name}-IntEnum")
            elif "float" in heads:
                yield pytest.param(verb, f.name, _Half(2.5), 2.5, id=f"{verb}-{f.name}-float")
            elif "str" in heads:
                yield pytest.param(
                    verb, f.name, _Text.text, "collectives", id=f"{verb}-{f.name}-str"
                )


@pytest.mark.parametrize(("verb", "name", "value", "plain"), list(plain_cases()))
def test_a_subclass_of_a_fields_kind_is_kept_as_the_plain_builtin(
    verb: str, name: str, value: object, plain: object
) -> None:
    """Issue 43, item 1: `k8s_manifest(nodes=IntEnum.two)` passed the int check and crashed
    in the YAML writer. Every field converts such a value once, as the record is built: the
    record holds the plain int, float or str (or refuses it as the plain value, in one line)."""
    record = getattr(commbench, verb).options
    required = {
        f.name: ["x"] if str(f.type).startswith("Sequence") else "x"
        for f in dataclasses.fields(record)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    try:
        built = record(**{**required, **REQUIRED.get(verb, {}), name: value})
    except UserError as refused:  # the plain value out of this field's own range or rules
        assert "\n" not in str(refused)
        return
    held = getattr(built, name)
    assert held == plain and type(held) is type(plain), (verb, name, held)


@pytest.mark.parametrize(
    "value", [_Two.two, numpy.int64(2), numpy.uint8(2)], ids=["IntEnum", "int64", "uint8"]
)
def test_the_issues_int_enum_writes_a_manifest_and_a_script(value: object) -> None:
    manifest = commbench.k8s_manifest([_Text.text, "--sizes", "1K"], image="img", nodes=value)
    assert yaml.safe_load_all(manifest)
    assert "--nodes=2" in commbench.slurm_script([_Text.text], nodes=value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (numpy.bool_(True), "--nodes: expected an integer, got"),
        (numpy.array([2, 3]), "--nodes: expected an integer, got"),
        (numpy.float64(2.0), "--nodes: expected an integer, got the number"),
    ],
)
def test_what_stands_for_no_integer_is_refused_in_one_line(value: object, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        commbench.k8s_manifest(image="img", nodes=value)
