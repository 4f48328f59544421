"""The typed records of an nccl-tests result, and what its names and figures mean to commbench.

A log or a `-J` file is read (`parse`) into these records: a `Parsed` input holds one
`Section` per test, each with its `Header` (the test's settings), its `Device`s and its rows,
already commbench's `ResultRow`s. `write` turns them into a run directory. Nothing here reads
text or JSON: the two readers differ in what they read, and agree, through these, in what it
means.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from commbench.collectives.specs import DTYPES as ELEMENT_BYTES
from commbench.errors import UserError
from commbench.ops import OPS, derived
from commbench.results.schema import IMPORTED_OPS, ProcessTimes, RankTimes, ResultRow
from commbench.stats import Stats, quantile

# nccl-tests type names -> commbench dtype names (others are kept as printed).
DTYPES = {
    "float": "float32",
    "float32": "float32",
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "float64": "float64",
    "int": "int32",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "int8": "int8",
    "char": "int8",
    "uint8": "uint8",
}


@derived
def op_names() -> dict[str, str]:
    """Program / file-name spellings -> commbench op names: each op's
    (`commbench.ops.OpSpec.nccl_tests`), and nccl-tests' own ops commbench has not
    (`results.schema.IMPORTED_OPS`)."""
    return {
        **{name: op for op, spec in OPS.items() for name in spec.nccl_tests},
        **{name: name for name in IMPORTED_OPS},
    }


OP_NAMES = op_names()
"""`op_names()` of the ops `commbench.ops` declares (`import-nccl-tests --op`'s choices)."""


@derived
def _op_re() -> re.Pattern[str]:
    """Any spelling, the longest first, so that `reduce_scatter` is not read as `reduce`."""
    names = sorted(op_names(), key=len, reverse=True)
    return re.compile("(" + "|".join(names) + r")(?:_perf)?", re.IGNORECASE)


@dataclass(kw_only=True, slots=True, frozen=True)
class Device:
    """One rank's device, as a `# Rank N ... device` line or the JSON file's `devices` name
    it; None where the input does not say."""

    rank: int | None
    group: int | None
    """The thread group (current logs); None in older ones."""
    pid: int | None
    host: str | None
    local_rank: int | None
    """The CUDA device the rank used on its host."""
    pci_bus_id: str | None
    device_name: str | None

    def to_dict(self) -> dict[str, Any]:
        """As run.json's `context.ranks` keeps it."""
        return asdict(self)


@dataclass(kw_only=True, slots=True)
class Header:
    """A test's settings as nccl-tests states them: its `# nThread ...` line, or the JSON
    file's `config`; None where the input does not say."""

    nthread: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step: tuple[str, int] | None = None
    """(`factor` or `bytes`, the step) of the text header's `step: 2(factor)`; the JSON file
    has none."""
    warmup_iters: int | None = None
    iters: int | None = None
    more: dict[str, int | None] = field(default_factory=dict)
    """The counters after `iters` (`agg_iters`, `validation`, `graph`, `unalign`), in the
    order the input gives them: versions of nccl-tests add and drop them."""

    def to_dict(self) -> dict[str, Any]:
        """As run.json keeps it (`settings.nccl_tests`, `sections[].header`)."""
        step = {f"step_{self.step[0]}": self.step[1]} if self.step else {}
        return {
            "nthread": self.nthread,
            "ngpus": self.ngpus,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            **step,
            "warmup_iters": self.warmup_iters,
            "iters": self.iters,
            **self.more,
        }


@dataclass(kw_only=True, slots=True)
class Section:
    """One test of a log: its header, devices and table."""

    op: str | None = None
    header: Header | None = None
    """None when the log printed no header line for this test."""
    ranks: list[Device] = field(default_factory=list)
    columns: list[str] | None = None
    rows: list[ResultRow] = field(default_factory=list)
    dropped_empty: int = 0
    avg_busbw: float | None = None

    @property
    def iters(self) -> int:
        """Timed iterations per line, as the header says (0 when it does not)."""
        return (self.header.iters or 0) if self.header else 0

    @property
    def warmup(self) -> int:
        return (self.header.warmup_iters or 0) if self.header else 0

    def header_dict(self) -> dict[str, Any]:
        return self.header.to_dict() if self.header else {}


@dataclass(kw_only=True, slots=True)
class Parsed:
    """Everything a log held; `write` turns it into run.json's parts."""

    source: str
    sections: list[Section]
    nccl: str | None = None
    cuda: str | None = None
    tests_version: str | None = None
    fmt: str = "text"
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """Rows of the input left out, each (where: `line 12`, `results[3]`; why): reported,
    never dropped silently."""

    @property
    def rows(self) -> list[ResultRow]:
        return [r for s in self.sections for r in s.rows]

    def skipped_text(self, shown: int = 3) -> str | None:
        """`3 rows skipped: line 12 (a negative size), ...`, or None when none was."""
        if not self.skipped:
            return None
        listed = ", ".join(f"{where} ({why})" for where, why in self.skipped[:shown])
        more = f", and {len(self.skipped) - shown} more" if len(self.skipped) > shown else ""
        n = len(self.skipped)
        return f"{n} row{'s' if n != 1 else ''} skipped: {listed}{more}"


@dataclass(kw_only=True, slots=True, frozen=True)
class PerIter:
    """One placement's `out_of_place_per_iter` / `in_place_per_iter` object (nccl-tests `-I 1`,
    JSON version 2 and later), as read: its summary figures are nccl-tests' own over the same
    times, so commbench recomputes them from `times_us` rather than keep a second copy."""

    times_us: list[float]
    """Each timed iteration's time, the maximum over the processes, microseconds."""
    skipped: int = 0
    """`skipped_iterations` (version 3, `-K`): leading iterations nccl-tests' own summary
    left out; they are left out of the row's samples too."""
    per_process: list[list[float]] = field(default_factory=list)
    """`per_process_max_times_us`: per MPI process, each iteration's time (the maximum over
    the process's GPUs); nccl-tests writes it only for a run of two processes or more."""

    @property
    def samples(self) -> list[float]:
        return self.times_us[self.skipped :]

    def processes(self, ranks: list[int], ranks_per_process: int) -> ProcessTimes | None:
        """The per-process times from the same iterations as `samples`, each process named by
        its first rank (`ranks`, parallel to `per_process`); None for a single process."""
        if len(self.per_process) < 2:
            return None
        return ProcessTimes(
            ranks=ranks,
            ranks_per_process=ranks_per_process,
            times_us=[t[self.skipped :] for t in self.per_process],
        )


def rank_times(processes: ProcessTimes) -> RankTimes | None:
    """The per-process times as the per-rank record commbench keeps of its own runs, computed
    as its worker computes it (`launch.worker`: each rank's median and p95 of its own times,
    and its median slack below the per-iteration maximum over ranks), so that `report` names
    the rank the others waited for as it does for a run of commbench's own. Only when every
    process drives one GPU (`-g 1`, one thread): a process's time is then one rank's own; with
    several, it is the maximum over them, which is no rank's own time, and None is returned."""
    if processes.ranks_per_process != 1 or not processes.times_us:
        return None
    maxima = [max(column) for column in zip(*processes.times_us, strict=True)]
    median, p95, wait = [], [], []
    for own in processes.times_us:
        ordered = sorted(own)
        median.append(quantile(ordered, 0.5))
        p95.append(quantile(ordered, 0.95))
        wait.append(quantile(sorted(m - t for m, t in zip(maxima, own, strict=True)), 0.5))
    return RankTimes(ranks=list(processes.ranks), median_us=median, p95_us=p95, wait_us=wait)


@dataclass(kw_only=True, slots=True, frozen=True)
class Measured:
    """What one result line measured: the columns before its timings."""

    op: str
    dtype: str
    reduce_op: str
    """'' for an op that does not reduce, or a line that says `none`."""
    size: int
    count: int


@dataclass(kw_only=True, slots=True, frozen=True)
class Figures:
    """One placement's figures on a result line (out-of-place or in-place)."""

    time_us: float
    algbw: float
    busbw: float
    check: str
    note: str


def nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> `2.28.3` (2.9 and later: x10000; before: x1000)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def op_from_text(text: str) -> str | None:
    match = _op_re().search(text.replace("-", "_"))
    return op_names()[match.group(1).lower()] if match else None


def reduce_op_of(op: str, redop: str) -> str:
    """The row's reduce op: none for an op that does not reduce, whatever the line prints."""
    spec = OPS.get(op)
    return "" if (spec is not None and not spec.reduces) or redop in ("none", "-") else redop


def infer_world_size(op: str, algbw: float, busbw: float) -> int | None:
    """n from busbw / algbw, which nccl-tests derives from n (the largest size is precise)."""
    if algbw <= 0 or busbw <= 0:
        return None
    r = busbw / algbw
    if op == "all_reduce" and r < 2:
        return round(2 / (2 - r))
    if op in ("all_gather", "reduce_scatter", "all_to_all") and r < 1:
        return round(1 / (1 - r))
    return None


def given_op(given: str | None, logged: str | None, source: str) -> str | None:
    """The op of a section: what the log says, else what --op says; the two must agree."""
    if given and logged and given != logged:
        raise UserError(f"{source}: the log measured {logged}, not {given} (--op)")
    return logged or given


def result_row(
    line: Measured,
    figures: Figures,
    *,
    world_size: int,
    in_place: bool,
    iters: int,
    warmup: int,
    samples: list[float] | None = None,
    processes: ProcessTimes | None = None,
) -> ResultRow:
    """One placement of a result line as commbench's row; with per-iteration `samples` (and
    per-process times, `processes`) its figures are computed from them as commbench's own."""
    # nccl-tests prints some ops' count per rank (all_gather: S / n elements); commbench's
    # count is always S's elements, so rows join and read alike whatever their source
    dtype, size = line.dtype, line.size
    count = size // ELEMENT_BYTES[dtype] if dtype in ELEMENT_BYTES else line.count
    # what the row is and how it ran, whether its figures come from samples or the line
    point: dict[str, Any] = {
        "op": line.op,
        "dtype": dtype,
        "reduce_op": line.reduce_op,
        "world_size": world_size,
        "size_bytes": size,
        "requested_bytes": size,
        "count": count,
        "check": figures.check,
        "note": figures.note,
        "in_place": in_place,
        "warmup": warmup,
    }
    if samples:
        factor = figures.busbw / figures.algbw if figures.algbw else None
        return ResultRow.measured(
            samples_us=samples,
            busbw_factor=factor,
            processes=processes,
            ranks=rank_times(processes) if processes is not None else None,
            **point,
        )
    return ResultRow(
        algbw_gbps=figures.algbw,
        busbw_gbps=figures.busbw,
        # nccl-tests prints one time per line, the mean over its iterations: the only figure
        stats=Stats(median=figures.time_us, mean=figures.time_us, n=iters),
        **point,
    )
