"""Typed reads of a parsed JSON document, each naming the field path of what is wrong.

Every reader of a stored file (run.json, results.json, suite.json, a topology snapshot, an
nccl-tests `-J` file, the probe cache) checks what it reads through these, so a `context`
that is a list, a `world_size` that is an object or a `size_bytes` of 10**30 is one line,
`run.json: context.world_size: expected an integer, got an object`, and never a traceback or
a wrong number further on:

    f = Fields(data, f"{path}: snapshot")
    version = f.req("schema_version", integer)
    peak = f.opt("peak_gbps", number_in(0, MAX_PEAK_GBPS))
    gpus = [gpu_from(item.obj()) for item in f.items("gpus", max_items=MAX_GPUS)]

The other way, `pick(record, "host", "node")` is a record's plain fields as a dict in the
order named: the part of a `to_dict` that copies attributes one by one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from commbench.errors import UserError, quoted
from commbench.escape import describe, unsafe_character

T = TypeVar("T")
Conv = Callable[[Any, str], T]
"""A converter: (value, path) -> the value, typed, or UserError naming the path."""


def pick(record: object, *names: str) -> dict[str, Any]:
    """The named attributes of a record, in that order: the plain part of a `to_dict` (a
    file's key order is the order named), or the fields one record hands on to another."""
    return {name: getattr(record, name) for name in names}


def known_fields(record_type: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` less the keys the dataclass `record_type` has no field for, so settings a newer
    version stored still read (what it added is dropped)."""
    names = {f.name for f in dataclasses.fields(record_type)}
    return {k: v for k, v in data.items() if k in names}


def kind(value: Any) -> str:
    """How a value reads in an error message: `an object`, `the string 'x'`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        text = repr(value)
        return f"the number {text if len(text) <= 24 else text[:21] + '...'}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}" + ("..." if len(value) > 40 else "")
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def integer(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{path}: expected an integer, got {kind(value)}")
    return value


def number(value: Any, path: str) -> float:
    """A finite number (files hold null, not NaN, where there is none)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{path}: expected a number, got {kind(value)}")
    try:
        result = float(value)
    except OverflowError:
        result = math.inf
    if not math.isfinite(result):
        raise UserError(f"{path}: expected a finite number, got {kind(value)}")
    return result


def string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{path}: expected a string, got {kind(value)}")
    return value


MAX_TEXT = 1 << 16
"""Characters in one stored text (a failure with its reasons, a diagnosis): far past any that
commbench writes, short of a pasted file."""


def text(value: Any, path: str) -> str:
    """A string that may hold lines (a failure with its reasons, a diagnosis), bounded, and
    without another control character (one would move the cursor of the terminal it is
    printed on), nor another line break (`escape.unsafe_character`: \\r, NEL, U+2028...),
    a bidirectional control or a lone surrogate."""
    result = string(value, path)
    if len(result) > MAX_TEXT:
        raise UserError(f"{path}: {len(result)} characters, more than {MAX_TEXT}")
    char = unsafe_character(result.replace("\n", "").replace("\t", ""))
    if char is not None:
        raise UserError(f"{path}: {quoted(result)} holds {describe(char)}")
    return result


def line(value: Any, path: str) -> str:
    """A string of one line: a name, a host, a version. A line break in one would start a new
    line, a heading or a table row of the report it is printed in."""
    result = text(value, path)
    char = unsafe_character(result)
    if char is not None:
        raise UserError(f"{path}: {quoted(result)} holds {describe(char)}")
    return result


def one_of(choices: Iterable[str]) -> Conv[str]:
    """A string that is one of `choices` (a registry: ops, dtypes, checks), naming them when
    it is another."""
    known = tuple(choices)
    shown = ", ".join(repr(c) if c == "" else c for c in known)

    def conv(value: Any, path: str) -> str:
        name = string(value, path)
        if name not in known:
            raise UserError(f"{path}: {quoted(name)} is not one of {shown}")
        return name

    return conv


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{path}: expected true or false, got {kind(value)}")
    return value


def integer_in(lo: int, hi: int) -> Conv[int]:
    """An integer converter bounded to lo..hi (what hardware or commbench can produce)."""

    def conv(value: Any, path: str) -> int:
        result = integer(value, path)
        if not lo <= result <= hi:
            raise UserError(f"{path}: {_short(result)} is outside {lo}..{hi}")
        return result

    return conv


def number_in(lo: float, hi: float) -> Conv[float]:
    """A finite number converter bounded to lo..hi."""
    return _NumberIn(lo, hi)


class _NumberIn:
    """`number_in`'s converter, with a whole-list check (`bulk`): a run's samples are tens of
    thousands of numbers, and checking them one call each was most of reading a run."""

    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi

    def __call__(self, value: Any, path: str) -> float:
        lo, hi = self.lo, self.hi
        if isinstance(value, int) and not isinstance(value, bool) and not lo <= value <= hi:
            raise UserError(f"{path}: {_short(value)} is outside {lo:g}..{hi:g}")
        result = number(value, path)
        if not lo <= result <= hi:
            raise UserError(f"{path}: {result:g} is outside {lo:g}..{hi:g}")
        return result

    def bulk(self, values: list[Any]) -> list[float] | None:
        """`values` as they are where each is a finite float within bounds (what `__call__`
        would return for each); None where one is not, to be read one by one."""
        if not values or not all(type(v) is float for v in values):
            return None
        if min(values) < self.lo or max(values) > self.hi or not all(map(math.isfinite, values)):
            return None
        return list(values)


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"a number of {len(text)} digits"


def list_of(conv: Conv[T], max_items: int | None = None) -> Conv[list[T]]:
    """A list whose every item passes `conv` (paths name the item: `device_names[3]`)."""

    def read(value: Any, path: str) -> list[T]:
        if not isinstance(value, list):
            raise UserError(f"{path}: expected a list, got {kind(value)}")
        if max_items is not None and len(value) > max_items:
            raise UserError(f"{path}: {len(value)} items, more than {max_items}")
        bulk = getattr(conv, "bulk", None)
        if bulk is not None and (checked := bulk(value)) is not None:
            return cast("list[T]", checked)
        return [conv(v, f"{path}[{i}]") for i, v in enumerate(value)]

    return read


def mapping_of(conv: Conv[T]) -> Conv[dict[str, T]]:
    """An object whose every value passes `conv`."""

    def read(value: Any, path: str) -> dict[str, T]:
        if not isinstance(value, Mapping):
            raise UserError(f"{path}: expected an object, got {kind(value)}")
        return {str(k): conv(v, f"{path}.{k}") for k, v in value.items()}

    return read


def anything(value: Any, path: str) -> Any:
    return value


class Value:
    """One value of a document and the path that names it in error messages."""

    __slots__ = ("data", "path")

    def __init__(self, data: Any, path: str) -> None:
        self.data = data
        self.path = path

    def obj(self) -> Fields:
        return Fields(self.data, self.path)

    def scalar(self, conv: Conv[T]) -> T:
        return conv(self.data, self.path)


class Fields:
    """An object (mapping) of a document being read field by field."""

    __slots__ = ("data", "where")

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            # a file's top level is `where` ending in ':' (see `at`): said once
            raise UserError(f"{where.removesuffix(':')}: expected an object, got {kind(data)}")
        self.data = data
        self.where = where

    def at(self, key: str) -> str:
        """The path of `key`: `run.json: context` + `world_size` -> `run.json: context.world_size`;
        a `where` ending in ':' (a file's top level) is followed by the bare key."""
        return f"{self.where} {key}" if self.where.endswith(":") else f"{self.where}.{key}"

    def req(self, key: str, conv: Conv[T]) -> T:
        if self.data.get(key) is None:
            raise UserError(f"{self.at(key)}: missing")
        return conv(self.data[key], self.at(key))

    def opt(self, key: str, conv: Conv[T]) -> T | None:
        value = self.data.get(key)
        return None if value is None else conv(value, self.at(key))

    def version(
        self, newest: int, newer: Callable[[int], str], invalid: Callable[[int], str]
    ) -> int:
        """The required `schema_version`, 1 to `newest`; UserError with the file's own words
        for one `newer` than this commbench reads, or one below 1 (`invalid`)."""
        version = self.req("schema_version", integer)
        if version > newest:
            raise UserError(newer(version))
        if version < 1:
            raise UserError(invalid(version))
        return version

    def sub(self, key: str) -> Fields | None:
        value = self.data.get(key)
        return None if value is None else Fields(value, self.at(key))

    def items(self, key: str, required: bool = True, max_items: int | None = None) -> list[Value]:
        value = self.data.get(key)
        if value is None:
            if required:
                raise UserError(f"{self.at(key)}: missing")
            return []
        if not isinstance(value, list):
            raise UserError(f"{self.at(key)}: expected a list, got {kind(value)}")
        if max_items is not None and len(value) > max_items:
            raise UserError(f"{self.at(key)}: {len(value)} items, more than {max_items}")
        return [Value(v, f"{self.at(key)}[{i}]") for i, v in enumerate(value)]
