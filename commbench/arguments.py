"""A verb's arguments checked where they enter: in its request record's constructor.

Every request record (`CollectivesRun`, `CompareRequest`, `SlurmScriptRequest`, ...) is a
`Request`, whose `__post_init__` checks each field against the type its annotation declares,
so that `k8s_manifest(nodes=2.5)`, `compare_runs(run, None)` or `record_job(out=3)` is one
line naming the parameter, raised before anything is read, written or launched, and never an
AttributeError further on or a wrong value written into a script:

    --nodes: expected an integer, got the number 2.5
    time_limit (--time): expected a string, got null

The annotation is the declaration: there is one check per kind of field (`KINDS`: an int
that is not a bool and is in range, a finite number, a non-empty string, a path, a bool, a
callable, a loaded run, a sequence of one of these), and a record names none of them: a new
field is checked by the type it is given, and a type without a check is refused when the
record is first built (`tests/test_arguments.py` builds every verb's). A value of a subclass
of its kind (an IntEnum, a StrEnum, numpy's integers and floats) is converted here to the
plain int, float or str, so that what the record holds is what every writer downstream (YAML,
JSON, an sbatch line) takes: `k8s_manifest(nodes=Nodes.two)` holds 2. A `str` field whose
option parses into an Enum (`--format`) takes a member or a member's value. What a value
means (a size string, a bucket spec, a rank that must exist) is the record's own business,
checked where it is parsed; this is the check of what can be said from the type alone.

Below `Request`, the option groups several records share (`OutDir`, `MismatchAllowed`, ...):
each option one field, its type, default and check declared once (`options.Group`, `use`).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commbench.errors import UserError, quoted
from commbench.fields import kind as described
from commbench.flags import (
    ALLOW_MISMATCH,
    BASELINE,
    BW,
    DRY_RUN,
    HISTORY,
    ITERS,
    LABEL,
    LATENCY,
    NO_PLOT,
    OP,
    OUT,
    TIMEOUT,
    TOLERANCE,
    WARMUP,
)
from commbench.numbers import MAX_ITERATIONS, check_range, parse_number
from commbench.options import KEY, Declared, Group, field_of, paths

if TYPE_CHECKING:
    from commbench.results.runs import Run, Suite

MAX_INT = (1 << 63) - 1
"""The largest integer any field takes (it reaches C as an int64: a count, a port, a rank);
a field's own limit, tighter, is its option's (`option(minimum=, maximum=)`) or is checked
where the value is used."""


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of field: what it is called in a message, which values are of it (`takes`),
    and what else such a value must be (`check`: raise UserError naming `path`)."""

    what: str
    takes: Callable[[Any], bool]
    check: Callable[[Any, str], None] = lambda value, path: None
    plain: Callable[[Any], Any] = lambda value: value
    """The value as the builtin it stands for (an IntEnum as its int): what the record keeps."""
    read: Callable[[Any, str], Any] | None = None
    """A value that is text to be parsed (`5%`): the parsed value, or UserError naming
    `path`; the record keeps what it returns, and nothing downstream parses it again."""

    def admit(self, value: Any, path: str) -> Any:
        """`value` as the record keeps it (`read`, or `plain` and checked)."""
        if self.read is not None:
            return self.read(value, path)
        value = self.plain(value)
        self.check(value, path)
        return value


def _no_nul(value: str, path: str) -> None:
    # no argument, path or file commbench writes can hold one: the OS cuts or refuses it
    if "\x00" in value:
        raise UserError(f"{path}: {quoted(value)} holds a NUL character")


def _is_integer(value: Any) -> bool:
    """An int or what stands for one (`__index__`: an IntEnum, numpy's integers), not a
    bool (numpy's bool refuses `__index__`, and so does an array of more than one)."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except Exception:  # whatever its __index__ raises, it is no integer
        return False
    return True


def _plain_number(value: Any) -> int | float:
    """The plain int or float that `value` (an int, a float, or a subclass) stands for."""
    return float(value) if isinstance(value, float) else operator.index(value)


def _integer(minimum: float = 0, maximum: float | None = None) -> Kind:
    """An int that is not a bool, in minimum..maximum (at most MAX_INT)."""
    top = MAX_INT if maximum is None else min(maximum, MAX_INT)

    def check(value: int, path: str) -> None:
        check_range(value, path, minimum, top)

    return Kind("an integer", _is_integer, check, operator.index)


def _number(minimum: float = 0, maximum: float | None = None) -> Kind:
    """A finite number (an int or a float, not a bool), in minimum..maximum."""

    def check(value: float, path: str) -> None:
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an int past a float's range
            finite = False
        if not finite:
            raise UserError(f"{path}: expected a finite number, got {described(value)}")
        check_range(value, path, minimum, maximum)

    return Kind("a number", lambda v: isinstance(v, float) or _is_integer(v), check, _plain_number)


def _plain_str(value: str) -> str:
    # str.__str__ returns an exact str for a subclass too, whatever its own __str__ says
    return str.__str__(value)


def _check_text(value: str, path: str) -> None:
    if not value:
        raise UserError(f"{path} is empty")
    _no_nul(value, path)


_ITEM_TEXT = Kind("a string", lambda v: isinstance(v, str), _no_nul, _plain_str)
"""A string in a list: it may be empty (an argument of a wrapped command: `--name ""`)."""


def is_path(value: object) -> bool:
    """A path as a verb takes one: text or an `os.PathLike` (a `Path`)."""
    return isinstance(value, str | os.PathLike)


def _check_path(value: str | os.PathLike[Any], path: str) -> None:
    name = os.fspath(value)
    if not isinstance(name, str):  # a PathLike of bytes
        raise UserError(f"{path}: expected a path as text, got {described(name)}")
    if not name:
        raise UserError(f"{path} is empty")
    _no_nul(name, path)


def _plain_path(value: str | os.PathLike[str]) -> str | os.PathLike[str]:
    return _plain_str(value) if isinstance(value, str) else value


def parse_fraction(text: str | float, what: str = "tolerance") -> float:
    """`5%` or `0.05` -> 0.05. A bare number of 1 or more is refused as ambiguous."""
    expected = "expected a percentage like 5% or a fraction like 0.05"
    if isinstance(text, bool):
        raise UserError(f"{what}: {expected}")
    raw = str(text).strip()
    percent = raw.endswith("%")
    try:  # ASCII digits and finite: float() would take a fullwidth 5, 'nan' and 'inf'
        number = parse_number(raw[:-1] if percent else raw, what)
    except UserError:
        raise UserError(f"{what}: {expected}, got {quoted(str(text))}") from None
    value = number / 100 if percent else number
    if not percent and value >= 1:
        raise UserError(f"{what}: {raw} is ambiguous; write {raw}% or {value / 100:g}")
    if not 0 <= value < 1:
        raise UserError(f"{what}: must be between 0% and 100%, got {raw}")
    return value


Fraction = float
"""A share of something (a tolerance): a field annotated `Fraction` takes `5%` or `0.05` (a
string or a number) and holds the float, parsed once as the record is built."""


def _is_loaded(value: Any) -> bool:
    from commbench.results.runs import Run, Suite

    return isinstance(value, Run | Suite)


KINDS: dict[str, Kind] = {
    "int": _integer(),
    "float": _number(),
    "str": Kind("a string", lambda v: isinstance(v, str), _check_text, _plain_str),
    "bool": Kind("a bool", lambda v: isinstance(v, bool)),
    "Path": Kind("a path", is_path, _check_path, _plain_path),
    "PathLike": Kind("a path", is_path, _check_path, _plain_path),
    "Callable": Kind("a function", callable),
    "Run": Kind("a Run", _is_loaded),
    "Suite": Kind("a Suite", _is_loaded),
}
"""The check of each type a request's field may be annotated with, by the type's name (an
int or a float whose option declares a range is checked in that range instead)."""


GIVEN: dict[str, str] = {}
"""What a field of each declared kind takes, by the kind's name (`OpList`: `str |
Sequence[str]`), as an annotation would say it: what a test of bad values reads."""


def declare_kind(name: str, given: str, read: Callable[[Any, str], Any]) -> None:
    """Declare the kind of field `name` (the alias a record annotates it with: `OpList`): a
    value typed at the edge, of the types `given` (`str | Sequence[str]`: a comma list, or
    the list the API gives; a value of another type is refused as such a field's is), that
    `read` parses into what the record holds, raising UserError for a bad one. The module
    that owns the grammar declares it once, at import, so that this module imports none of
    them; every record holding such a field holds the parsed value, and nothing downstream
    parses or checks it again."""
    shape = parse(given)
    GIVEN[name] = given

    def admit(value: Any, path: str) -> Any:
        return read(shape.check(value, path), path)

    KINDS[name] = Kind(shape.what(), lambda value: True, read=admit)


def _choice(enum_type: type[enum.Enum]) -> Kind:
    """A `str` field whose option parses into `enum_type`: a member or a member's value."""
    values = [m.value for m in enum_type]

    def check(value: Any, path: str) -> None:
        if not isinstance(value, enum_type) and value not in values:
            raise UserError(f"{path}: {quoted(value)} is not one of {', '.join(map(str, values))}")

    def plain(value: Any) -> Any:
        return value if isinstance(value, enum_type) else _plain_str(value)

    return Kind("a string", lambda v: isinstance(v, str), check, plain)


@dataclass(frozen=True, slots=True)
class Union:
    """The members of a field's annotation (`int | str | None`): a value is checked by the
    first that takes it, and one that none takes is named with all of them."""

    members: tuple[Kind | SequenceOf, ...]
    optional: bool

    def check(self, value: Any, path: str) -> Any:
        """`value` as the record keeps it (`Kind.plain`), or UserError naming `path`."""
        if value is None:
            if not self.optional:
                raise UserError(f"{path}: expected {self.what()}, got null")
            return None
        for member in self.members:
            if member.takes(value):
                return member.admit(value, path)
        raise UserError(f"{path}: expected {self.what()}, got {described(value)}")

    def what(self) -> str:
        names = list(dict.fromkeys(m.what for m in self.members))
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@dataclass(frozen=True, slots=True)
class SequenceOf:
    """`Sequence[X]`: a list or tuple (never a string) of X, each item named by its index;
    non-empty when the field is required (a verb given no logs has nothing to do)."""

    item: Union
    required: bool

    @property
    def what(self) -> str:
        return f"a list of {_plural(self.item.what())}"

    def takes(self, value: Any) -> bool:
        return isinstance(value, list | tuple)

    def admit(self, value: Sequence[Any], path: str) -> Sequence[Any]:
        """`value` with its items checked and plain (`Kind.plain`): itself when they already
        are, else a new sequence of its own kind (list or tuple)."""
        if self.required and not value:
            raise UserError(f"{path} is empty: give at least one")
        items = [self.item.check(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items


def _plural(what: str) -> str:
    words = what.split(" or ")
    return " or ".join(w.removeprefix("an ").removeprefix("a ") + "s" for w in words)


def _split(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets: `int | Sequence[int | str]` -> 2 parts."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "[") - (c == "]")
        if c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def parse(
    annotation: str, declared: Declared | None = None, *, required: bool = False, item: bool = False
) -> Union:
    """The check of a field annotated `annotation` (the text `from __future__ import
    annotations` leaves) and declared `declared` (of the items of a list, with `item`).
    TypeError for a type that has none: a record's author must say what its new kind of
    field accepts here, once."""
    members: list[Kind | SequenceOf] = []
    optional = False
    enum_type = declared.type if declared is not None else None
    ranged = declared is not None and (declared.minimum != 0 or declared.maximum is not None)
    for part in _split(annotation, "|"):
        name, _, rest = part.partition("[")
        if name == "None":
            optional = True
        elif name == "Sequence":
            inner = parse(rest.removesuffix("]"), declared, item=True)
            members.append(SequenceOf(inner, required))
        elif name == "str" and isinstance(enum_type, type) and issubclass(enum_type, enum.Enum):
            members.append(_choice(enum_type))
        elif name == "str" and item:
            members.append(_ITEM_TEXT)
        elif name in ("int", "float") and ranged:
            assert declared is not None
            make = _integer if name == "int" else _number
            members.append(make(declared.minimum, declared.maximum))
        elif name in KINDS:
            members.append(KINDS[name])
        else:
            raise TypeError(f"no check for a field of type {part!r} (in {annotation!r})")
    return Union(tuple(members), optional)


def label(f: dataclasses.Field[Any]) -> str:
    """How a message names a field: its flag, as the CLI prints it (`--gpus-per-node`: the
    keyword in kebab case), with the keyword where the two differ (`time_limit (--time)`);
    the keyword alone for a positional argument or an API-only field."""
    declared = f.metadata.get(KEY)
    if declared is None or declared.argument:
        return f.name
    kebab = "--" + f.name.replace("_", "-")
    flag = next((n.split("/")[0] for n in declared.names if n.startswith("--")), kebab)
    return flag if flag == kebab else f"{f.name} ({flag})"


_CHECKS: dict[type, tuple[tuple[str, str, Union], ...]] = {}


def checks(record: type) -> tuple[tuple[str, str, Union], ...]:
    """(field, label, check) of every field of `record`, built once per record type."""
    if record in _CHECKS:
        return _CHECKS[record]
    out = []
    for f in dataclasses.fields(record):
        if not isinstance(f.type, str):
            raise TypeError(
                f"{record.__name__}.{f.name}: annotate it in a module that has "
                "`from __future__ import annotations`"
            )
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        union = parse(f.type, f.metadata.get(KEY), required=required)
        out.append((f.name, label(f), union))
    _CHECKS[record] = tuple(out)
    return _CHECKS[record]


PathLike = str | os.PathLike[str]
"""A path as a verb takes it: text, a `Path`, anything `os.fspath` reads (`KINDS`' PathLike)."""


class Request:
    """The base of every verb's request record: its fields are checked as it is built."""

    def __post_init__(self) -> None:
        for name, path, union in checks(type(self)):
            value = getattr(self, name)
            plain = union.check(value, path)
            if plain is not value:  # a subclass's value as its builtin (records are frozen)
                object.__setattr__(self, name, plain)


declare_kind("Fraction", "str | float", parse_fraction)


# The option groups: an option several commands take with one meaning and one type, declared
# once as the field of a record that their records inherit (`options.Group`); each says with
# `options.use(help=...)` what it means for its command. Here, beside `Request`, because a
# group's field is checked as every request's is.


@dataclass(kw_only=True)
class OutDir(Group):
    """`--out` as the parent of the directory a command makes (a run's, a suite's, the
    figures')."""

    out: PathLike = field_of(OUT, default="results", help="Parent directory of the run directory.")


@dataclass(kw_only=True)
class OutFile(Group):
    """`--out` as where a command writes what it would print (or the figures it draws)."""

    out: PathLike | None = field_of(OUT, help="Write here instead of stdout.")


@dataclass(kw_only=True)
class Against(Group):
    """`--baseline` of a command that reads stored runs: the run or suite it is judged
    against."""

    baseline: PathLike | Run | Suite | None = field_of(
        BASELINE, help="Add the regression gate against this run or suite."
    )


@dataclass(kw_only=True)
class MismatchAllowed(Group):
    """`--allow-mismatch`: the gate's, wherever a baseline is."""

    allow_mismatch: bool = field_of(
        ALLOW_MISMATCH,
        default=False,
        help="With --baseline: compare runs whose GPU model, world size, backend or "
        "topology differ.",
    )


@dataclass(kw_only=True)
class Tolerated(Group):
    """`--tolerance`: how far below its baseline a point may fall, over what the suite says."""

    tolerance: Fraction | None = field_of(
        TOLERANCE, help="Override the suite's compare.tolerance, e.g. 5%."
    )


@dataclass(kw_only=True)
class InHistory(Group):
    """`--history`: the runs history a command reads or adds to."""

    history: str | None = field_of(
        HISTORY, help="A runs history (SQLite file or postgresql:// URL)."
    )


@dataclass(kw_only=True)
class Labelled(Group):
    """`--label`: the one name the history records a command's runs as."""

    label: str | None = field_of(LABEL, help="What the history records the runs as (a commit).")


@dataclass(kw_only=True)
class RunDirs(Group):
    """The run directories a command reads, several at once (a suite's stand for its runs)."""

    runs: PathLike | Sequence[PathLike] = field(
        kw_only=False,
        metadata=paths(
            "RUN_DIR", help="Run directories, or suite directories (each stands for its runs)."
        ),
    )


@dataclass(kw_only=True)
class NoPlot(Group):
    """`--no-plot`: a command that draws its run's figures when it ends, told not to."""

    no_plot: bool = field_of(NO_PLOT, default=False, help="Do not write plots after each run.")


@dataclass(kw_only=True)
class PlanOnly(Group):
    """`--dry-run`: say what a command would launch, and launch nothing."""

    dry_run: bool = field_of(DRY_RUN, default=False, help="Print the plan; launch nothing.")


@dataclass(kw_only=True)
class Fabric(Group):
    """A fabric of the alpha-beta model (`strategies.model`): its link bandwidth and its
    latency per step, to predict on (`model`; `replay --rebucket` on another fabric)."""

    bw: float | None = field_of(BW, metavar="GBPS", help="Link bandwidth in GB/s (beta).")
    latency: float | None = field_of(LATENCY, metavar="US", help="Latency per step in us (alpha).")


@dataclass(kw_only=True)
class OneOp(Group):
    """`--op` naming the one collective a stored file holds."""

    op: str | None = field_of(OP, help="The collective.")


@dataclass(kw_only=True)
class Iterations(Group):
    """`--warmup` and `--iters`: the untimed and the timed iterations of each measurement (a
    point, a test, a row, a round of copies); None lets the command choose. The range is what
    every command's settings hold (`collectives.settings.Timing`, `p2p.settings.P2PSettings`),
    refused as the request is built; a suite's `timing` section takes both keys."""

    warmup: int | None = field_of(
        WARMUP,
        suite=True,
        maximum=MAX_ITERATIONS,
        help="Warm-up iterations per measurement. Default: the command's.",
    )
    iters: int | None = field_of(
        ITERS,
        suite=True,
        minimum=1,
        maximum=MAX_ITERATIONS,
        help="Timed iterations per measurement. Default: the command's.",
    )


@dataclass(kw_only=True)
class HangTimeout(Group):
    """`--timeout`: seconds without progress before a launch's ranks are declared hung. A
    finite number here; how short a one the watchdog can honour is `Timing.check`'s, which
    every launch's settings pass (`results.names.MIN_TIMEOUT`)."""

    timeout: float | None = field_of(
        TIMEOUT, suite=True, help="Seconds without progress before the run is declared hung."
    )
