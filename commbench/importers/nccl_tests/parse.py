"""Read nccl-tests output (`*_perf` text, or its `-J` JSON file) into commbench result rows.

The text form is what `all_reduce_perf` and friends print. Two generations are understood:

- current: `#  Rank  0 Group  0 Pid ... device  0 [0000:07:00] NVIDIA H100 ...`, columns
  `size count type redop root time algbw busbw #wrong` (out-of-place, then in-place),
  optionally per-iteration columns (`i_min i_max i_p99 i_cv%`) and a version header;
- older: `#   Rank  0 Pid ... device  0 [0x07] Tesla V100 ...`, an `error` column (the
  largest deviation) instead of `#wrong`, and no `redop`/`root` columns for some ops.

Lines that are not nccl-tests' own (NCCL INFO/WARN debug lines, mpirun chatter, shell
prompts) are skipped; a line that starts like a result row but does not parse is an error
naming its line number, never silently dropped. Both the out-of-place and in-place columns
become rows (`in_place` false/true); `#wrong` becomes the `check` column.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.collectives.specs import DTYPES as ELEMENT_BYTES
from commbench.errors import UserError
from commbench.fields import (
    Fields,
    Value,
    anything,
    integer,
    integer_in,
    list_of,
    number_in,
    one_of,
    string,
)
from commbench.files import parse_json as parse_json_text
from commbench.files import read_text, shown
from commbench.results.lifecycle import now, start_run
from commbench.results.record import RunContext, RunKind, RunStatus
from commbench.results.schema import (
    CHECK_FAILED,
    CHECK_OK,
    CHECK_SKIPPED,
    MAX_COUNT,
    MAX_GBPS,
    MAX_SIZE_BYTES,
    MAX_TIME_US,
    MAX_WORLD_SIZE,
    ROW_DTYPES,
    ROW_REDUCE_OPS,
    ResultRow,
)
from commbench.stats import Stats

# Bounds on a log, past what any nccl-tests run prints: a table of 8 B-16 GB is 32 sizes, so
# even a log of every op, dtype and a hundred repetitions stays far below. Past them a file is
# not a log (or is a hostile one) and would cost minutes and gigabytes to store.
MAX_ROWS = 100_000
"""Result rows (each table line gives two: out-of-place and in-place)."""
MAX_RANK_LINES = 1 << 17
"""`Rank N ... device` lines: the largest published runs have tens of thousands of GPUs."""

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
_ROW_DTYPE = one_of(ROW_DTYPES)
_ROW_REDUCE_OP = one_of(ROW_REDUCE_OPS)
"""What a stored row may name (`results.schema`): an import stores nothing a reader refuses."""

# Program / file-name spellings -> commbench op names; longest first so that
# `reduce_scatter` is not read as `reduce`.
OP_NAMES = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "broadcast": "broadcast",
    "sendrecv": "sendrecv",
    "hypercube": "hypercube",
    "scatter": "scatter",
    "gather": "gather",
    "reduce": "reduce",
}
_OP_RE = re.compile(
    "(" + "|".join(sorted(OP_NAMES, key=len, reverse=True)) + r")(?:_perf)?", re.IGNORECASE
)
NON_REDUCING = {"all_gather", "all_to_all", "broadcast", "gather", "scatter", "sendrecv"}
# Old `error` column: a deviation above this (relative) marks a wrong result.
OLD_ERROR_LIMIT = {"float16": 5e-2, "bfloat16": 5e-2}
OLD_ERROR_LIMIT_DEFAULT = 1e-3

# [0-9], not \d, throughout: \d takes any script's digits, which int() then reads as numbers
_PREFIX_RE = re.compile(r"^(?:\[[0-9]+(?:,[0-9]+)*\](?:<std(?:out|err)>)?:?\s?)")
_DEBUG_RE = re.compile(r"^\S+:[0-9]+:[0-9]+ \[[0-9]+\] ")
_HEADER_RE = re.compile(
    r"nThread\s+(?P<nthread>[0-9]+)\s+nGpus\s+(?P<ngpus>[0-9]+)\s+minBytes\s+(?P<min>[0-9]+)\s+"
    r"maxBytes\s+(?P<max>[0-9]+)\s+step:\s*(?P<step>[0-9]+)\((?P<steptype>\w+)\)\s+"
    r"warmup iters:\s*(?P<warmup>[0-9]+)\s+iters:\s*(?P<iters>[0-9]+)"
)
_KV_RE = re.compile(r"(agg iters|validation|graph|unalign):\s*([0-9]+)")
_RANK_RE = re.compile(
    r"^#?\s*Rank\s+(?P<rank>[0-9]+)\s+(?:Group\s+(?P<group>[0-9]+)\s+)?Pid\s+(?P<pid>[0-9]+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>[0-9]+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.+?)\s*$"
)
_TESTS_VERSION_RE = re.compile(
    r"nccl-tests version\s+(?P<version>\S+)(?:\s+\((?P<commit>\w+)\))?"
    r"(?:.*?nccl-library=(?P<library>[0-9]+))?"
)
_NCCL_VERSION_RE = re.compile(r"NCCL version\s+(?P<nccl>[0-9.]+)(?:[+-]cuda(?P<cuda>[0-9.]+))?")
_STARTING_RE = re.compile(r"Collective test starting:\s*(\S+)")
_ROW_START_RE = re.compile(r"^\s*[0-9]+\s+[0-9]+\s")
_SIGNED_ROW_RE = re.compile(r"^\s*[-+][0-9]+\s+[-+]?[0-9]+\s")
"""A result row with a signed size or count: never one nccl-tests prints, skipped and counted."""
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.]+)")
_INT_RE = re.compile(r"^[0-9]{1,19}$")  # fits int64, as nccl-tests' own counters
_FLOAT_RE = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?$")
_NON_FINITE = {"inf", "+inf", "-inf", "nan", "-nan", "+nan"}


@dataclass(kw_only=True, slots=True)
class Section:
    """One test of a log: its header, devices and table."""

    op: str | None = None
    header: dict[str, Any] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    columns: list[str] | None = None
    rows: list[ResultRow] = field(default_factory=list)
    dropped_empty: int = 0
    avg_busbw: float | None = None


@dataclass(kw_only=True, slots=True)
class Parsed:
    """Everything a log held; `context()` and `settings()` turn it into run.json parts."""

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


def nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> `2.28.3` (2.9 and later: x10000; before: x1000)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def op_from_text(text: str) -> str | None:
    match = _OP_RE.search(text.replace("-", "_"))
    return OP_NAMES[match.group(1).lower()] if match else None


def _int(token: str) -> int:
    """A non-negative integer as nccl-tests prints one: ASCII digits, at most 19 of them."""
    if not _INT_RE.match(token):
        raise ValueError(f"{token[:40]!r} is not an integer")
    return int(token)


def _float(token: str, limit: float = math.inf) -> float:
    """A number as nccl-tests prints one (ASCII, non-negative, at most `limit`); `N/A` and
    the `inf`/`nan` a zero time gives read as NaN, which files store as null."""
    if token.upper() == "N/A" or token.lower() in _NON_FINITE:
        return math.nan
    if not _FLOAT_RE.match(token):
        raise ValueError(f"{token[:40]!r} is not a number")
    value = float(token)
    if not 0 <= value <= limit:
        raise ValueError(f"{token} is outside 0..{limit:g}")
    return value


def _check(token: str, old_style: bool, dtype: str) -> tuple[str, str]:
    """(check, note) from a `#wrong` count or an old `error` deviation."""
    if token.upper() == "N/A":
        return CHECK_SKIPPED, ""
    value = _float(token)
    if math.isnan(value):
        return CHECK_SKIPPED, ""
    if old_style:
        limit = OLD_ERROR_LIMIT.get(dtype, OLD_ERROR_LIMIT_DEFAULT)
        if value > limit:
            return CHECK_FAILED, f"nccl-tests error {token} > {limit:g}"
        return CHECK_OK, ""
    if value > 0:
        return CHECK_FAILED, f"nccl-tests #wrong {token}"
    return CHECK_OK, ""


def _row(
    *,
    op: str,
    dtype: str,
    reduce_op: str,
    world_size: int,
    size: int,
    count: int,
    time_us: float,
    algbw: float,
    busbw: float,
    check: str,
    note: str,
    in_place: bool,
    iters: int,
    warmup: int,
    samples: list[float] | None = None,
) -> ResultRow:
    # nccl-tests prints some ops' count per rank (all_gather: S / n elements); commbench's
    # count is always S's elements, so rows join and read alike whatever their source
    count = size // ELEMENT_BYTES[dtype] if dtype in ELEMENT_BYTES else count
    if samples:
        factor = busbw / algbw if algbw else None
        return ResultRow.measured(
            samples_us=samples,
            size_bytes=size,
            busbw_factor=factor,
            op=op,
            dtype=dtype,
            reduce_op=reduce_op,
            world_size=world_size,
            count=count,
            check=check,
            note=note,
            in_place=in_place,
            warmup=warmup,
            requested_bytes=size,
        )
    return ResultRow(
        op=op,
        dtype=dtype,
        reduce_op=reduce_op,
        world_size=world_size,
        size_bytes=size,
        count=count,
        algbw_gbps=algbw,
        busbw_gbps=busbw,
        check=check,
        # nccl-tests prints one time per line, the mean over its iterations: the only figure
        stats=Stats(median=time_us, mean=time_us, n=iters),
        warmup=warmup,
        in_place=in_place,
        requested_bytes=size,
        note=note,
    )


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


def _given_op(given: str | None, logged: str | None, source: str) -> str | None:
    """The op of a section: what the log says, else what --op says; the two must agree."""
    if given and logged and given != logged:
        raise UserError(f"{source}: the log measured {logged}, not {given} (--op)")
    return logged or given


class _TextParser:
    def __init__(self, text: str, source: str, op: str | None, world_size: int | None) -> None:
        self.text = text
        self.raw = ""  # the line being parsed, for error messages
        self.rows = 0
        self.source = source
        self.forced_op = op
        self.forced_world = world_size
        self.sections: list[Section] = []
        self.current: Section | None = None
        self.nccl: str | None = None
        self.cuda: str | None = None
        self.tests_version: str | None = None
        self.pending_op: str | None = None  # op named before its section's header line
        self.skipped: list[tuple[str, str]] = []

    def fail(self, lineno: int, problem: str) -> UserError:
        line = self.raw.strip()
        shown = line if len(line) <= 120 else line[:117] + "..."
        return UserError(f"{self.source}:{lineno}: {problem}: {shown!r}")

    def integer(self, lineno: int, token: str) -> int:
        try:
            return _int(token)
        except ValueError as exc:
            raise self.fail(lineno, str(exc)) from None

    def section(self) -> Section:
        if self.current is None or (self.current.columns is not None and self.current.rows):
            self.current = Section(op=self.pending_op)
            self.pending_op = None
            self.sections.append(self.current)
        return self.current

    def parse(self) -> Parsed:
        # line by line from a stream: no second copy of a large log as a list of lines
        for lineno, raw in enumerate(io.StringIO(self.text, newline=None), start=1):
            self.raw = raw
            line = _PREFIX_RE.sub("", raw.rstrip())
            self.line(lineno, line)
        sections = [s for s in self.sections if s.rows]
        if not sections:
            raise UserError(f"{self.source}: no nccl-tests result rows found")
        return Parsed(
            source=self.source,
            sections=sections,
            nccl=self.nccl,
            cuda=self.cuda,
            tests_version=self.tests_version,
            skipped=self.skipped,
        )

    def line(self, lineno: int, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            return
        if m := _NCCL_VERSION_RE.search(stripped):
            self.nccl = self.nccl or m.group("nccl")
            self.cuda = self.cuda or m.group("cuda")
        if _DEBUG_RE.match(stripped):
            return  # NCCL_DEBUG output, interleaved by the library
        if m := _TESTS_VERSION_RE.search(stripped):
            self.tests_version = m.group("version")
            if m.group("library"):
                self.nccl = nccl_version_from_code(self.integer(lineno, m.group("library")))
            return
        if m := _STARTING_RE.search(stripped):
            self.pending_op = op_from_text(m.group(1))
            return
        if m := _HEADER_RE.search(stripped):
            self.current = Section(op=self.pending_op)
            self.pending_op = None
            self.sections.append(self.current)
            header: dict[str, Any] = {
                "nthread": self.integer(lineno, m["nthread"]),
                "ngpus": self.integer(lineno, m["ngpus"]),
                "min_bytes": self.integer(lineno, m["min"]),
                "max_bytes": self.integer(lineno, m["max"]),
                f"step_{m['steptype']}": self.integer(lineno, m["step"]),
                "warmup_iters": self.integer(lineno, m["warmup"]),
                "iters": self.integer(lineno, m["iters"]),
            }
            for key, value in _KV_RE.findall(stripped):
                header[key.replace(" ", "_")] = self.integer(lineno, value)
            self.current.header = header
            return
        if m := _RANK_RE.match(stripped):
            ranks = self.section().ranks
            if len(ranks) >= MAX_RANK_LINES:
                raise self.fail(lineno, f"more than {MAX_RANK_LINES} rank lines in one test")
            ranks.append(
                {
                    "rank": self.integer(lineno, m["rank"]),
                    "group": self.integer(lineno, m["group"]) if m["group"] is not None else None,
                    "pid": self.integer(lineno, m["pid"]),
                    "host": m["host"],
                    "local_rank": self.integer(lineno, m["device"]),
                    "pci_bus_id": m["bus"],
                    "device_name": m["name"],
                }
            )
            return
        body = stripped[1:] if stripped.startswith("#") else stripped
        tokens = body.split()
        if tokens[:2] == ["size", "count"]:
            self.columns(lineno, tokens)
            return
        if stripped.startswith("#"):
            m = _AVG_RE.search(stripped)
            if m and self.current is not None:
                try:
                    self.current.avg_busbw = _float(m.group(1), MAX_GBPS)
                except ValueError as exc:
                    raise self.fail(lineno, f"malformed average ({exc})") from None
            return  # comments, units, the out-of-place/in-place banner, summaries
        if _ROW_START_RE.match(stripped):
            self.data(lineno, stripped.split())
            return
        if _SIGNED_ROW_RE.match(stripped):
            sign = "negative" if stripped.lstrip().startswith("-") else "signed"
            self.skipped.append((f"line {lineno}", f"a {sign} size or count"))
            return
        # Shell prompts and command lines (`./build/all_gather_perf -b 8 ...`) name the op
        # of the test that follows.
        if "_perf" in stripped and (op := op_from_text(stripped)):
            self.pending_op = op
            if self.current is not None and self.current.columns is None:
                self.current.op = self.current.op or op

    def columns(self, lineno: int, tokens: list[str]) -> None:
        section = self.section()
        if section.columns is not None and section.rows:
            # A second table with no header of its own: same devices, maybe another op.
            section = Section(
                op=self.pending_op or section.op, header=section.header, ranks=section.ranks
            )
            self.pending_op = None
            self.sections.append(section)
            self.current = section
        first_time = next((i for i, t in enumerate(tokens) if t in ("time", "cputime")), None)
        if first_time is None or tokens.count(tokens[first_time]) != 2:
            raise self.fail(lineno, "unrecognised column header (expected two 'time' groups)")
        section.columns = tokens

    def data(self, lineno: int, tokens: list[str]) -> None:
        section = self.current
        if section is None or section.columns is None:
            raise self.fail(lineno, "a result row before any column header")
        cols = section.columns
        has_stamp = cols[-1] == "timestamp"
        want = len(cols) + (1 if has_stamp else 0)  # a timestamp prints as date and time
        if len(tokens) != want and not (has_stamp and len(tokens) == len(cols) - 1):
            raise self.fail(lineno, f"expected {want} columns, found {len(tokens)}")
        lead = next(i for i, t in enumerate(cols) if t in ("time", "cputime"))
        named = dict(zip(cols[:lead], tokens[:lead]))
        try:
            size, count = _int(named["size"]), _int(named["count"])
        except (KeyError, ValueError):
            raise self.fail(lineno, "size and count must be integers") from None
        if size > MAX_SIZE_BYTES:
            raise self.fail(lineno, f"a size over {MAX_SIZE_BYTES} bytes")
        if size == 0:
            section.dropped_empty += 1
            self.skipped.append((f"line {lineno}", "zero bytes"))
            return  # nccl-tests prints zero-byte rows when a size rounds to no element
        op = _given_op(self.forced_op, section.op, self.source) or op_from_text(
            Path(self.source).name
        )
        if op is None:
            raise UserError(
                f"{self.source}: cannot tell which collective this log measured "
                "(no '*_perf' program name in it or in the file name): pass --op"
            )
        section.op = op
        dtype = DTYPES.get(named.get("type", "float"), named.get("type", "float"))
        redop = named.get("redop", "")
        reduce_op = "" if op in NON_REDUCING or redop in ("none", "-") else redop
        try:  # as every reader of the run will check them
            _ROW_DTYPE(dtype, "type")
            _ROW_REDUCE_OP(reduce_op, "redop")
        except UserError as exc:
            raise self.fail(lineno, str(exc)) from None
        group = (len(cols) - lead - (1 if has_stamp else 0)) // 2
        header = section.header
        for in_place, start in ((False, lead), (True, lead + group)):
            values = dict(zip(cols[start : start + group], tokens[start : start + group]))
            wrong_key = "#wrong" if "#wrong" in values else "error"
            try:
                time_us = _float(values.get("time", values.get("cputime", "nan")), MAX_TIME_US)
                algbw = _float(values["algbw"], MAX_GBPS)
                busbw = _float(values["busbw"], MAX_GBPS)
                check, note = _check(values.get(wrong_key, "N/A"), wrong_key == "error", dtype)
            except (KeyError, ValueError) as exc:
                raise self.fail(lineno, f"malformed value ({exc})") from None
            non_finite = [
                name
                for name in ("time", "algbw", "busbw")
                if values.get(name, "").lower() in _NON_FINITE
            ]
            if non_finite:
                printed = ", ".join(f"{n} {values[n]}" for n in non_finite)
                note = "; ".join(t for t in (note, f"nccl-tests printed {printed}") if t)
            world = self.world_size(section, op, algbw, busbw, lineno)
            self.rows += 1
            if self.rows > MAX_ROWS:
                raise self.fail(lineno, f"more than {MAX_ROWS} result rows: not one nccl-tests run")
            section.rows.append(
                _row(
                    op=op,
                    dtype=dtype,
                    reduce_op=reduce_op,
                    world_size=world,
                    size=size,
                    count=count,
                    time_us=time_us,
                    algbw=algbw,
                    busbw=busbw,
                    check=check,
                    note=note,
                    in_place=in_place,
                    iters=int(header.get("iters", 0)),
                    warmup=int(header.get("warmup_iters", 0)),
                )
            )

    def world_size(self, section: Section, op: str, algbw: float, busbw: float, lineno: int) -> int:
        if self.forced_world:
            return self.forced_world
        if section.ranks:
            return len(section.ranks)
        header = section.header
        if (
            header.get("nthread")
            and header.get("ngpus")
            and header["nthread"] * header["ngpus"] > 1
        ):
            world = int(header["nthread"] * header["ngpus"])
            if world > MAX_WORLD_SIZE:
                raise self.fail(lineno, f"nThread x nGpus is more than {MAX_WORLD_SIZE} ranks")
            return world
        inferred = infer_world_size(op, algbw, busbw)
        if inferred and inferred <= MAX_WORLD_SIZE:
            return inferred
        raise self.fail(lineno, "cannot tell the world size (no device lines): pass --world-size")


def parse_text(
    text: str, source: str = "<log>", op: str | None = None, world_size: int | None = None
) -> Parsed:
    """Parse nccl-tests text output. Raises UserError naming the line that does not parse."""
    return _TextParser(text, source, op, world_size).parse()


# -- JSON (nccl-tests -J FILE) ----------------------------------------------------------------

JSON_VERSIONS = (1, 2)


_json_count = integer_in(0, MAX_COUNT)
_json_world = integer_in(1, MAX_WORLD_SIZE)


def _json_number(value: Any, path: str) -> float:
    """time / alg_bw / bus_bw: a number, or null or "nan" (read as NaN, stored as null)."""
    if value is None or (isinstance(value, str) and value.lower() in _NON_FINITE):
        return math.nan
    limit = MAX_TIME_US if path.endswith("time") else MAX_GBPS
    return number_in(0, limit)(value, path)


def _json_wrong(value: Any, path: str) -> str:
    """nwrong: a count (nccl-tests writes it as a double: 0.0), or null / "N/A" when the
    results were not checked."""
    if value is None or value == "N/A":
        return "N/A"
    return f"{number_in(0, MAX_COUNT)(value, path):g}"


def _json_device(item: Value) -> dict[str, Any]:
    d = item.obj()
    return {
        "rank": d.opt("rank", _json_count),
        "group": d.opt("group", _json_count),
        "pid": d.opt("pid", integer),
        "host": d.opt("hostname", string),
        "local_rank": d.opt("device", _json_count),
        "pci_bus_id": d.opt("device_hex", string),
        "device_name": d.opt("device_info", string),
    }


def parse_json(data: Any, source: str = "<json>", op: str | None = None) -> Parsed:
    """Parse the JSON file nccl-tests writes with `-J` (src/util.cu, file version 2).

    Every field read is checked (type and bounds) where it is read, naming the field path:
    `results[3].out_of_place.time: expected a number, got the string '12'`."""
    if not isinstance(data, dict) or "results" not in data:
        raise UserError(f"{source}: not an nccl-tests JSON file (no 'results')")
    f = Fields(data, f"{source}:")
    version = data.get("version")
    if isinstance(version, bool) or version not in JSON_VERSIONS:
        raise UserError(
            f"{source}: nccl-tests JSON version {repr(version)[:40]} is not understood "
            f"(known: {', '.join(map(str, JSON_VERSIONS))})"
        )
    config = f.sub("config") or Fields({}, f"{source}: config")
    args = f.opt("args", list_of(anything)) or []
    logged = next((o for a in args if isinstance(a, str) and (o := op_from_text(a))), None)
    op = _given_op(op, logged, source) or op_from_text(Path(source).name)
    if op is None:
        raise UserError(f"{source}: cannot tell which collective this file measured: pass --op")
    devices = config.items("devices", required=False, max_items=MAX_RANK_LINES)
    ranks = [_json_device(item) for item in devices]
    nthreads = config.opt("nthreads", _json_world) or 1
    ngpus = config.opt("ngpus", _json_world) or 1
    world = len(ranks) or nthreads * ngpus
    if world > MAX_WORLD_SIZE:
        raise UserError(f"{source}: config: nthreads x ngpus is more than {MAX_WORLD_SIZE} ranks")
    header = {
        "nthread": config.opt("nthreads", _json_world),
        "ngpus": config.opt("ngpus", _json_world),
        "min_bytes": config.opt("minimum_bytes", integer_in(0, MAX_SIZE_BYTES)),
        "max_bytes": config.opt("maximum_bytes", integer_in(0, MAX_SIZE_BYTES)),
        "warmup_iters": config.opt("warmup_iters", _json_count),
        "iters": config.opt("iterations", _json_count),
        "agg_iters": config.opt("aggregated_iterations", _json_count),
        "validation": config.opt("validation", _json_count),
        "graph": config.opt("graph", _json_count),
    }
    section = Section(op=op, header=header, ranks=ranks)
    results = f.items("results", max_items=MAX_ROWS // 2)
    skipped: list[tuple[str, str]] = []
    for index, item in enumerate(results):
        r = item.obj()
        size = r.req("size", integer_in(0, MAX_SIZE_BYTES))
        count = r.req("count", _json_count)
        if size == 0:
            section.dropped_empty += 1
            skipped.append((f"results[{index}]", "zero bytes"))
            continue
        type_name = r.opt("type", string) or "float"
        dtype = _ROW_DTYPE(DTYPES.get(type_name, type_name), r.at("type"))
        redop = r.opt("redop", string) or ""
        reduce_op = "" if op in NON_REDUCING or redop in ("none", "-") else redop
        _ROW_REDUCE_OP(reduce_op, r.at("redop"))
        iters = r.opt("actual_iterations", _json_count) or header["iters"] or 0
        for in_place, key in ((False, "out_of_place"), (True, "in_place")):
            body = r.sub(key)
            if body is None:
                continue
            time_key = "time" if body.data.get("time") is not None else "cpu_time"
            time_us = _json_number(body.data.get(time_key), body.at(time_key))
            for name in ("alg_bw", "bus_bw"):
                if name not in body.data:  # null is there: a NaN or Infinity nccl-tests wrote
                    raise UserError(f"{body.at(name)}: missing")
            algbw = _json_number(body.data["alg_bw"], body.at("alg_bw"))
            busbw = _json_number(body.data["bus_bw"], body.at("bus_bw"))
            check, note = _check(
                _json_wrong(body.data.get("nwrong"), body.at("nwrong")), False, dtype
            )
            per_iter = r.sub(f"{key}_per_iter")
            samples = (
                per_iter.opt("times_us", list_of(number_in(0, MAX_TIME_US)))
                if per_iter is not None
                else None
            )
            section.rows.append(
                _row(
                    op=op,
                    dtype=dtype,
                    reduce_op=reduce_op,
                    world_size=world,
                    size=size,
                    count=count,
                    time_us=time_us,
                    algbw=algbw,
                    busbw=busbw,
                    check=check,
                    note=note,
                    in_place=in_place,
                    iters=int(iters),
                    warmup=int(header["warmup_iters"] or 0),
                    samples=samples or None,
                )
            )
    if not section.rows:
        raise UserError(f"{source}: no results in the JSON file")
    code = f.opt("nccl_version", integer_in(0, 10**9))
    return Parsed(
        source=source,
        sections=[section],
        nccl=nccl_version_from_code(code) if code else None,
        fmt="json",
        skipped=skipped,
    )


# -- run directory ------------------------------------------------------------------------------


def parse_file(path: Path, op: str | None = None, world_size: int | None = None) -> Parsed:
    text = read_text(Path(path), "nccl-tests log", lenient=True)
    if text.lstrip().startswith("{"):
        return parse_json(parse_json_text(text, shown(path)), shown(path), op)
    return parse_text(text, shown(path), op, world_size)


def context_of(parsed: Parsed) -> dict[str, Any]:
    first = parsed.sections[0]
    ranks = first.ranks
    hosts = sorted({r["host"] for r in ranks if r.get("host")})
    names = sorted({r["device_name"] for r in ranks if r.get("device_name")})
    world = first.rows[0].world_size
    return {
        "host": hosts[0] if hosts else None,
        "hosts": hosts,
        "backend": "nccl",
        "device": "cuda",
        "world_size": world,
        "nnodes": len(hosts) or None,
        "device_names": names,
        "ranks": ranks,
        "nccl": parsed.nccl,
        "cuda": parsed.cuda,
        "torch": None,
        "env": {},
        "topology": None,
        "nccl_tests_version": parsed.tests_version,
    }


def import_log(
    path: Path,
    out_parent: Path,
    op: str | None = None,
    world_size: int | None = None,
    on_skipped: Callable[[str], None] | None = None,
) -> Path:
    """Parse an nccl-tests log (or JSON file) and store it as a commbench run directory; the
    rows it left out are said in the record's notes, and to `on_skipped`."""
    parsed = parse_file(path, op, world_size)
    rows = parsed.rows
    first = parsed.sections[0]
    skipped = parsed.skipped_text()
    if skipped and on_skipped is not None:
        on_skipped(skipped)
    life = start_run(
        out_parent,
        RunKind.NCCL_TESTS,
        settings={
            "ops": list(dict.fromkeys(s.op for s in parsed.sections)),
            "nccl_tests": first.header,
            "dtype": rows[0].dtype,
        },
        context=RunContext.from_dict(context_of(parsed), "context"),
        source=str(Path(path).resolve()),
        format=parsed.fmt,
        imported_at=now(),
        sections=[
            {
                "op": s.op,
                "header": s.header,
                "rows": len(s.rows),
                "dropped_zero_size_rows": s.dropped_empty,
                "avg_busbw_gbps": s.avg_busbw,
            }
            for s in parsed.sections
        ],
        points_total=len(rows),
        points_done=len(rows),
        notes=[
            "time_us is nccl-tests' time: the mean over its timed iterations (averaged across "
            "ranks by default), not commbench's median of per-iteration maxima",
            *([skipped] if skipped else []),
        ],
    )
    with life.guarded():
        life.dir.write_rows(rows)
    life.finish(RunStatus.COMPLETE)
    return life.path
