"""One declaration per option: the field of a request record is the flag, the keyword and the
suite key at once.

A command's options are the fields of one dataclass (`CollectivesRun`, `CompareRequest`, ...).
Each field says, once, its name (the Python keyword; the flag is derived from it unless
given), its type, its default and its help (`option(...)`, `field_of(FLAG, ...)`; a required
or positional one in its `metadata`: `cli(...)`, `arg(...)`, `paths(...)`). Two things are
built from that record and nothing else:

* the Typer command (`command`): a callback whose signature is made from the fields, so
  `--help`, the parsed defaults and the record's defaults are the same objects;
* the Python API verb (`verb`): a function whose keywords are the record's constructor,
  so `help(commbench.run_collectives)`, a type checker (through `ParamSpec`) and the CLI
  agree on every name and default.

A suite's schema reads its keys from the same fields (`suite_keys`). A field without
metadata is API-only (a progress callback); a parameter of the command's own body that is
not a field is CLI-only (`--format`, where the output goes). Nothing here imports Typer at
module level: `import commbench` stays light, and only the CLI builds commands.

This follows torchtitan (`config/manager.py` builds argparse from `JobConfig`'s fields) and
hyperfine (one options struct, filled once from clap).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
O = TypeVar("O")  # noqa: E741 - the options record's type

KEY = "commbench.option"
"""The key of a field's metadata that holds its `Declared`."""


@dataclass(frozen=True, slots=True)
class Declared:
    """What the command line needs of one field: everything else (name, default, type as
    the API sees it) is the field's own."""

    names: tuple[str, ...]
    """Flag spellings (`--sizes`, `-s`; `--check/--no-check` for a switch pair); empty for a
    positional argument."""
    help: str
    metavar: str | None = None
    type: Any = None
    """What Typer parses the text into (str, int, float, bool, Path, an Enum, list[Path]);
    None: the type of the default, else the field's plain type (`int` of `int | None`)."""
    argument: bool = False
    """A positional argument (`compare BASELINE NEW`) rather than a flag."""
    suite: bool = False
    """A suite file's entries take it as a key of the same name."""
    late: bool = False
    """Listed after the command's own options in `--help` (the shared launch flags)."""
    minimum: float = 0
    maximum: float | None = None
    """The range of a number (an int or a float field); the check is the record's
    (`commbench.arguments`), and without `maximum` a field's own limit is checked where it
    is used."""
    used: bool = False
    """A record's `use` of an option that a record it is built of declares: this command's
    help (and the field's default), not a declaration of its own."""


def cli(
    *names: str, help: str, metavar: str | None = None, type: Any = None
) -> Mapping[str, Declared]:
    """The metadata of a required flag, one with no default: `image: str =
    field(metadata=cli(metavar="IMAGE", help=...))` (`k8s-manifest --image`). A flag with a
    default is an `option(...)`; this is the form for the one without, because a type checker
    reads a field as required only when it is `dataclasses.field` without a default, and reads
    any other call (`option`'s) as a default. Without names, the flag is the field's name in
    kebab case."""
    return {KEY: Declared(names, help, metavar, type)}


def option(
    *names: str,
    default: Any = None,
    help: str,
    metavar: str | None = None,
    type: Any = None,
    suite: bool = False,
    late: bool = False,
    minimum: float = 0,
    maximum: float | None = None,
) -> Any:
    """A record's field that is a flag of its command alone, with a default: `steps: int |
    None = option(metavar="K", minimum=1, help=...)`, a keyword-only dataclass field whose
    metadata declares the flag. The default is None unless given, as `field_of`'s is: most
    flags mean "not given" until the user says (a required flag is a `cli`)."""
    declared = Declared(names, help, metavar, type, False, suite, late, minimum, maximum)
    return dataclasses.field(default=default, kw_only=True, metadata={KEY: declared})


@dataclass(frozen=True, slots=True)
class Flag:
    """A flag that several records take, declared once (`commbench.flags`): its spellings,
    the type it is parsed into, its metavar and its range. Each record that takes it says,
    with `field_of(FLAG, ...)`, what it means there (its help), its default and whether a suite file
    takes it; a record whose command shows another metavar or checks another range says so
    there too. Renaming the flag, or changing its type, is one edit."""

    names: tuple[str, ...]
    type: Any = None
    metavar: str | None = None
    minimum: float = 0
    maximum: float | None = None

    def option(self, default: Any, *, help: str, metavar: str | None = None) -> Any:
        """The `typer.Option` of this flag as a command body's own parameter (a way of
        printing, not an option of the verb: `--format`, compare's `--out`)."""
        import typer

        return typer.Option(default, *self.names, metavar=metavar or self.metavar, help=help)


def field_of(
    flag: Flag,
    *,
    help: str,
    default: Any = None,
    suite: bool = False,
    late: bool = False,
    kw_only: bool = True,
    metavar: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    type: Any = None,
    also: tuple[str, ...] = (),
) -> Any:
    """A record's field that is the shared `flag`: `warmup: int | None = field_of(WARMUP,
    help="Warm-up iterations per test.")`, with this record's help and default (and where
    its command differs: the metavar it shows, the range it checks, the type it parses, a
    short spelling it adds). A plain function, so that a linter knows the dataclass default
    it returns, as it knows `dataclasses.field`."""
    declared = Declared(
        flag.names + also,
        help,
        metavar or flag.metavar,
        flag.type if type is None else type,
        False,
        suite,
        late,
        flag.minimum if minimum is None else minimum,
        flag.maximum if maximum is None else maximum,
    )
    return dataclasses.field(default=default, kw_only=kw_only, metadata={KEY: declared})


def flag(
    *names: str,
    type: Any = None,
    metavar: str | None = None,
    minimum: float = 0,
    maximum: float | None = None,
) -> Flag:
    """A flag several records share: `WARMUP = flag("--warmup", type=int)`."""
    return Flag(names, type, metavar, minimum, maximum)


def arg(
    *,
    help: str,
    metavar: str | None = None,
    type: Any = None,
) -> Mapping[str, Declared]:
    """The metadata of a field that is a positional argument."""
    return {KEY: Declared((), help, metavar, type, True)}


def paths(metavar: str, *, help: str) -> Mapping[str, Declared]:
    """The metadata of a positional argument that takes one path or several (`RUN_DIR...`):
    Typer reads each word as a `Path`, the API takes a path or a list of them. A field
    `runs: PathLike | Sequence[PathLike] = field(kw_only=False, metadata=paths("RUN_DIR",
    help=...))`: `field` itself, so that a type checker knows it is required."""
    return arg(metavar=metavar, type=list[Path], help=help)


@dataclass(frozen=True, slots=True)
class Use:
    """What `use` marks in a record's body, for `Group` to make into the field."""

    help: str | None
    default: Any


def use(*, help: str | None = None, default: Any = dataclasses.MISSING) -> Any:
    """In the body of a record built of a `Group`: take the group's option here, with this
    command's help and default (each: the group's when not given), and list it at this place
    in `--help`. The flag, its type, its metavar and its range stay the group's: the option is
    declared once, each command says what it means for it. `allow_mismatch = use(help=...)`,
    with no annotation: the type is the group's too; or the group's `X | None` narrowed to `X`
    where a command's option is never "not given" (`warmup: int = use(default=5)`: p2p's)."""
    return Use(help, default)


class Group:
    """The base of a record of options several commands take, declared once
    (`arguments.MismatchAllowed`): a command's record takes them by inheriting the group, and
    says with `use(...)` where it lists each and what it means there."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # runs as the class is made, before @dataclass reads its body: each `use` becomes a
        # field of the group's type, flag and check, with this record's help and default
        super().__init_subclass__(**kwargs)
        used = [name for name, value in vars(cls).items() if isinstance(value, Use)]
        if not used:
            return
        annotations = dict(inspect.get_annotations(cls))
        cls.__annotations__ = annotations
        for name in used:
            taken = _declared_field(cls, name)
            mark: Use = vars(cls)[name]
            spec = dataclasses.replace(
                taken.metadata[KEY], help=mark.help or taken.metadata[KEY].help, used=True
            )
            default: Any = taken.default
            factory: Any = taken.default_factory
            if mark.default is not dataclasses.MISSING:
                default, factory = mark.default, dataclasses.MISSING
            own = annotations.get(name)
            if own is not None and own not in (taken.type, _given(taken.type)):
                raise TypeError(
                    f"{cls.__name__}.{name}: {own} = use(...) is neither the group's type "
                    f"{taken.type} nor it without None"
                )
            annotations[name] = own or taken.type
            setattr(
                cls,
                name,
                dataclasses.field(  # type: ignore[call-overload]
                    default=default,
                    default_factory=factory,
                    kw_only=taken.kw_only,
                    metadata={KEY: spec},
                ),
            )
        # where this record lists its options in --help: its body's order, the used ones too
        cls.__option_places__ = tuple(  # type: ignore[attr-defined]
            dict.fromkeys([n for n in vars(cls) if n in annotations] + list(annotations))
        )
        cls.__option_used__ = frozenset(used)  # type: ignore[attr-defined]


def _given(annotation: object) -> object:
    """A group's `X | None` as a command with a default of its own annotates it: `X` (a
    command whose option is never "not given" says so, and its verb's signature too)."""
    return annotation.removesuffix(" | None") if isinstance(annotation, str) else annotation


def _declared_field(cls: type, name: str) -> dataclasses.Field[Any]:
    """The field `name` of the nearest record `cls` is built of that declares it."""
    for base in cls.__mro__[1:]:
        found = getattr(base, "__dataclass_fields__", {}).get(name)
        if found is not None and KEY in found.metadata:
            return found  # type: ignore[no-any-return]
    raise TypeError(f"{cls.__name__}.{name} = use(...): no record it is built of declares {name!r}")


def _places(record: type) -> dict[str, int]:
    """Each field's place in `--help` and the verb's signature: the fields' own order, but an
    option a record `use`s moves to where that record's body lists it."""
    order: list[str] = []
    for cls in reversed(record.__mro__):
        if "__dataclass_fields__" not in vars(cls):
            continue
        used = vars(cls).get("__option_used__", frozenset())
        body = vars(cls).get("__option_places__") or tuple(vars(cls).get("__annotations__", {}))
        for name in body:
            if name in used and name in order:
                order.remove(name)
            if name not in order:
                order.append(name)
    return {name: i for i, name in enumerate(order)}


@dataclass(frozen=True, slots=True)
class Option:
    """One declared field, as the CLI, the API and the docs test read it."""

    name: str
    """The Python keyword."""
    default: Any
    """The default, or `dataclasses.MISSING` for a required argument."""
    declared: Declared
    annotation: Any = None
    """The field's annotation (text: the records' modules postpone them)."""

    @property
    def flags(self) -> tuple[str, ...]:
        if self.declared.argument:
            return ()
        if self.declared.names:
            return self.declared.names
        return ("--" + self.name.replace("_", "-"),)

    @property
    def cli_type(self) -> Any:
        if self.declared.type is not None:
            return self.declared.type
        if self.default is not None and self.default is not dataclasses.MISSING:
            return type(self.default)
        named = _PLAIN.get(_optional(self.annotation) or "")
        if named is None:
            raise TypeError(f"option {self.name!r} needs type= (its default and type say none)")
        return named

    def typer_parameter(self) -> Any:
        """The `typer.Option` / `typer.Argument` this declaration stands for."""
        import typer

        d = self.declared
        default = ... if self.default is dataclasses.MISSING else self.default
        if d.argument:
            return typer.Argument(default, metavar=d.metavar, help=d.help)
        strict = _STRICT.get(self.cli_type)
        if strict is None:
            return typer.Option(default, *self.flags, metavar=d.metavar, help=d.help)
        # a number typed on the command line is read by commbench's own parser, as a suite's
        # or a size is: Python's int() and float() also take `1_0`, `2.0` for an int, `١٢`
        return typer.Option(
            default,
            *self.flags,
            metavar=d.metavar or strict[1],
            help=d.help,
            parser=_strict_parser(strict[0], self.flags[0] if self.flags else self.name),
        )


def declared(record: type | object) -> list[Option]:
    """The declared fields of an options record (a class or an instance), in field order,
    the `late` ones (shared launch flags, from a base record) last."""
    found = []
    kind = record if isinstance(record, type) else type(record)
    places = _places(kind)
    for f in sorted(dataclasses.fields(record), key=lambda f: places.get(f.name, -1)):  # type: ignore[arg-type]
        spec = f.metadata.get(KEY)
        if spec is None:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        found.append(Option(f.name, default, spec, f.type))
    return sorted(found, key=lambda o: o.declared.late)


def suite_keys(record: type) -> dict[str, Option]:
    """The options a suite file's entry takes, by key (the field's name)."""
    return {o.name: o for o in declared(record) if o.declared.suite}


def default_of(record: type, name: str) -> Any:
    """The declared default of one option of `record`."""
    for o in declared(record):
        if o.name == name:
            return o.default
    raise KeyError(name)


def values(record: object) -> dict[str, Any]:
    """The fields of a record as keywords, unconverted (what its verb takes)."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}  # type: ignore[arg-type]


def from_params(record: Callable[..., O], params: Mapping[str, Any]) -> O:
    """The record of the declared fields in a parsed command line's `params` (a click
    context's), the others left at their defaults: how `slurm-script` and `k8s-manifest`
    build what the command they wrap would build."""
    return record(**{o.name: params[o.name] for o in declared(record)})


def verb(record: Callable[P, O]) -> Callable[[Callable[[O], R]], Callable[P, R]]:
    """Make `body(options)` an API function whose keywords are `record`'s constructor.

    The signature is the record's: its names, defaults and types (a type checker sees them
    through `ParamSpec`; `help()` and an IDE through `__signature__`), so an API default
    cannot differ from the CLI's, which is built from the same fields.
    """

    def wrap(body: Callable[[O], R]) -> Callable[P, R]:
        returns = inspect.signature(body).return_annotation
        signature = inspect.signature(record)
        places = _places(record)  # type: ignore[arg-type]
        signature = signature.replace(
            parameters=sorted(
                signature.parameters.values(),
                key=lambda p: (p.kind, places.get(p.name, -1)),
            ),
            return_annotation=returns,
        )

        @functools.wraps(body)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            try:  # the verb's own words for a wrong call, not the record's __init__'s
                signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{body.__name__}(): {exc}") from None
            return body(record(*args, **kwargs))

        call.__signature__ = signature  # type: ignore[attr-defined]
        call.__annotations__ = {
            **{p.name: p.annotation for p in signature.parameters.values()},
            "return": returns,
        }
        call.options = record  # type: ignore[attr-defined]
        return call

    return wrap


def command(
    record: type, *given: inspect.Parameter
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Make `body(options, **own)` a Typer callback whose parameters are the declared fields
    of `record` followed by `body`'s own keyword parameters (a `typer.Context`, `--format`).
    A parameter of `given` stands for the body's parameter of its name (the shared output
    option, `flags.Output`: the body says `fmt: Format`, the option is declared once).

    Typer reads the callback's `__signature__` and `__annotations__`, so the help, the
    flags and the defaults come from the declarations; the record is built from what the
    user typed and handed to the body.
    """

    def wrap(body: Callable[..., None]) -> Callable[..., None]:
        options = declared(record)
        mine = [o.name for o in options]
        shared = {p.name: p for p in given}
        own = [
            shared.get(p.name) or p.replace(annotation=_evaluated(p.annotation, body))
            for p in list(inspect.signature(body).parameters.values())[1:]
        ]
        params = [
            inspect.Parameter(
                o.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=o.typer_parameter(),
                annotation=o.cli_type,
            )
            for o in options
        ]
        params += [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]

        @functools.wraps(body)
        def callback(**kwargs: Any) -> None:
            given = {name: kwargs.pop(name) for name in mine}
            body(record(**given), **kwargs)

        del callback.__wrapped__  # Typer must read the signature below, not body's
        callback.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        callback.__annotations__ = {p.name: p.annotation for p in params}
        callback.options = record  # type: ignore[attr-defined]
        return callback

    return wrap


_PLAIN: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}
"""The annotations a flag's type is read from when neither `type=` nor the default says it."""


def _optional(annotation: Any) -> str | None:
    """`int` of an annotation `int | None` (or `int`); None for any other."""
    if not isinstance(annotation, str):
        return getattr(annotation, "__name__", None)
    members = [m.strip() for m in annotation.split("|") if m.strip() != "None"]
    return members[0] if len(members) == 1 else None


def _evaluated(annotation: Any, body: Callable[..., Any]) -> Any:
    """A parameter's annotation as the type it names: Typer resolves string annotations in
    the callback's module, which is this one, not the command's."""
    if isinstance(annotation, str):
        return eval(annotation, body.__globals__)
    return annotation


def _strict_parser(parse: Callable[[str, str], Any], flag: str) -> Callable[[Any], Any]:
    """A Typer `parser` that reads a number with commbench's parser. A bad one is its
    UserError, raised while the command's group parses it: one line naming the flag, exit 2,
    under `main` and under CliRunner alike (cli._Commands)."""

    def read(text: Any) -> Any:
        if not isinstance(text, str):  # a default, already a number
            return text
        return parse(text, flag)

    return read


def _parse_int(text: str, what: str) -> int:
    from commbench.numbers import parse_int

    return parse_int(text, what)


def _parse_number(text: str, what: str) -> float:
    from commbench.numbers import parse_number

    return parse_number(text, what)


_STRICT: dict[Any, tuple[Callable[[str, str], Any], str]] = {
    int: (_parse_int, "INTEGER"),
    float: (_parse_number, "FLOAT"),
}
"""The option types read by commbench's own number parsers, with the metavar Typer shows."""
