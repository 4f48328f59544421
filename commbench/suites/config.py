"""Suite files: which commands a suite runs, with what, and how strictly it is gated.

A suite is YAML read with `safe_load` and checked key by key: an unknown key or a value of
the wrong type is a UserError (exit 2) naming the key's path, e.g. `collectives.ops[2]`.
Sizes may differ by device (`sizes: {cuda: 1K-1G, cpu: 1K-4M}`) so that one suite runs on
a GPU runner and on a laptop.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from commbench.arguments import parse_fraction
from commbench.collectives.settings import (
    CPU_DEFAULT_SIZES,
    DEFAULT_MAX_ITERS,
    DEFAULT_MIN_ITERS,
    DEFAULT_MIN_TIME,
    GPU_DEFAULT_SIZES,
    MAX_NPROC,
    MIN_TIMEOUT,
    CollectivesRequest,
    Timing,
)
from commbench.compare import GateSettings
from commbench.errors import UserError
from commbench.files import load_yaml
from commbench.numbers import MAX_ITERATIONS, shown_number
from commbench.options import default_of, suite_keys
from commbench.results.names import (
    DEFAULT_ALPHA,
    DEFAULT_LATENCY_TOLERANCE,
    DEFAULT_NOISY_CV,
    DEFAULT_TOLERANCE,
    DEVICES,
)

SUITE_SCHEMA_VERSION = 1
T = TypeVar("T")


class _Invalid(Exception):
    """A problem at a key path; `load_suite` adds the file name and raises UserError."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


class _Section:
    """Typed reads from one mapping; `done()` refuses the keys nobody read."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise _Invalid(path or "(top level)", f"expected a mapping, got {_type_name(data)}")
        self.data = data
        self.path = path
        self.read: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def take(self, key: str, parse: Callable[[Any, str], T], default: T) -> T:
        """The value at `key` through its parser (which names the key's path when the value
        is wrong), or `default` when the key is absent or null."""
        self.read.add(key)
        if key not in self.data or self.data[key] is None:
            return default
        return parse(self.data[key], self.at(key))

    def option(self, record: type, key: str, parse: Callable[[Any, str], T]) -> T:
        """The key of the same name as a declared option of `record` (`suite=True`), with
        that option's default: a suite entry that leaves a key out measures what the bare
        command measures."""

        return self.take(key, parse, suite_keys(record)[key].default)

    def done(self) -> None:
        for key in self.data:
            if key not in self.read:
                expected = ", ".join(sorted(self.read))
                raise _Invalid(self.at(str(key)), f"unknown key (expected one of: {expected})")


def _int(minimum: int, maximum: int = MAX_ITERATIONS) -> Callable[[Any, str], int]:
    """A whole number in [minimum, maximum]; every count a suite holds is far below the
    default ceiling, so a 30-digit one is a typo, not a request."""

    def parse(value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(path, f"expected an integer, got {_type_name(value)}")
        if value < minimum:
            raise _Invalid(path, f"must be at least {minimum}, got {shown_number(value)}")
        if value > maximum:
            raise _Invalid(path, f"must be at most {maximum}, got {shown_number(value)}")
        return value

    return parse


def _seconds(minimum: float) -> Callable[[Any, str], float]:
    """A finite number of seconds, at least `minimum` (and positive)."""

    def parse(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(path, f"expected a number, got {_type_name(value)}")
        if not math.isfinite(value) or value <= 0:
            raise _Invalid(path, f"must be positive, got {shown_number(value)}")
        if value < minimum:
            raise _Invalid(path, f"must be at least {minimum:g}, got {value:g}")
        return float(value)

    return parse


_float = _seconds(0.0)


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(path, f"expected true or false, got {_type_name(value)}")
    return value


def _in_place(value: Any, path: str) -> bool | str:
    """true, false, or `both` (out-of-place and in-place side by side)."""
    if isinstance(value, bool):
        return value
    if value == "both":
        return "both"
    raise _Invalid(path, f"expected true, false or both, got {_type_name(value)}")


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(path, f"expected a string, got {_type_name(value)}")
    return value


def _name(value: Any, path: str) -> str:
    """A suite name: it names the suite's directory, so one plain path component."""
    text = _str(value, path)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", text):
        raise _Invalid(path, f"{text!r} is not a plain name (letters, digits, '_', '-', '.')")
    return text


def _choice(*choices: str) -> Callable[[Any, str], str]:
    def parse(value: Any, path: str) -> str:
        text = _str(value, path)
        if text not in choices:
            raise _Invalid(path, f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


def _names(known: Any, what: str) -> Callable[[Any, str], list[str]]:
    """`all`, or a list of names from `known` (a collection, or None to accept any string)."""

    def parse(value: Any, path: str) -> list[str]:
        if value == "all":
            return list(known) if known is not None else ["all"]
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",")]
            if len(value) > 1 and not all(value):  # an empty item, as on the command line
                raise _Invalid(path, f"item {value.index('') + 1} of {len(value)} is empty")
        if not isinstance(value, list) or not value:
            raise _Invalid(path, f"expected 'all' or a list of {what}, got {_type_name(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise _Invalid(f"{path}[{i}]", f"expected a string, got {_type_name(item)}")
            if known is not None and item not in known:
                raise _Invalid(
                    f"{path}[{i}]", f"unknown {what[:-1]} {item!r}; choose from: {', '.join(known)}"
                )
        return list(dict.fromkeys(value))

    return parse


def _fraction(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _Invalid(path, f"expected a percentage like 5%, got {_type_name(value)}")
    try:
        return parse_fraction(value, path)
    except UserError as exc:
        raise _Invalid(path, str(exc).split(": ", 1)[-1]) from None


def _size_text(value: Any, path: str) -> str:
    from commbench.sizes import parse_sizes

    if isinstance(value, list):
        if not value:
            raise _Invalid(path, "empty size list")
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, str | int):
                raise _Invalid(f"{path}[{i}]", f"expected a size, got {_type_name(item)}")
        value = ",".join(str(v) for v in value)
    elif isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise _Invalid(path, f"expected a size spec like 1K-1G, got {_type_name(value)}")
    try:
        parse_sizes(value)
    except UserError as exc:
        raise _Invalid(path, str(exc)) from None
    return value


@dataclass(kw_only=True, slots=True)
class Sizes:
    """Size specs (the `--sizes` grammar) per device type."""

    cuda: str
    cpu: str

    def for_device(self, device: str) -> list[int]:
        from commbench.sizes import parse_sizes

        return parse_sizes(self.cuda if device == "cuda" else self.cpu)


def _sizes(value: Any, path: str) -> Sizes:
    if isinstance(value, dict):
        section = _Section(value, path)
        cuda = section.take("cuda", _size_text, None)
        cpu = section.take("cpu", _size_text, None)
        section.done()
        if cuda is None or cpu is None:
            missing = "cuda" if cuda is None else "cpu"
            raise _Invalid(f"{path}.{missing}", "missing (give both cuda and cpu, or one spec)")
        return Sizes(cuda=cuda, cpu=cpu)
    text = _size_text(value, path)
    return Sizes(cuda=text, cpu=text)


def _dtypes(value: Any, path: str) -> list[str]:
    """`all`, a name or a list of them (a comma list or YAML's), each an alias (`bf16`) or
    the name it stands for, as `--dtype` takes them: the names the runs are made with."""
    from commbench.collectives.specs import DTYPES
    from commbench.results.names import DTYPE_ALIASES

    if isinstance(value, str):
        value = ",".join(DTYPE_ALIASES.get(v.strip(), v.strip()) for v in value.split(","))
    elif isinstance(value, list):
        value = [DTYPE_ALIASES.get(v, v) if isinstance(v, str) else v for v in value]
    return _names(list(DTYPES), "dtypes")(value, path)


def _reduce_ops(value: Any, path: str) -> str:
    """A reduce op, a comma list of them or `all`, as `--reduce-op` takes it; kept as
    written (suite.json says what the file said), each run parses it as the command does."""
    from commbench.collectives.settings import parse_reduce_ops
    from commbench.collectives.specs import REDUCE_OPS

    text = _str(value, path)
    try:
        names = parse_reduce_ops(text)
    except UserError as exc:
        raise _Invalid(path, str(exc)) from None
    for name in names:
        if name not in REDUCE_OPS:
            raise _Invalid(path, f"expected one of {', '.join(REDUCE_OPS)} or all, got {name!r}")
    if len(set(names)) != len(names):
        raise _Invalid(path, f"names a reduce op twice: {text}")
    return text


def _timing(section: _Section) -> Timing:
    # read in the file's documented order, so that the first bad key is the one named
    warmup = section.option(CollectivesRequest, "warmup", _int(0))
    iters = section.option(CollectivesRequest, "iters", _int(1))
    min_time = section.option(CollectivesRequest, "min_time", _float)
    timing = Timing(
        warmup=warmup,
        iters=iters,
        min_time=DEFAULT_MIN_TIME if min_time is None else min_time,
        min_iters=section.take("min_iters", _int(1), DEFAULT_MIN_ITERS),
        max_iters=section.take("max_iters", _int(1), DEFAULT_MAX_ITERS),
        timeout=section.option(CollectivesRequest, "timeout", _seconds(MIN_TIMEOUT)),
    )
    if timing.iters is not None and "min_time" in section.data:
        raise _Invalid(
            section.at("min_time"), "iters and min_time both given: iters fixes the count; give one"
        )
    if timing.min_iters > timing.max_iters:
        raise _Invalid(section.at("min_iters"), "must not exceed max_iters")
    return timing


@dataclass(kw_only=True, slots=True)
class CollectivesSection:
    ops: list[str]
    sizes: Sizes
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    """One run per dtype."""
    reduce_op: str = "sum"
    """A reduce op, a comma list or `all` (`--reduce-op`): one run measures each."""
    in_place: bool | str = False
    """true, false or "both"."""
    check: bool = True
    timing: Timing = field(default_factory=Timing)


@dataclass(kw_only=True, slots=True)
class StrategiesSection:
    names: list[str]
    sizes: Sizes
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    reduce_op: str = "sum"
    timing: Timing = field(default_factory=Timing)


@dataclass(kw_only=True, slots=True)
class P2PSection:
    """Passed to `commbench.p2p.run_p2p` as a plain mapping (`P2PSettings.from_options`)."""

    options: dict[str, Any]


@dataclass(kw_only=True, slots=True)
class SuiteConfig:
    name: str
    description: str = ""
    nproc: int | None = None
    """Workers per node; None = every visible GPU, else 2 (as `commbench collectives`)."""
    backend: str | None = None
    device: str | None = None
    collectives: CollectivesSection | None = None
    strategies: StrategiesSection | None = None
    p2p: P2PSection | None = None
    topo: bool = False
    gate: GateSettings = field(default_factory=GateSettings)
    source: str = ""
    """The file it was read from."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _enabled(value: Any) -> bool:
    """`section: false` (or absent) turns a section off; `section: true` takes its defaults."""
    return value is not None and value is not False


def _section_data(value: Any) -> Any:
    return {} if value is True else value


def _suite_in_place(value: bool | str) -> bool | str:
    """In the suite's own words (true, false or both; suite.json stores them so): the
    command's `--in-place no|yes` default is false or true here."""
    if value in ("no", "yes"):
        return value == "yes"
    return value


def _section_sizes(section: _Section) -> Sizes:
    """`sizes`: one spec, or one per device; the bare command's per-device default when
    left out (`CollectivesRequest.sizes` None)."""
    sizes = section.option(CollectivesRequest, "sizes", _sizes)
    return Sizes(cuda=GPU_DEFAULT_SIZES, cpu=CPU_DEFAULT_SIZES) if sizes is None else sizes


def _default_dtypes() -> list[str]:
    """`dtypes` (a list: one run each) defaults to the command's `--dtype`."""
    from commbench.collectives.settings import parse_dtypes

    return parse_dtypes(default_of(CollectivesRequest, "dtype"))


def _collectives(value: Any) -> CollectivesSection:
    from commbench.collectives.specs import OPS

    s = _Section(_section_data(value), "collectives")
    ops = s.option(CollectivesRequest, "ops", _names(list(OPS), "ops"))
    out = CollectivesSection(
        # the bare command's default: every op
        ops=list(OPS) if ops is None else ops,
        sizes=_section_sizes(s),
        dtypes=s.take("dtypes", _dtypes, _default_dtypes()),
        reduce_op=s.option(CollectivesRequest, "reduce_op", _reduce_ops),
        in_place=_suite_in_place(s.option(CollectivesRequest, "in_place", _in_place)),
        check=s.option(CollectivesRequest, "check", _bool),
        timing=_timing(s),
    )
    s.done()
    return out


def _strategy_names() -> list[str] | None:
    try:
        from commbench.collectives.specs import STRATEGIES
    except ImportError:
        return None
    return list(STRATEGIES)


def _strategies(value: Any) -> StrategiesSection:
    known = _strategy_names()
    s = _Section(_section_data(value), "strategies")
    out = StrategiesSection(
        # Without the strategies module names are kept as written; the runner skips them.
        names=s.take("names", _names(known, "strategies"), list(known or ["all"])),
        sizes=_section_sizes(s),
        dtypes=s.take("dtypes", _dtypes, _default_dtypes()),
        reduce_op=s.option(CollectivesRequest, "reduce_op", _reduce_ops),
        timing=_timing(s),
    )
    s.done()
    return out


def _pairs(value: Any, path: str) -> Any:
    if value == "all":
        return value
    if not isinstance(value, list):
        raise _Invalid(path, f"expected 'all' or a list of [src, dst], got {_type_name(value)}")
    for i, pair in enumerate(value):
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair)
        )
        if not ok:
            raise _Invalid(f"{path}[{i}]", "expected [src, dst] GPU indices")
    return value


def _p2p(value: Any) -> P2PSection:
    s = _Section(_section_data(value), "p2p")
    options = {
        "sizes": s.take("sizes", _sizes, None),
        "pairs": s.take("pairs", _pairs, "all"),
        "mode": s.take("mode", _choice("concurrent", "sequential", "both"), None),
        "bidirectional": s.take("bidirectional", _bool, False),
        "host": s.take("host", _bool, None),
        "latency": s.take("latency", _bool, None),
        "warmup": s.take("warmup", _int(0), None),
        "iters": s.take("iters", _int(1), None),
        "min_time": s.take("min_time", _float, None),
    }
    s.done()
    return P2PSection(options={k: v for k, v in options.items() if v is not None})


def _gate(value: Any) -> GateSettings:
    s = _Section(value, "compare")
    gate = GateSettings(
        tolerance=s.take("tolerance", _fraction, DEFAULT_TOLERANCE),
        latency_tolerance=s.take("latency_tolerance", _fraction, DEFAULT_LATENCY_TOLERANCE),
        alpha=s.take("alpha", _fraction, DEFAULT_ALPHA),
        noisy_cv=s.take("noisy_cv", _float, DEFAULT_NOISY_CV),
        allow_mismatch=s.take("allow_mismatch", _bool, False),
    )
    s.done()
    return gate


def parse_suite(data: Any, source: str = "") -> SuiteConfig:
    """A suite from already-loaded YAML data. Raises UserError naming the bad key's path."""
    where = f"{source}: " if source else ""
    try:
        top = _Section(data, "")
        version = top.take("schema_version", _int(1), SUITE_SCHEMA_VERSION)
        if version > SUITE_SCHEMA_VERSION:
            raise _Invalid(
                "schema_version",
                f"{version} is newer than this commbench understands ({SUITE_SCHEMA_VERSION})",
            )
        default_name = Path(source).stem if source else "suite"
        config = SuiteConfig(
            name=top.take("name", _name, default_name),
            description=top.take("description", _str, ""),
            nproc=top.take("world_size", _int(1, MAX_NPROC), None),
            backend=top.take("backend", _choice("nccl", "gloo"), None),
            device=top.take("device", _choice(*DEVICES), None),
            topo=top.take("topo", _bool, False),
            source=source,
        )
        for key, build in (
            ("collectives", _collectives),
            ("strategies", _strategies),
            ("p2p", _p2p),
        ):
            top.read.add(key)
            if _enabled(top.data.get(key)):
                setattr(config, key, build(top.data[key]))
        top.read.add("compare")
        config.gate = _gate(top.data.get("compare"))
        top.done()
    except _Invalid as exc:
        raise UserError(f"{where}{exc}") from None
    if not (config.collectives or config.strategies or config.p2p or config.topo):
        raise UserError(f"{where}nothing to run: enable collectives, strategies, p2p or topo")
    return config


def load_suite(path: Path) -> SuiteConfig:
    """Read and validate a suite file (`configs/ci.yaml`): read like `yaml.safe_load`, but a
    duplicate key, nesting past a bound or an absurd integer is refused naming the line."""
    return parse_suite(load_yaml(Path(path), "suite file"), str(path))
