"""A commbench collectives run as the JSON file nccl-tests writes with `-J` (file version 3).

`to_nccl_tests_json(run)` writes what NVIDIA/nccl-tests' `src/util.cu` (JSON_FILE_VERSION 3,
nccl-tests 2.19) writes, in its order and with its types, so that nccl-tests' own tools
(`tools/analyze_perf_json.py`) and this package's importer read it: a run of commbench's own
or an imported one, its rows as `results` and its context's ranks as `config.devices`.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from typing import Any

from commbench.collectives.specs import DTYPES as SPEC_BYTES
from commbench.errors import UserError
from commbench.importers.nccl_tests.model import DTYPES
from commbench.importers.nccl_tests.parse import PROCESS_TIMES_KEY
from commbench.ops import OPS
from commbench.results.record import RunKind
from commbench.results.runs import Run
from commbench.results.schema import CHECK_FAILED, CHECK_OK, MOVES_NOTHING, ResultRow
from commbench.results.summary import Device, devices

JSON_FILE_VERSION = 3

# commbench's names -> the names nccl-tests prints (`test_typenames`, its program names)
TYPE_NAMES = {
    "float32": "float",
    "float16": "half",
    "bfloat16": "bfloat16",
    "float64": "double",
    **{name: name for name in set(DTYPES.values()) if name.startswith(("int", "uint"))},
}
ELEMENT_BYTES = {**SPEC_BYTES, "uint32": 4, "uint64": 8, "f8e4m3": 1, "f8e5m2": 1}
"""Bytes per element of every dtype a row may hold (`results.schema.ROW_DTYPES`)."""
EXPORTED_KINDS = (RunKind.COLLECTIVES, RunKind.NCCL_TESTS)


# -- util.cu's printing: jsonStr, jsonInt / jsonSize_t, jsonDouble, jsonBool -----------------


class _Double(float):
    """A value util.cu writes with `jsonDouble` (`%lf`, NaN as "nan")."""


def _str(text: str) -> str:
    """`jsonStr`: `sanitizeJson` escapes `"`, `\\`, `/`, tab and newline, and stops at a
    character it cannot print (non-ASCII, control)."""
    out = []
    for ch in text:
        if ch in '"\\/':
            out.append("\\" + ch)
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif not 0x1F < ord(ch) < 0x7F:
            break
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _emit(value: Any) -> str:
    """One value as util.cu prints it: no whitespace, keys in insertion order, booleans as
    the strings "true"/"false" (`jsonBool`), doubles as `%lf`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return _str("true" if value else "false")
    if isinstance(value, _Double):
        return '"nan"' if math.isnan(value) else f"{value:f}"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, list):
        return "[" + ",".join(_emit(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_str(k)}:{_emit(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"util.cu writes no {type(value).__name__}")


def _double(value: float | None) -> _Double:
    return _Double(math.nan if value is None else value)


# -- the file ---------------------------------------------------------------------------------


def to_nccl_tests_json(run: Run, op: str | None = None) -> str:
    """The run as nccl-tests' `-J` JSON file, version 3, as its `src/util.cu` prints it.

    One op's results (nccl-tests' file holds one program's): `op`, or the run's only op. Each
    (dtype, reduce op, size) point becomes a `results` entry with its out-of-place and
    in-place rows (`out_of_place` is null, as nccl-tests writes it, when the run has only the
    in-place one; `in_place` is left out when it has only the out-of-place one):

    - `time` is the row's time_us, commbench's median (nccl-tests prints a mean), and
      `alg_bw` / `bus_bw` are the row's, computed at that time; `nwrong` is 0 for a check
      that passed, null when nothing was checked, and 1 for a failed one (commbench does not
      count the wrong elements);
    - a row with samples adds `*_per_iter` (`-I 1`): nccl-tests' summary of them and the
      samples as `times_us`; a row imported from an nccl-tests `-I` file adds its
      per-process times (`per_process_max_times_us`), which a run of commbench's own lacks:
      it keeps each rank's median and 95th percentile, not each iteration's time;
    - `config.devices` is the context's ranks, one per process as nccl-tests lists them
      (`nthreads` x `ngpus` ranks each).

    Raises UserError for a run of another kind (p2p, diagnose), one without an op's rows, one
    of several ops when `op` is not given, or an op nccl-tests has no program for."""
    if run.kind not in EXPORTED_KINDS:
        raise UserError(f"{run.path}: a {run.kind} run: nccl-tests' JSON holds collectives")
    rows = _rows(run, op)
    try:
        program = _program(rows[0].op)
    except UserError as refused:
        raise UserError(f"{run.path}: {refused}") from None
    devices_ = devices(run.context.ranks)
    world = max(r.world_size for r in rows)
    per_process = _ranks_per_process(rows, len(devices_), world)
    ctx = run.context
    doc: dict[str, Any] = {
        "version": JSON_FILE_VERSION,
        "start_time": _time_text(ctx.started_at or run.record.imported_at),
        "args": [program, "--commbench-run", run.path.name],
        "env": [f"{k}={v}" for k, v in sorted(ctx.env.items())],
        "nccl_version": _nccl_code(ctx.nccl),
        "config": _config(rows, devices_, per_process, world),
        "results": [_result(points) for points in _points(rows)],
        "out_of_bounds": {
            "count": sum(1 for r in rows if r.check == CHECK_FAILED),
            "okay": all(r.check != CHECK_FAILED for r in rows),
        },
        "average_bus_bandwidth": {
            "bandwidth": _double(_mean(r.busbw_gbps for r in rows)),
            "okay": "unchecked",
        },
        "errors": [],
        "end_time": _time_text(run.record.finished_at or run.record.imported_at),
    }
    return _emit(doc)


def _rows(run: Run, op: str | None) -> list[ResultRow]:
    """The rows nccl-tests could have measured: an op's own (no strategy), which moves data
    evenly (nccl-tests' alltoall splits evenly: it has no program for a skewed all_to_allv,
    whose rows would read as alltoall's)."""
    plain = [r for r in run.rows if not r.strategy and r.op not in MOVES_NOTHING and not r.skew]
    skewed = [r for r in run.rows if r.skew and (r.op == op if op else not plain)]
    if skewed:
        raise UserError(
            f"{run.path}: {skewed[0].op}'s splits are uneven (skew {skewed[0].skew}): "
            "nccl-tests has no program for them (its alltoall splits evenly), so its JSON "
            "cannot hold these rows"
        )
    ops = list(dict.fromkeys(r.op for r in plain))
    if op is None and len(ops) > 1:
        raise UserError(
            f"{run.path}: holds {', '.join(ops)}; nccl-tests' JSON holds one op's results: name one (--op)"
        )
    chosen = [r for r in plain if r.op == (op or (ops[0] if ops else None))]
    if not chosen:
        raise UserError(
            f"{run.path}: no {op or 'collective'} results that nccl-tests measures (an op's "
            "own rows, not a strategy's or a barrier's)"
        )
    return chosen


def _ranks_per_process(rows: list[ResultRow], listed: int, world: int) -> int:
    """nthreads x ngpus: what an imported row's per-process times say, else the world over
    the devices listed (nccl-tests lists one per process; commbench's runs, one per rank)."""
    for r in rows:
        if r.processes is not None:
            return r.processes.ranks_per_process
    if listed and world % listed == 0:
        return world // listed
    return 1 if listed else world


def _program(op: str) -> str:
    """The program nccl-tests' tools (and the importer) name the op by: `all_reduce_perf`,
    its first nccl-tests name (`OpSpec.nccl_tests`), or an imported op's own (`hypercube`).
    An op of commbench's own that nccl-tests has not is refused: a name made up for it would
    read as a program nccl-tests never had."""
    spec = OPS.get(op)
    if spec is None:
        return f"{op}_perf"
    if not spec.nccl_tests:
        raise UserError(
            f"nccl-tests has no program for {op}, so its JSON cannot hold {op}'s rows: "
            "export them in another --format"
        )
    return f"{spec.nccl_tests[0]}_perf"


def _nccl_code(version: str | None) -> int:
    """`2.28.3` -> NCCL_VERSION_CODE 22803 (x10000 from 2.9, x1000 before); 0 when unknown."""
    m = re.fullmatch(r"([0-9]+)\.([0-9]+)\.([0-9]+)", version or "")
    if m is None:
        return 0
    major, minor, patch = (int(g) for g in m.groups())
    if (major, minor) >= (2, 9):
        return major * 10000 + minor * 100 + patch
    return major * 1000 + minor * 100 + patch


def _time_text(stamp: str | None) -> str:
    """A record's `2026-07-10T09:00:00+0200` as util.cu's `%Y-%m-%d %H:%M:%S` (local time)."""
    m = re.match(r"([0-9]{4}-[0-9]{2}-[0-9]{2})[T ]([0-9]{2}:[0-9]{2}:[0-9]{2})", stamp or "")
    return f"{m.group(1)} {m.group(2)}" if m else ""


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return sum(kept) / len(kept) if kept else None


def _config(
    rows: list[ResultRow], listed: list[Device], per_process: int, world: int
) -> dict[str, Any]:
    """`writeDeviceReport`'s `config`, in its order."""
    sizes = sorted({r.size_bytes for r in rows})
    iterations = max((len(r.samples_us) or r.stats.n for r in rows), default=0)
    return {
        "nthreads": 1,
        "ngpus": per_process,
        "minimum_bytes": sizes[0],
        "maximum_bytes": sizes[-1],
        **_step(sizes),
        "warmup_iters": rows[0].warmup,
        "iterations": iterations,
        "aggregated_iterations": 1,
        "validation": int(any(r.check in (CHECK_OK, CHECK_FAILED) for r in rows)),
        "graph": 0,
        "blocking_collectives": False,
        "per_iter_timing": any(r.samples_us for r in rows),
        "per_iter_skip": 0,
        "parallel_init": False,
        "devices": [_device(d, i, per_process) for i, d in enumerate(listed)]
        or [_device(None, 0, world)],
    }


def _step(sizes: list[int]) -> dict[str, int]:
    """`step_factor` when each size is the one before times one factor, else `step_bytes`
    (0 when the sizes are neither)."""
    pairs = list(itertools.pairwise(sizes))
    if pairs and all(b % a == 0 for a, b in pairs) and len({b // a for a, b in pairs}) == 1:
        return {"step_factor": sizes[1] // sizes[0]}
    gaps = {b - a for a, b in pairs}
    return {"step_bytes": gaps.pop() if len(gaps) == 1 else 0}


def _device(d: Device | None, process: int, per_process: int) -> dict[str, Any]:
    """`jsonRankInfo`: a process's first rank, its host and GPU."""
    ordinal = d.local_rank if d is not None else None
    if d is not None and ordinal is None and d.device and d.device.startswith("cuda:"):
        ordinal = int(d.device[5:]) if d.device[5:].isdigit() else None
    return {
        "rank": d.rank if d is not None else process * per_process,
        "group": 0,
        "pid": (d.pid if d is not None else None) or 0,
        "hostname": (d.host if d is not None else None) or "",
        "device": ordinal or 0,
        "device_hex": (d.pci_bus_id if d is not None else None) or "",
        "device_info": (d.device_name if d is not None else None) or "",
    }


def _points(rows: list[ResultRow]) -> list[dict[bool, ResultRow]]:
    """The rows by (dtype, reduce op, size), in the order measured: each point's out-of-place
    (False) and in-place (True) row."""
    points: dict[tuple[str, str, int], dict[bool, ResultRow]] = {}
    for r in rows:
        points.setdefault((r.dtype, r.reduce_op, r.size_bytes), {})[r.in_place] = r
    return list(points.values())


def _result(point: dict[bool, ResultRow]) -> dict[str, Any]:
    """One `results` entry: `writeBenchmarkLinePreamble`, each placement's
    `writeBenchmarkLineBody` and `writePerIterReport`, `writeBenchmarkLineTerminator`."""
    first = point.get(False) or point[True]
    spec = OPS.get(first.op)  # None for nccl-tests' own ops (hypercube): unsplit, unrooted
    count = first.size_bytes // ELEMENT_BYTES[first.dtype]
    if (
        spec is not None and spec.split
    ):  # nccl-tests prints a split op's count per rank (its `paramcount`: S / n)
        count //= first.world_size
    out: dict[str, Any] = {
        "size": first.size_bytes,
        "count": count,
        "type": TYPE_NAMES.get(first.dtype, first.dtype),
        "redop": first.reduce_op or "none",
        "root": f"{0 if spec is not None and spec.rooted else -1:6d}",  # commbench's root is the group's first rank
    }
    if False not in point:
        out["out_of_place"] = None  # writeBenchMarkLineNullBody
    for in_place, key in ((False, "out_of_place"), (True, "in_place")):
        row = point.get(in_place)
        if row is None:
            continue
        out[key] = {
            "time": _double(row.time_us),
            "alg_bw": _double(row.algbw_gbps),
            "bus_bw": _double(row.busbw_gbps),
            "nwrong": _nwrong(row.check),
        }
        if row.samples_us:
            out[f"{key}_per_iter"] = _per_iter(row)
    row = point.get(True) or first
    out["actual_iterations"] = len(row.samples_us) or row.stats.n
    out["experiment_name"] = ""
    return out


def _nwrong(check: str) -> _Double | None:
    if check == CHECK_OK:
        return _Double(0.0)
    if check == CHECK_FAILED:
        return _Double(1.0)
    return None  # nccl-tests writes null when it did not check (-c 0)


def _per_iter(row: ResultRow) -> dict[str, Any]:
    """`writePerIterReport`: `computeIterStats` of the samples (nearest-rank percentiles,
    population deviation), the samples, and an imported row's per-process times."""
    times = sorted(row.samples_us)
    n = len(times)
    avg = sum(times) / n
    stdev = math.sqrt(sum((t - avg) ** 2 for t in times) / n)

    def nearest(percent: int) -> float:
        return times[min(n - 1, (n * percent + 99) // 100 - 1)]

    out: dict[str, Any] = {
        "skipped_iterations": 0,
        "min_us": _Double(times[0]),
        "max_us": _Double(times[-1]),
        "avg_us": _Double(avg),
        "p50_us": _Double(times[n // 2]),
        "p95_us": _Double(nearest(95)),
        "p99_us": _Double(nearest(99)),
        "stdev_us": _Double(stdev),
        "cv_pct": _Double(stdev / avg * 100.0 if avg > 0 else 0.0),
        "times_us": [_Double(t) for t in row.samples_us],
    }
    processes = row.processes
    if processes is not None and len(processes.ranks) > 1:
        out[PROCESS_TIMES_KEY] = [[_Double(t) for t in own] for own in processes.times_us]
    return out
