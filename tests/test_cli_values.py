"""The command line's values are converted by `commbench.cli._values`, not by Typer's pydantic
(issue 43, item 12: importing pydantic was half again the time of `commbench --help`, before
a wrong value could be said). Each parameter of each command is held here to Typer's own
conversion, value by value, so that a Typer release that converts otherwise fails here."""

from __future__ import annotations

import enum
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

from commbench.cli import app


def params() -> Iterator[Any]:
    def walk(command: Any, path: list[str]) -> Iterator[Any]:
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
        for param in command.params:
            yield pytest.param(command, param, id="-".join([*path, param.name]))

    yield from walk(typer.main.get_command(app), [])


def samples(param: Any, tmp_path: Path) -> list[Any]:
    """Values a user may give this parameter, good and bad, by its type."""
    annotation = param.type_descriptor.annotation
    words = ["3", "2.5", "x", "", "1K", "a,b", " 7 ", str(tmp_path)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        words += [str(m.value) for m in annotation] + [m.name for m in annotation]
        words += [str(m.value).upper() for m in annotation]
    if param.multiple or param.nargs == -1:
        return [None, (), tuple(words[:3]), (str(tmp_path),)]
    return [None, param.default, *words]


def outcome(process: Any, ctx: Any, value: Any) -> tuple[str, Any]:
    """What `process` makes of `value`, or its error in the words a user reads (the CLI
    drops pydantic's `Value error, `: `cli._common._REWORDED`)."""
    try:
        return "value", process(ctx, value)
    except Exception as exc:  # the same error, in the same words
        said = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return type(exc).__name__, said.replace("Value error, ", "")  # pydantic's, unsaid


@pytest.mark.parametrize(("command", "param"), list(params()))
def test_each_value_converts_as_typer_converts_it(command: Any, param: Any, tmp_path: Path) -> None:
    ctx = typer.Context(command, info_name=command.name)
    for value in samples(param, tmp_path):
        ours = outcome(param.process_value, ctx, value)
        theirs = outcome(lambda c, v: type(param).process_value(param, c, v), ctx, value)
        assert ours == theirs, (value, ours, theirs)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_path_is_said_as_typer_says_it(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.write_text("")
    hidden.chmod(0)
    command = typer.main.get_command(app).commands["compare"]  # type: ignore[attr-defined]
    [param] = [p for p in command.params if p.name == "baseline"]
    ctx = typer.Context(command, info_name="compare")
    theirs = outcome(lambda c, v: type(param).process_value(param, c, v), ctx, str(hidden))
    assert outcome(param.process_value, ctx, str(hidden)) == theirs


def test_every_parameter_but_a_flag_is_converted_here() -> None:
    """Typer converts a bool flag without pydantic; every other parameter is converted here."""
    left = [
        f"{command.name} {param.name}"
        for command, param in (p.values for p in params())
        if "process_value" not in vars(param) and param.type_descriptor.annotation is not bool
    ]
    assert left == []
