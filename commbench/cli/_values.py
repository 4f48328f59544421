"""The values a command line gives, converted without Typer's pydantic.

Typer (0.28, 0.29) converts every parameter's value, its default included, through a
pydantic `TypeAdapter`, and importing pydantic is 150 ms: half again the time of `commbench
--help`, spent before any command can say that a value is wrong (issue 43, item 12). Every
parameter commbench declares is one of a few plain types, each converted here the way
Typer's adapter converts it, and a value none of them takes is left to Typer:

- `str`: the text as typed;
- `int`, `float`: commbench's own number parser (the option's `parser`, `options._STRICT`);
- `Path`, `list[Path]`, `list[str]`: a `Path` per word, as Typer's path type with its
  defaults (a path that exists must be readable);
- an `Enum`: the member whose value is the text, else Typer's own error line;
- `bool`: Typer converts none (a flag is a bool already).

`install` sets this conversion on each parameter of a command tree (click's public
`process_value`, per parameter); `tests/test_cli_values.py` holds it to Typer's own for
every parameter of every command, so that a Typer release that converts otherwise fails
there, not in a user's hands.
"""

from __future__ import annotations

import enum
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from types import MethodType, UnionType
from typing import Any, Union, get_args, get_origin

import typer

Convert = Callable[[Any, Any, Any], Any]
"""(value, ctx, param) -> the value the command's body gets; a bad one raises Typer's error."""


def install(command: Any) -> None:
    """Convert the values of `command`'s parameters, and of every command under it, here:
    those of a type this module knows, the others left to Typer."""
    for sub in getattr(command, "commands", {}).values():
        install(sub)
    # --help not given is None, which Typer converts to a bool through pydantic: a default
    # of False is a bool already (the help option is made per context, not in `params`)
    defaults = command.context_settings.get("default_map") or {}
    command.context_settings = {
        **command.context_settings,
        "default_map": {"help": False, **defaults},
    }
    callback = getattr(command, "callback", None)
    if callback is None:
        return
    try:
        declared = inspect.signature(callback).parameters
    except (TypeError, ValueError):  # a callback without a signature: Typer's own then
        return
    for param in command.params:
        spec = declared.get(param.name)
        convert = None if spec is None else converter(spec.annotation, spec.default)
        if convert is not None:
            param.process_value = MethodType(_processor(convert), param)


def converter(annotation: Any, info: Any) -> Convert | None:
    """The conversion of a parameter annotated `annotation` whose default is `info` (a
    `typer.models.ParameterInfo`, or a plain default); None for one left to Typer."""
    parser = getattr(info, "parser", None)
    if get_origin(annotation) in (Union, UnionType):  # `Path | None`: as Typer, the type
        kinds = [a for a in get_args(annotation) if a is not type(None)]
        return converter(kinds[0], info) if len(kinds) == 1 else None
    if _path_options(info):
        return None  # exists=, resolve_path=, ...: Typer's checks, not repeated here
    if annotation is str and parser is None:
        return _text
    if annotation in (int, float) and parser is not None:
        return lambda value, ctx, param: parser(value)
    if annotation is Path and parser is None:
        return _path
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum) and parser is None:
        return _choice(annotation, getattr(info, "case_sensitive", True))
    if get_origin(annotation) is list and parser is None:
        (item,) = get_args(annotation)
        one = converter(item, info)
        if one is not None:
            return lambda value, ctx, param: [one(v, ctx, param) for v in value]
    return None


def _processor(convert: Convert) -> Callable[..., Any]:
    """Typer's `process_value` (convert, then the required check and the callback), with
    `convert` in place of its pydantic adapter. A required value that is missing goes to
    Typer's, whose error says which (rare, and an error already)."""

    def process_value(self: Any, ctx: Any, value: Any) -> Any:
        multiple = self.multiple or self.nargs == -1
        given = value
        if value is None:
            value = () if multiple else None
        elif multiple and isinstance(value, str):  # Typer's own words for it
            raise typer.BadParameter("Value must be an iterable.", ctx=ctx, param=self)
        else:
            value = convert(value, ctx, self)
        if self.required and self.value_is_missing(value):
            return type(self).process_value(self, ctx, given)
        if self.callback is not None:
            value = self.callback(ctx, self, value)
        return value

    return process_value


def _text(value: Any, ctx: Any, param: Any) -> Any:
    return value if isinstance(value, str) else str(value)


def _path(value: Any, ctx: Any, param: Any) -> Path:
    """A `Path`, as Typer's path type with its defaults: one that exists must be readable."""
    path = value if isinstance(value, Path) else Path(value)
    try:
        os.stat(path)
    except OSError:
        return path
    if not os.access(path, os.R_OK):
        shown = repr(typer.format_filename(value))
        raise typer.BadParameter(f"path {shown} is not readable.", ctx=ctx, param=param)
    return path


def _choice(enum_type: type[enum.Enum], case_sensitive: bool) -> Convert:
    """An Enum's member by its value, as Typer's choice type: the member itself, the text of
    its value, or Typer's error line listing them."""
    members = list(enum_type)

    def norm(text: str, ctx: Any) -> str:
        if ctx is not None and ctx.token_normalize_func is not None:
            text = ctx.token_normalize_func(text)
        return text if case_sensitive else text.casefold()

    def convert(value: Any, ctx: Any, param: Any) -> Any:
        if any(value is m for m in members):
            return value
        wanted = norm(str(value.value if isinstance(value, enum.Enum) else value), ctx)
        for member in members:
            if norm(str(member.value), ctx) == wanted:
                return member
        listed = ", ".join(repr(norm(str(m.value), ctx)) for m in members)
        raise typer.BadParameter(f"{value!r} is not one of {listed}.", ctx=ctx, param=param)

    return convert


_PATH_DEFAULTS = {
    "exists": False,
    "file_okay": True,
    "dir_okay": True,
    "writable": False,
    "readable": True,
    "resolve_path": False,
    "allow_dash": False,
    "path_type": None,
}
"""Typer's path options as `typer.Option` leaves them: what `_path` does."""


def _path_options(info: Any) -> bool:
    """Whether a parameter asks Typer for more of a path than its defaults (`exists=True`),
    or for a Typer feature this module does not convert (an envvar, a click type)."""
    if not isinstance(info, typer.models.ParameterInfo):
        return False
    changed = any(getattr(info, k, v) != v for k, v in _PATH_DEFAULTS.items())
    return changed or bool(getattr(info, "envvar", None))
