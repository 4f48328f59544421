"""Settings of a collectives run: what the CLI (or a suite) asks for, what workers read."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from commbench.arguments import HangTimeout, Iterations, Request, declare_kind
from commbench.collectives.placement import Placement
from commbench.collectives.specs import (
    DTYPES,
    OPS,
    REDUCE_OPS,
    parse_ops,
    parse_strategies,
    plan_size,
)
from commbench.errors import UserError, quoted
from commbench.flags import MIN_TIME, SIZES, STRATEGIES
from commbench.lists import split_list
from commbench.numbers import MAX_ITERATIONS, check_range
from commbench.options import Group, field_of, option, use
from commbench.results.names import (
    ALL,
    DEFAULT_TIMEOUT,
    DTYPE_ALIASES,
    IN_PLACE,
    MAX_NODES,
    MAX_NPROC,
    MAX_SECONDS,
    MIN_TIMEOUT,
)
from commbench.sizes import check_size, parse_sizes
from commbench.skew import DEFAULT_SEED, DEFAULT_SKEW, MAX_SEED, SKEW_FORMS, Skew

# The defaults of a collectives run, written once: the CLI's help, a suite's timing section
# and the Python API all read them from here.
GPU_DEFAULT_SIZES = "1K-1G"
CPU_DEFAULT_SIZES = "1K-1M"
"""A CPU rank moves ~1 GB/s through gloo: 1 GiB points would take minutes each."""
DEFAULT_MIN_TIME = 0.2
DEFAULT_MIN_ITERS = 10
DEFAULT_MAX_ITERS = 1000


def as_typed(text: str) -> Any:
    """A list field's default as the command line types it (`float32`): its kind parses it
    as the record is built, so the record holds the list and `--help` shows the text."""
    return text


@dataclass(kw_only=True, slots=True)
class Timing:
    """How long each point is measured, stated once for every producer that builds it
    (`collectives`, a suite's `timing` section, `replay` and `diagnose`), each filling in
    what its own flags say; `CollectivesSettings.timing` holds it."""

    warmup: int | None = None
    """Warm-up iterations per point; None adapts to the size (see `worker.plan_iterations`)."""
    iters: int | None = None
    """Timed iterations per point; None fills `min_time` within [min_iters, max_iters]."""
    min_time: float = DEFAULT_MIN_TIME
    """Seconds of timed iterations per point when `iters` is None."""
    min_iters: int = DEFAULT_MIN_ITERS
    """Floor on timed iterations: the regression gate's significance test needs samples."""
    max_iters: int = DEFAULT_MAX_ITERS
    """Ceiling on timed iterations, so 1 KiB points do not run for ever on fast links."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds without progress before a run is declared hung."""

    def check(self) -> None:
        """UserError, in the flag's words, for a count or a time no run could honour
        (checked as the settings holding it are built)."""
        for name, least in (("warmup", 0), ("iters", 1), ("min_iters", 1), ("max_iters", 1)):
            value = getattr(self, name)
            if value is not None:
                check_range(value, f"--{name.replace('_', '-')}", least, MAX_ITERATIONS)
        if not math.isfinite(self.min_time) or self.min_time <= 0:
            raise UserError("--min-time must be a positive number of seconds")
        check_range(self.min_time, "--min-time", maximum=MAX_SECONDS)
        check_range(self.timeout, "--timeout", maximum=MAX_SECONDS)
        if not self.min_iters <= self.max_iters:
            raise UserError("need 1 <= min_iters <= max_iters")
        if not math.isfinite(self.timeout) or self.timeout <= 0:
            raise UserError("--timeout must be a positive number of seconds")
        if self.timeout < MIN_TIMEOUT:
            raise UserError(
                f"--timeout must be at least {MIN_TIMEOUT:g} s: ranks report progress every "
                "0.5 s, so a shorter one would take measuring ranks for hung ones"
            )


@dataclass(kw_only=True, slots=True)
class CollectivesSettings:
    ops: list[str]
    """Op names from `commbench.ops.OPS`, measured in this order."""
    sizes: list[int]
    """Requested per-rank sizes S in bytes (each op rounds them, see `plan_size`)."""
    placement: Placement
    """Where the ranks go: workers per node, backend and device (run.json stores them flat,
    `STORED_KEYS`)."""
    dtype: str = "float32"
    """The first of `dtypes` (what a reader of one dtype per run takes)."""
    dtypes: list[str] = field(default_factory=list)
    """Every dtype measured, in order (`--dtype float32,bfloat16`); [dtype] when not given."""
    reduce_op: str = "sum"
    """The first of `reduce_ops` (what a reader of one reduce op per run takes)."""
    reduce_ops: list[str] = field(default_factory=list)
    """Every reduce op the reducing ops are measured with, in order (`--reduce-op sum,max`,
    `all`); [reduce_op] when not given (and in settings stored before it)."""
    timing: Timing = field(default_factory=Timing)
    """How long each point is measured (run.json stores its fields flat, `STORED_KEYS`)."""
    in_place: str = "no"
    """no, yes or both (`IN_PLACE`): for the ops that have both forms (all_gather,
    reduce_scatter), measure out of place, in place, or both side by side as nccl-tests does.
    A bool (settings stored before `both`) reads as yes/no."""
    check: bool = True
    async_op: bool = False
    graph: bool = False
    """Capture the timed iterations in a CUDA graph and time its replays."""
    ranks: list[int] | None = None
    """Run the ops on this subgroup (global ranks); the others wait."""
    strategies: list[str] = field(default_factory=list)
    """All-reduce strategies to time in addition to `ops`."""
    profile: bool = False
    """Record a torch.profiler trace of a few untimed iterations per point (one file per rank)."""
    skew: str = DEFAULT_SKEW
    """How the ops that take a skew (all_to_allv) split each rank's S over its destinations:
    uniform, zipf:S or hot:F (`commbench.skew`); settings stored before it read as uniform."""
    seed: int = DEFAULT_SEED
    """The draw of the skew's splits: the same skew and seed give the same splits."""

    def __post_init__(self) -> None:
        # The ops, strategies, sizes, dtypes and reduce ops were parsed where they entered
        # (`OpList`, `SizeList`, ... of the request, a suite's keys, a trace's rows, run.json
        # as read): what is checked here is how they go together.
        if not self.ops and not self.strategies:
            raise UserError("nothing to measure: no ops and no strategies")
        if not self.sizes:
            raise UserError("no sizes to measure")
        if not self.dtypes:
            self.dtypes = [self.dtype]
        self.dtype = self.dtypes[0]
        self.in_place = in_place_choice(self.in_place)
        if not self.reduce_ops:
            self.reduce_ops = [self.reduce_op]
        self.reduce_op = self.reduce_ops[0]
        self.placement.check()
        if self.graph and (self.placement.device != "cuda" or self.placement.backend != "nccl"):
            raise UserError(
                "--graph needs --device cuda and --backend nccl (only NCCL is graph-capturable)"
            )
        self.timing.check()
        if self.ranks is not None:
            for rank in self.ranks:
                check_range(rank, "--ranks", 0, MAX_NPROC * MAX_NODES)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise UserError(f"--seed must be a whole number, got {self.seed!r}")
        if not isinstance(self.skew, str):
            raise UserError(f"--skew must be one of {', '.join(SKEW_FORMS)}, got {self.skew!r}")
        skew = Skew.parse(self.skew, self.seed)
        self.skew = skew.spec
        if (skew.name != DEFAULT_SKEW or self.seed != DEFAULT_SEED) and not any(
            OPS[op].skewed for op in self.ops
        ):
            takes = ", ".join(name for name, spec in OPS.items() if spec.skewed)
            raise UserError(
                f"--skew and --seed shape the splits of {takes}, which --ops does not include"
            )

    @property
    def splits(self) -> Skew:
        """The skew and seed, as the ops that take them split with them."""
        return Skew.parse(self.skew, self.seed)

    def to_dict(self) -> dict[str, Any]:
        """run.json's `settings`: the placement's and the timing's fields flat among the
        others, in `STORED_KEYS`' order (the schema every stored run was written in)."""
        data = asdict(self)
        place, timing = data.pop("placement"), data.pop("timing")
        flat = {**data, **{key: place[key] for key in PLACED_KEYS}, **timing}
        return {key: flat[key] for key in STORED_KEYS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectivesSettings:
        """Settings as `to_dict` (or an older commbench) stored them; unknown keys ignored."""
        own = {f.name for f in fields(cls)} - {"placement", "timing"}
        timing = {f.name for f in fields(Timing)}
        return cls(
            placement=Placement(**{k: data[k] for k in PLACED_KEYS if k in data}),
            timing=Timing(**{k: v for k, v in data.items() if k in timing}),
            **{k: v for k, v in data.items() if k in own},
        )


PLACED_KEYS = ("nproc", "backend", "device")
"""The fields of `Placement` run.json's settings store (its note and GPU count are not)."""
STORED_KEYS = (
    "ops",
    "sizes",
    "nproc",
    "backend",
    "device",
    "dtype",
    "dtypes",
    "reduce_op",
    "reduce_ops",
    "warmup",
    "iters",
    "min_time",
    "min_iters",
    "max_iters",
    "in_place",
    "check",
    "async_op",
    "graph",
    "ranks",
    "strategies",
    "timeout",
    "profile",
    "skew",
    "seed",
)
"""run.json's `settings` of a collectives run, in the order every stored run has them."""


class Placed(Protocol):
    """Where ranks go, as `Placement` and a suite's `Machine` both say it."""

    @property
    def nproc(self) -> int: ...
    @property
    def backend(self) -> str: ...
    @property
    def device(self) -> str: ...


def build_settings(place: Placed, timing: Timing, **what: Any) -> CollectivesSettings:
    """The one builder of `CollectivesSettings`: the ranks of `place`, the timing of
    `timing` and what is measured (`ops`, `sizes`, dtypes, checks: `what`). The command,
    a suite's entries, `replay` and `diagnose` all build their workers' settings here."""
    placement = Placement(nproc=place.nproc, backend=place.backend, device=place.device)
    return CollectivesSettings(placement=placement, timing=timing, **what)


@dataclass(kw_only=True)
class Sweep(Group):
    """`--sizes` and `--strategies` of a sweep: the sizes per rank and the all-reduce
    strategies, parsed as the request is built (`SizeList`, `StrategyList`: the text or the
    API's list in, bytes and names held). `collectives` measures them, `model` predicts them."""

    sizes: SizeList | None = field_of(
        SIZES,
        default=None,
        metavar="SIZES",
        suite=True,
        help="Sizes: 1K-1G (doubling), 8-128M:x4, 1K,64K,1M.",
    )
    strategies: StrategyList | None = field_of(
        STRATEGIES,
        default=None,
        metavar="NAMES",
        help="All-reduce strategies: 'all' or a comma list.",
    )


@dataclass(kw_only=True)
class CollectivesRequest(Sweep, Iterations, HangTimeout, Request):
    """What a user asks of a collectives sweep: each field is declared once here and is the
    `collectives` flag, the `run_collectives` keyword and (where `suite`) a suite entry's
    key. The lists are parsed as it is built (`OpList`, `SizeList`, ...: a comma list or
    the API's list in, the names or bytes held); `settings(place)` fills in the defaults
    that depend on the machine (`CollectivesSettings` is what workers read and run.json
    stores)."""

    sizes = use(
        help="Sizes: 1K-1G (doubling), 8-128M:x4, 1K,64K,1M. "
        f"Default {GPU_DEFAULT_SIZES} on GPUs, {CPU_DEFAULT_SIZES} on CPU.",
    )
    ops: OpList | None = option(
        metavar="OPS",
        type=str,
        suite=True,
        help="Comma list of ops, or 'all' (the default unless --strategies).",
    )
    strategies = use(help="All-reduce strategies to compare: 'all' or a comma list.")
    dtype: DtypeList = option(
        default=as_typed("float32"),
        metavar="DTYPE[,DTYPE...]",
        type=str,
        help="float32, float16 (fp16), bfloat16 (bf16), float64, int32, int64, int8, "
        "uint8; a comma list, or all, measures each in one launch.",
    )
    reduce_op: ReduceOpList = option(
        default=as_typed("sum"),
        metavar="OP[,OP...]",
        type=str,
        suite=True,
        help="sum, avg, max, min or prod; a comma list, or all, measures the reducing "
        "ops with each in one launch.",
    )
    warmup = use(help="Warm-up iterations per point. Default adapts (2-20).")
    iters = use(help="Timed iterations per point. Default: fill --min-time.")
    min_time: float | None = field_of(
        MIN_TIME,
        suite=True,
        help=f"Seconds of timed iterations per point ({DEFAULT_MIN_ITERS}-"
        f"{DEFAULT_MAX_ITERS} iterations). Default {DEFAULT_MIN_TIME}.",
    )
    in_place: bool | str = option(
        default="no",
        metavar="no|yes|both",
        type=str,
        suite=True,
        help="all_gather / reduce_scatter out of place (no), in place (yes), or both "
        "side by side as nccl-tests prints them. The other ops have one form.",
    )
    check: bool = option(
        "--check/--no-check",
        default=True,
        suite=True,
        help="Verify every op's result after timing.",
    )
    async_op: bool = option(default=False, help="Call ops with async_op=True and wait().")
    graph: bool = option(default=False, help="Time CUDA-graph replays (launch overhead out).")
    ranks: str | Sequence[int] | None = option(
        metavar="RANKS", type=str, help="Run the ops on this subgroup, e.g. 0,2."
    )
    timeout: float = use(
        default=DEFAULT_TIMEOUT,
        help="Seconds without progress before the run is declared hung "
        "(start-up, until the first point, gets at least 120 s).",
    )
    profile: bool = option(
        default=False, help="torch.profiler Chrome trace per rank (untimed iterations)."
    )
    skew: str = option(
        default=DEFAULT_SKEW,
        metavar="uniform|zipf:S|hot:F",
        help="How all_to_allv splits each rank's message over its destinations, as MoE "
        "routing does: evenly, by weights 1/(k+1)^S in a seeded order per source, or with "
        "one destination F times the others'.",
    )
    seed: int = option(
        default=DEFAULT_SEED,
        type=int,
        maximum=MAX_SEED,
        help="The draw of --skew's splits (recorded: the same seed, the same splits).",
    )

    def settings(self, place: Placement) -> CollectivesSettings:
        """The settings of this request on nodes placed as `place`: the defaults are filled
        in here, once, for the command, the Python API and the script `slurm-script`
        checks on the submit host. UserError for bad input, with the line the CLI prints."""
        check_iteration_flags(self.iters, self.min_time)
        dtypes, reduce_ops, sizes = self.dtype, self.reduce_op, self.sizes
        if sizes is None:
            sizes = parse_sizes(GPU_DEFAULT_SIZES if place.device == "cuda" else CPU_DEFAULT_SIZES)
        ops, strategies = self.ops, self.strategies
        timing = Timing(
            warmup=self.warmup,
            iters=self.iters,
            min_time=DEFAULT_MIN_TIME if self.min_time is None else self.min_time,
            timeout=self.timeout,
        )
        return build_settings(
            place,
            timing,
            # every op unless only strategies were asked for
            ops=list(ops) if ops is not None else ([] if strategies else list(OPS)),
            strategies=[] if strategies is None else list(strategies),
            sizes=list(sizes),
            dtype=dtypes[0],
            dtypes=dtypes,
            reduce_op=reduce_ops[0],
            reduce_ops=reduce_ops,
            in_place=in_place_choice(self.in_place),
            check=self.check,
            async_op=self.async_op,
            graph=self.graph,
            ranks=parse_ranks(self.ranks),
            profile=self.profile,
            skew=self.skew,
            seed=self.seed,
        )


def in_place_choice(value: bool | str) -> str:
    """`--in-place` as one of IN_PLACE; a bool (the old flag, a stored run, a suite's YAML
    true/false) as yes or no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value not in IN_PLACE:
        raise UserError(
            f"--in-place must be one of {', '.join(IN_PLACE)}, got {quoted(str(value))}"
        )
    return value


def parse_dtypes(value: str | Sequence[str]) -> list[str]:
    """`--dtype float32,bf16` (or a list) as a list of dtype names, in order: an alias
    (`DTYPE_ALIASES`) as the name it stands for, `all` as every dtype. Unknown names are
    left for the reader of the field (`DtypeList`) or the suite key to refuse."""
    items = _list_of_names(value, "--dtype", "dtypes", 4 * len(DTYPES))
    return _expand_all([DTYPE_ALIASES.get(t, t) for t in items], "--dtype", list(DTYPES))


def parse_reduce_ops(value: str | Sequence[str]) -> list[str]:
    """`--reduce-op sum,max` (or a list) as a list of reduce op names, in order; `all` as
    every one (nccl-tests' `-o all`). Unknown names are left for the reader of the field
    (`ReduceOpList`) or the suite key to refuse."""
    items = _list_of_names(value, "--reduce-op", "reduce ops", 4 * len(REDUCE_OPS))
    return _expand_all(items, "--reduce-op", REDUCE_OPS)


def _known(names: list[str], every: Sequence[str], what: str, flag: str) -> list[str]:
    """`names`, each one of `every` and named once: UserError otherwise."""
    for name in names:
        if name not in every:
            raise UserError(f"unknown {what} {name!r}; choose from: {', '.join(every)}")
    if len(set(names)) != len(names):
        raise UserError(f"{flag} names a {what} twice: {','.join(names)}")
    return names


def _list_of_names(value: str | Sequence[str], flag: str, what: str, most: int) -> list[str]:
    """A comma list given to `flag`, or a list of names (the API's, a suite's)."""
    if isinstance(value, str):
        items = split_list(value, flag, max_items=most)
    elif all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise UserError(f"{what} must be names, got {list(value)!r}")
    if not items or any(not t for t in items):
        raise UserError(f"{flag} must be a comma list of {what}, got {quoted(str(value))}")
    return items


def _expand_all(items: list[str], flag: str, every: Sequence[str]) -> list[str]:
    """`all` alone as every name of `every`; beside other names it would name them twice."""
    if ALL not in items:
        return items
    if len(items) > 1:
        raise UserError(f"{flag} all already names every one: give all alone, or a list")
    return list(every)


def check_iteration_flags(iters: int | None, min_time: float | None) -> None:
    """`--iters` fixes the count and `--min-time` adapts it: both at once is a contradiction
    the settings could not record honestly."""
    if iters is not None and min_time is not None:
        raise UserError(
            "--iters and --min-time both given: --iters fixes the count, "
            "--min-time adapts it; give one"
        )


def parse_ranks(ranks: str | Sequence[int] | None) -> list[int] | None:
    """`--ranks 0,2` (or a list of ints) as a list; None (every rank) when not given."""
    if ranks is None:
        return None
    if isinstance(ranks, str):
        from commbench.numbers import is_digits

        items = split_list(ranks, "--ranks")
        if not all(is_digits(t) and len(t) <= 9 for t in items):  # ASCII digits, no sign
            raise UserError(f"--ranks must be a comma list of rank numbers, got {quoted(ranks)}")
        ranks = [int(t) for t in items]
    elif not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise UserError(f"ranks must be rank numbers, got {list(ranks)!r}")
    if not ranks:
        raise UserError("--ranks is empty")
    return list(ranks)


def _names(value: str | Sequence[str], parse: Any) -> list[str]:
    """A comma list, or a list of names (each checked by the same parser)."""
    if isinstance(value, str):
        return list(parse(value))
    if not all(isinstance(v, str) for v in value):
        raise UserError(f"expected names, got {list(value)!r}")
    return list(parse(",".join(value)))


def _sizes(values: str | Sequence[int | str]) -> list[int]:
    """`--sizes 1K-1G` (a spec), or a list of sizes: byte counts, or specs such as "64K"."""
    if isinstance(values, str):
        return parse_sizes(values)
    out: list[int] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise UserError(f"a size must be a number of bytes or a size like '64K', got {v!r}")
        out.extend(parse_sizes(v) if isinstance(v, str) else [check_size(v)])
    return out


# The lists a collectives request holds parsed (`arguments.declare_kind`): what a field so
# annotated takes, and what it holds once the request is built.
OpList = list[str]
"""Op names: `--ops all_reduce,all_gather`, `all`, or a list of names (`parse_ops`)."""
StrategyList = list[str]
"""All-reduce strategy names: `--strategies ring,direct`, `all`, or a list."""
SizeList = list[int]
"""Requested sizes in bytes: `--sizes 1K-1G`, or a list of byte counts and size specs."""
DtypeList = list[str]
"""Dtype names: `--dtype float32,bf16`, `all`, or a list (aliases as the name they stand for)."""
ReduceOpList = list[str]
"""Reduce op names: `--reduce-op sum,max`, `all`, or a list."""

declare_kind("OpList", "str | Sequence[str]", lambda v, path: _names(v, parse_ops))
declare_kind("StrategyList", "str | Sequence[str]", lambda v, path: _names(v, parse_strategies))
declare_kind("SizeList", "str | Sequence[int | str]", lambda v, path: _sizes(v))
declare_kind(
    "DtypeList",
    "str | Sequence[str]",
    lambda v, path: _known(parse_dtypes(v), list(DTYPES), "dtype", "--dtype"),
)
declare_kind(
    "ReduceOpList",
    "str | Sequence[str]",
    lambda v, path: _known(parse_reduce_ops(v), REDUCE_OPS, "reduce op", "--reduce-op"),
)


@dataclass(frozen=True, slots=True)
class Point:
    """One measurement of a sweep: an op (or an all-reduce strategy) at one requested size,
    in one dtype and one form (in place or not)."""

    op: str
    strategy: str
    requested_bytes: int
    dtype: str = "float32"
    in_place: bool = False
    """Whether the output buffer is the input (the row's `in_place`: always True for the ops
    torch runs in place, all_reduce, broadcast and reduce)."""
    reduce_op: str = "sum"
    """The reduce op it is called with: one of `reduce_ops` for an op that reduces, the
    first for the others (which ignore it, and whose rows say none)."""


def forms(op: str, in_place: str) -> list[bool]:
    """The forms an op is measured in: the one it has, or for the ops that have both
    (OpSpec.in_place "optional") what `--in-place` asks, out of place first."""
    has = OPS[op].in_place
    if has == "always":
        return [True]
    if has == "never":
        return [False]
    return {"no": [False], "yes": [True], "both": [False, True]}[in_place]


def plan_points(settings: CollectivesSettings, group_size: int) -> list[Point]:
    """The sweep in the order workers measure it; the launcher uses it for progress.

    Per dtype, each op (with each reduce op, for those that reduce) in each of its forms
    across the sizes, then the strategies (with each reduce op). Requested sizes that round
    to the same size for an op (`--sizes 6,1` of float32 both give 4 B) are measured once,
    at the first of them: two rows of one size would be two keys for one point in `compare`.
    """

    def distinct(op: str, dtype: str) -> list[int]:
        seen: dict[int, int] = {}
        for s in settings.sizes:
            seen.setdefault(plan_size(op, s, dtype, group_size).size_bytes, s)
        return list(seen.values())

    reduce_ops = settings.reduce_ops or [settings.reduce_op]

    def reduced_by(op: str) -> list[str]:
        return reduce_ops if OPS[op].reduces else reduce_ops[:1]

    points: list[Point] = []
    for dtype in settings.dtypes or [settings.dtype]:
        for op in settings.ops:
            sizes = [0] if OPS[op].latency_only else distinct(op, dtype)
            for reduce_op in reduced_by(op):
                for form in forms(op, settings.in_place):
                    points.extend(
                        Point(
                            op=op,
                            strategy="",
                            requested_bytes=s,
                            dtype=dtype,
                            in_place=form,
                            reduce_op=reduce_op,
                        )
                        for s in sizes
                    )
        for strategy in settings.strategies:
            for reduce_op in reduce_ops:
                points.extend(
                    Point(
                        op="all_reduce",
                        strategy=strategy,
                        requested_bytes=s,
                        dtype=dtype,
                        in_place=True,
                        reduce_op=reduce_op,
                    )
                    for s in distinct("all_reduce", dtype)
                )
    return points
