"""nccl-tests' text log and its `-J` JSON file, read into the records of `model`.

Every figure is checked where it is read, against the bounds every reader of a stored run
checks, and a line or field that does not parse is an error that names it (`x.log:12: ...`,
`results[3].out_of_place.time: ...`): an import stores nothing that a later read refuses.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from commbench.importers.nccl_tests.model import (
    DTYPES,
    Device,
    Figures,
    Header,
    Measured,
    Parsed,
    PerIter,
    Section,
    given_op,
    infer_world_size,
    nccl_version_from_code,
    op_from_text,
    reduce_op_of,
    result_row,
)
from commbench.numbers import MAX_ITERATIONS
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
)

# Bounds on a log, past what any nccl-tests run prints: a table of 8 B-16 GB is 32 sizes, so
# even a log of every op, dtype and a hundred repetitions stays far below. Past them a file is
# not a log (or is a hostile one) and would cost minutes and gigabytes to store.
MAX_ROWS = 100_000
"""Result rows (each table line gives two: out-of-place and in-place)."""
MAX_RANK_LINES = 1 << 17
"""`Rank N ... device` lines: the largest published runs have tens of thousands of GPUs."""

_ROW_DTYPE = one_of(ROW_DTYPES)
_ROW_REDUCE_OP = one_of(ROW_REDUCE_OPS)
"""What a stored row may name (`results.schema`): an import stores nothing a reader refuses."""

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
            self.current.header = Header(
                nthread=self.integer(lineno, m["nthread"]),
                ngpus=self.integer(lineno, m["ngpus"]),
                min_bytes=self.integer(lineno, m["min"]),
                max_bytes=self.integer(lineno, m["max"]),
                step=(m["steptype"], self.integer(lineno, m["step"])),
                warmup_iters=self.integer(lineno, m["warmup"]),
                iters=self.integer(lineno, m["iters"]),
                more={
                    key.replace(" ", "_"): self.integer(lineno, value)
                    for key, value in _KV_RE.findall(stripped)
                },
            )
            return
        if m := _RANK_RE.match(stripped):
            ranks = self.section().ranks
            if len(ranks) >= MAX_RANK_LINES:
                raise self.fail(lineno, f"more than {MAX_RANK_LINES} rank lines in one test")
            ranks.append(
                Device(
                    rank=self.integer(lineno, m["rank"]),
                    group=self.integer(lineno, m["group"]) if m["group"] is not None else None,
                    pid=self.integer(lineno, m["pid"]),
                    host=m["host"],
                    local_rank=self.integer(lineno, m["device"]),
                    pci_bus_id=m["bus"],
                    device_name=m["name"],
                )
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
        line = self.measured(lineno, section, dict(zip(cols[:lead], tokens[:lead])))
        if line is None:
            return
        group = (len(cols) - lead - (1 if has_stamp else 0)) // 2
        for in_place, start in ((False, lead), (True, lead + group)):
            values = dict(zip(cols[start : start + group], tokens[start : start + group]))
            figures = self.figures(lineno, values, line.dtype)
            world = self.world_size(section, line.op, figures.algbw, figures.busbw, lineno)
            self.rows += 1
            if self.rows > MAX_ROWS:  # the limit and what to do, not the line: it is fine
                raise UserError(
                    f"{self.source}:{lineno}: more than {MAX_ROWS} result rows ({MAX_ROWS // 2} "
                    "table lines, each an out-of-place and an in-place row), the most one "
                    "import reads: split the log (one file per run of a loop) and import the parts"
                )
            section.rows.append(
                result_row(
                    line,
                    figures,
                    world_size=world,
                    in_place=in_place,
                    iters=section.iters,
                    warmup=section.warmup,
                )
            )

    def measured(self, lineno: int, section: Section, named: dict[str, str]) -> Measured | None:
        """The columns before the timings, checked as every reader of the run will check
        them; None for a zero-byte line (skipped, and counted)."""
        try:
            size, count = _int(named["size"]), _int(named["count"])
        except (KeyError, ValueError):
            raise self.fail(lineno, "size and count must be integers") from None
        if size > MAX_SIZE_BYTES:
            raise self.fail(lineno, f"a size over {MAX_SIZE_BYTES} bytes")
        if size == 0:
            section.dropped_empty += 1
            self.skipped.append((f"line {lineno}", "zero bytes"))
            return None  # nccl-tests prints zero-byte rows when a size rounds to no element
        op = given_op(self.forced_op, section.op, self.source) or op_from_text(
            Path(self.source).name
        )
        if op is None:
            raise UserError(
                f"{self.source}: cannot tell which collective this log measured "
                "(no '*_perf' program name in it or in the file name): pass --op"
            )
        section.op = op
        type_name = _column(named, "type", default="float")
        dtype = DTYPES.get(type_name, type_name)
        reduce_op = reduce_op_of(op, _column(named, "redop", default=""))
        try:  # as every reader of the run will check them
            _ROW_DTYPE(dtype, "type")
            _ROW_REDUCE_OP(reduce_op, "redop")
        except UserError as exc:
            raise self.fail(lineno, str(exc)) from None
        return Measured(op=op, dtype=dtype, reduce_op=reduce_op, size=size, count=count)

    def figures(self, lineno: int, values: dict[str, str], dtype: str) -> Figures:
        """One placement's columns: time, algbw, busbw, and `#wrong` (or the old `error`)."""
        wrong_key = "#wrong" if "#wrong" in values else "error"
        try:
            time_us = _float(_column(values, "time", "cputime", default="nan"), MAX_TIME_US)
            algbw = _float(values["algbw"], MAX_GBPS)
            busbw = _float(values["busbw"], MAX_GBPS)
            check, note = _check(
                _column(values, wrong_key, default="N/A"), wrong_key == "error", dtype
            )
        except (KeyError, ValueError) as exc:
            raise self.fail(lineno, f"malformed value ({exc})") from None
        non_finite = [
            name
            for name in ("time", "algbw", "busbw")
            if _column(values, name, default="").lower() in _NON_FINITE
        ]
        if non_finite:
            printed = ", ".join(f"{n} {values[n]}" for n in non_finite)
            note = "; ".join(t for t in (note, f"nccl-tests printed {printed}") if t)
        return Figures(time_us=time_us, algbw=algbw, busbw=busbw, check=check, note=note)

    def world_size(self, section: Section, op: str, algbw: float, busbw: float, lineno: int) -> int:
        if self.forced_world:
            return self.forced_world
        if section.ranks:
            return len(section.ranks)
        header = section.header
        if header and header.nthread and header.ngpus and header.nthread * header.ngpus > 1:
            world = header.nthread * header.ngpus
            if world > MAX_WORLD_SIZE:
                raise self.fail(lineno, f"nThread x nGpus is more than {MAX_WORLD_SIZE} ranks")
            return world
        inferred = infer_world_size(op, algbw, busbw)
        if inferred and inferred <= MAX_WORLD_SIZE:
            return inferred
        raise self.fail(lineno, "cannot tell the world size (no device lines): pass --world-size")


def _column(named: dict[str, str], *names: str, default: str) -> str:
    """The first of `names` that a table line has, else `default`: nccl-tests' versions drop
    and rename columns (no `redop`/`root` for some ops in older ones, `cputime` for `time`)."""
    return next((named[n] for n in names if n in named), default)


def parse_text(
    text: str, source: str = "<log>", op: str | None = None, world_size: int | None = None
) -> Parsed:
    """Parse nccl-tests text output. Raises UserError naming the line that does not parse."""
    return _TextParser(text, source, op, world_size).parse()


# -- JSON (nccl-tests -J FILE) ----------------------------------------------------------------

JSON_VERSIONS = (1, 2, 3)
"""`JSON_FILE_VERSION` of nccl-tests' src/util.cu: 1 (2.17, -J), 2 (`-I 1`: the per-iteration
objects), 3 (2.19, `-K`: `skipped_iterations`, `config.per_iter_skip`)."""


_json_count = integer_in(0, MAX_COUNT)
_json_world = integer_in(1, MAX_WORLD_SIZE)
_json_time = number_in(0, MAX_TIME_US)


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


def _json_device(item: Value) -> Device:
    d = item.obj()
    return Device(
        rank=d.opt("rank", _json_count),
        group=d.opt("group", _json_count),
        pid=d.opt("pid", integer),
        host=d.opt("hostname", string),
        local_rank=d.opt("device", _json_count),
        pci_bus_id=d.opt("device_hex", string),
        device_name=d.opt("device_info", string),
    )


@dataclass(kw_only=True, slots=True, frozen=True)
class _Processes:
    """The processes of a `-J` file's run, as its `config` says: nccl-tests lists one device
    per MPI process (the first of its `nthreads x ngpus` GPUs), so a `per_process_max_times_us`
    array has one row per listed device."""

    count: int
    """MPI processes: the devices listed (one, the file of a run without MPI, when none is)."""
    ranks_per_process: int
    """nthreads x ngpus: the ranks (GPUs) each process drives."""
    first_ranks: list[int]
    """Each process's first global rank (its device's `rank`; nccl-tests numbers them
    `proc x nthreads x ngpus`)."""

    @property
    def world(self) -> int:
        return self.count * self.ranks_per_process


def parse_json(data: Any, source: str = "<json>", op: str | None = None) -> Parsed:
    """Parse the JSON file nccl-tests writes with `-J` (src/util.cu, file versions 1-3).

    Every field read is checked (type and bounds) where it is read, naming the field path:
    `results[3].out_of_place.time: expected a number, got the string '12'`. The per-iteration
    times of `-I 1` (versions 2 and 3) become the rows' samples, and the per-process times the
    rows' `processes` (and, one GPU per process, their per-rank times)."""
    f = _json_document(data, source)
    config = f.sub("config") or Fields({}, f"{source}: config")
    op = _json_op(f, source, op)
    devices = config.items("devices", required=False, max_items=MAX_RANK_LINES)
    section = Section(op=op, ranks=[_json_device(item) for item in devices])
    processes = _json_processes(config, section.ranks, source)
    section.header = _json_header(config)
    skipped: list[tuple[str, str]] = []
    for index, item in enumerate(f.items("results", max_items=MAX_ROWS // 2)):
        _json_result(item.obj(), index, op, section, processes, skipped)
    if not section.rows:
        raise UserError(f"{source}: no results in the JSON file")
    section.avg_busbw = _json_average(f)
    code = f.opt("nccl_version", integer_in(0, 10**9))
    return Parsed(
        source=source,
        sections=[section],
        nccl=nccl_version_from_code(code) if code else None,
        fmt="json",
        skipped=skipped,
    )


def _json_document(data: Any, source: str) -> Fields:
    """The file's top level, once it is known to be an nccl-tests file of a version read here:
    refused before any field, so a JSON file of another tool is said to be one."""
    if not isinstance(data, dict) or "results" not in data or "version" not in data:
        raise UserError(f"{source}: not an nccl-tests JSON file (no 'version' and 'results')")
    f = Fields(data, f"{source}:")
    version = f.opt("version", anything)
    if isinstance(version, bool) or version not in JSON_VERSIONS:
        raise UserError(
            f"{source}: nccl-tests JSON version {repr(version)[:40]} is not understood "
            f"(known: {', '.join(map(str, JSON_VERSIONS))})"
        )
    return f


def _json_op(f: Fields, source: str, op: str | None) -> str:
    """The op the file measured: its program name (in `args`), --op, or the file's name."""
    args = f.opt("args", list_of(anything)) or []
    logged = next((o for a in args if isinstance(a, str) and (o := op_from_text(a))), None)
    found = given_op(op, logged, source) or op_from_text(Path(source).name)
    if found is None:
        raise UserError(f"{source}: cannot tell which collective this file measured: pass --op")
    return found


def _json_processes(config: Fields, devices: list[Device], source: str) -> _Processes:
    """The run's processes and ranks: one process per listed device, each driving threads x
    GPUs per thread ranks."""
    per_process = (config.opt("nthreads", _json_world) or 1) * (
        config.opt("ngpus", _json_world) or 1
    )
    count = len(devices) or 1
    if count * per_process > MAX_WORLD_SIZE:
        raise UserError(
            f"{source}: config: {count} processes x nthreads x ngpus is more than "
            f"{MAX_WORLD_SIZE} ranks"
        )
    first = [d.rank if d.rank is not None else p * per_process for p, d in enumerate(devices)]
    if len(set(first)) != len(first) or any(r >= count * per_process for r in first):
        raise UserError(
            f"{source}: config.devices: the ranks {first[:8]} are not one first rank per "
            f"process of {count} processes x {per_process} ranks"
        )
    return _Processes(count=count, ranks_per_process=per_process, first_ranks=first or [0])


def _json_header(config: Fields) -> Header:
    factor = config.opt("step_factor", integer_in(0, MAX_SIZE_BYTES))
    step_bytes = config.opt("step_bytes", integer_in(0, MAX_SIZE_BYTES))
    step = ("factor", factor) if factor is not None else None
    if step is None and step_bytes is not None:
        step = ("bytes", step_bytes)
    return Header(
        nthread=config.opt("nthreads", _json_world),
        ngpus=config.opt("ngpus", _json_world),
        min_bytes=config.opt("minimum_bytes", integer_in(0, MAX_SIZE_BYTES)),
        max_bytes=config.opt("maximum_bytes", integer_in(0, MAX_SIZE_BYTES)),
        step=step,
        warmup_iters=config.opt("warmup_iters", _json_count),
        iters=config.opt("iterations", _json_count),
        more={
            "agg_iters": config.opt("aggregated_iterations", _json_count),
            "validation": config.opt("validation", _json_count),
            "graph": config.opt("graph", _json_count),
            **(
                {"per_iter_skip": config.opt("per_iter_skip", _json_count)}
                if "per_iter_skip" in config.data
                else {}
            ),
        },
    )


def _json_average(f: Fields) -> float | None:
    """The footer's average bus bandwidth (every size, both placements), as the text log's
    `# Avg bus bandwidth` line; spelled `average_bus_bandwidith` / `bandwidith` by version 1
    files written before nccl-tests fixed the typo (February 2026)."""
    for key, inner in (
        ("average_bus_bandwidth", "bandwidth"),
        ("average_bus_bandwidith", "bandwidith"),
    ):
        average = f.sub(key)
        if average is not None:
            value = _json_number(average.opt(inner, anything), average.at(inner))
            return None if math.isnan(value) else value
    return None


def _json_result(
    r: Fields,
    index: int,
    op: str,
    section: Section,
    processes: _Processes,
    skipped: list[tuple[str, str]],
) -> None:
    """One entry of `results`: a row per placement it holds, or (zero bytes) a skip."""
    size = r.req("size", integer_in(0, MAX_SIZE_BYTES))
    count = r.req("count", _json_count)
    if size == 0:
        section.dropped_empty += 1
        skipped.append((f"results[{index}]", "zero bytes"))
        return
    type_name = r.opt("type", string) or "float"
    dtype = _ROW_DTYPE(DTYPES.get(type_name, type_name), r.at("type"))
    reduce_op = reduce_op_of(op, r.opt("redop", string) or "")
    _ROW_REDUCE_OP(reduce_op, r.at("redop"))
    line = Measured(op=op, dtype=dtype, reduce_op=reduce_op, size=size, count=count)
    iters = r.opt("actual_iterations", _json_count) or section.iters
    for in_place, key in ((False, "out_of_place"), (True, "in_place")):
        body = r.sub(key)
        if body is None:
            continue
        figures = _json_figures(body, dtype)
        per_iter_fields = r.sub(f"{key}_per_iter")
        per_iter = (
            _json_per_iter(per_iter_fields, processes) if per_iter_fields is not None else None
        )
        section.rows.append(
            result_row(
                line,
                figures,
                world_size=processes.world,
                in_place=in_place,
                iters=int(iters),
                warmup=section.warmup,
                samples=per_iter.samples if per_iter is not None else None,
                processes=(
                    per_iter.processes(processes.first_ranks, processes.ranks_per_process)
                    if per_iter is not None
                    else None
                ),
            )
        )


_json_times = list_of(_json_time, max_items=MAX_ITERATIONS)
PROCESS_TIMES_KEY = "per_process_max_times_us"
"""Where a `*_per_iter` object holds its per-process rows (nccl-tests' analyzer names it so)."""


def _json_per_iter(f: Fields, processes: _Processes) -> PerIter:
    """A `*_per_iter` object: its times, the iterations its summary skipped, and one row of
    times per process of the run, each as long as `times_us`."""
    times = f.req("times_us", _json_times)
    skip = f.opt("skipped_iterations", integer_in(0, max(0, len(times) - 1))) or 0
    rows = f.items(PROCESS_TIMES_KEY, required=False, max_items=MAX_RANK_LINES)
    if rows and len(rows) != processes.count:
        raise UserError(
            f"{f.at(PROCESS_TIMES_KEY)}: {len(rows)} processes, but the run has "
            f"{processes.count} (config.devices lists one device per process)"
        )
    per_process = []
    for row in rows:
        own = row.scalar(_json_times)
        if len(own) != len(times):
            raise UserError(f"{row.path}: {len(own)} iterations, but times_us holds {len(times)}")
        per_process.append(own)
    return PerIter(times_us=times, skipped=skip, per_process=per_process)


def _json_figures(body: Fields, dtype: str) -> Figures:
    """One placement's figures (`out_of_place`, `in_place`)."""
    time_key = "time" if body.opt("time", anything) is not None else "cpu_time"
    time_us = _json_number(body.opt(time_key, anything), body.at(time_key))
    for name in ("alg_bw", "bus_bw"):
        if name not in body.data:  # null is there: a NaN or Infinity nccl-tests wrote
            raise UserError(f"{body.at(name)}: missing")
    algbw = _json_number(body.data["alg_bw"], body.at("alg_bw"))
    busbw = _json_number(body.data["bus_bw"], body.at("bus_bw"))
    check, note = _check(_json_wrong(body.opt("nwrong", anything), body.at("nwrong")), False, dtype)
    return Figures(time_us=time_us, algbw=algbw, busbw=busbw, check=check, note=note)


def parse_file(path: Path, op: str | None = None, world_size: int | None = None) -> Parsed:
    """A log or a `-J` file, told apart by their first character."""
    text = read_text(Path(path), "nccl-tests log", lenient=True)
    if text.lstrip().startswith("{"):
        return parse_json(parse_json_text(text, shown(path)), shown(path), op)
    return parse_text(text, shown(path), op, world_size)
