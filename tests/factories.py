"""Builders of the test data many tests share: result rows, run directories and topology
snapshots of the fake machines. A test names only what it cares about; the rest is a
plausible default (an all_reduce of float32 sums on 2 ranks, measured and checked).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from commbench.processes import ProcessId
from commbench.results import openmetrics as om
from commbench.results.lifecycle import start_run
from commbench.results.record import RunContext, RunKind, RunRecord
from commbench.results.schema import SCHEMA_VERSION, ResultRow
from commbench.results.store import RunDir, write_results
from commbench.stats import Stats
from commbench.topology.discover import discover
from commbench.topology.model import TopologySnapshot
from commbench.traces.records import Call, Group, Manifest
from commbench.traces.writer import TraceWriter

SAMPLES_US = (10.0, 12.0, 11.0)

# What `rescaled` carries over from the row it rescales: every field but the measured ones.
_KEPT = (
    "op",
    "strategy",
    "dtype",
    "reduce_op",
    "world_size",
    "count",
    "check",
    "warmup",
    "in_place",
    "requested_bytes",
    "note",
)


LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""Every line break of `str.splitlines` but the line feed: a reader of lines may end a line at
any of them (Python's text mode at a carriage return, YAML at NEL, U+2028 and U+2029)."""
UNWRITABLE = LINE_BREAKS + "\x00\t\x1b\x1f\x7f\x80\x9f\ud800\udbff\udc00\udfff"
"""Characters a line-based text format cannot hold as they are, which its writer escapes or
refuses: the line breaks above, other control characters (C0 but the line feed, DEL, C1), and
lone surrogates (which UTF-8 cannot encode)."""
_AWKWARD = (
    '\\"\n{}=,# nN01.-_eE+'
    "\u00a0\u00e9\u00ff\u0100\u200b\u200e\u202e\u2027\u202a\u2030"
    "\u3000\u65e5\ufeff\ufffd\ufffe\uffff\U0001f600\U0010ffff"
)
"""Characters a text format must escape, or that sit next to ones it must refuse: backslash,
quote, line feed, a format's own syntax, spaces, bidirectional and zero-width marks, and the
code points around U+2028 and U+2029, on both sides of the byte-length boundaries of UTF-8."""


def hostile_texts(count: int = 400, seed: int = 33) -> list[str]:
    """Strings a writer must keep exactly: fixed cases (empty, an escape sequence spelt out,
    a sample line, a whole injected sample) and `count` random ones over `_AWKWARD`, none
    holding a character of `UNWRITABLE`."""
    fixed = [
        "",
        " ",
        "\\",
        '"',
        "\n",
        "\\n",
        '\\"',
        "\\\\",
        "\n\n",
        '"} 1\ncommbench_injected{a="b"} 2\n',
        "# HELP commbench_x injected",
        "# EOF",
        'a=b,c="d"',
        "{}",
        _AWKWARD,
    ]
    rng = random.Random(seed)
    alphabet = _AWKWARD + "abc"
    made = ["".join(rng.choices(alphabet, k=rng.randrange(1, 24))) for _ in range(count)]
    return fixed + made


def hostile_families(values: list[str], helps: list[str] | None = None) -> list[om.Family]:
    """Metric families holding hostile strings: `commbench_hostile`, one sample per value
    (labels `case`, its index, and `value`), and a family `commbench_hostile_help_<i>` per
    text of `helps` (default: `values`, i its index there) with the text as its HELP."""
    labels = om.Family("commbench_hostile", "gauge", "hostile label values")
    for i, text in enumerate(values):
        labels.add({"case": str(i), "value": text}, i)
    families = [labels]
    for i, text in enumerate(values if helps is None else helps):
        families.append(om.Family(f"commbench_hostile_help_{i}", "gauge", text))
        families[-1].add({}, i)
    return families


def make_row(
    size: int = 1024,
    samples: Sequence[float] = SAMPLES_US,
    *,
    busbw_factor: float | None = 1.0,
    **fields: Any,
) -> ResultRow:
    """A measured row of `size` bytes from `samples` (µs); `fields` override the defaults
    (`_defaults`)."""
    return ResultRow.measured(
        samples_us=list(samples),
        size_bytes=size,
        busbw_factor=busbw_factor,
        **_defaults(size, fields),
    )


def row_at(size: int, busbw: float | None, **fields: Any) -> ResultRow:
    """A row whose bandwidth (algbw = busbw, GB/s) is given rather than measured: five
    samples of median 1 µs, none kept."""
    return ResultRow(
        size_bytes=size,
        algbw_gbps=busbw,
        busbw_gbps=busbw,
        stats=Stats(n=5, median=1.0),
        **_defaults(size, fields),
    )


def _defaults(size: int, fields: Mapping[str, Any]) -> dict[str, Any]:
    """An all_reduce of float32 sums on 2 ranks, checked, count = size / 4; then `fields`."""
    return {
        "op": "all_reduce",
        "dtype": "float32",
        "reduce_op": "sum",
        "world_size": 2,
        "count": size // 4,
        "check": "ok",
        **fields,
    }


def allreduce_factor(n: int) -> float:
    """all_reduce's busbw / algbw on n ranks, 2(n-1)/n."""
    return 2 * (n - 1) / n


def rescaled(r: ResultRow, speed: float, spread: float = 1.0) -> ResultRow:
    """`r` as if its busbw were multiplied by `speed`; `spread` widens the samples around
    the median."""
    median = r.time_us
    samples = [(median + (s - median) * spread) / speed for s in r.samples_us]
    factor = r.busbw_gbps / r.algbw_gbps if r.busbw_gbps and r.algbw_gbps else None
    keep = {k: getattr(r, k) for k in _KEPT}
    return ResultRow.measured(
        samples_us=samples, size_bytes=r.size_bytes, busbw_factor=factor, **keep
    )


def write_meta(run_dir: Path, meta: Mapping[str, Any]) -> None:
    """A hand-made run.json, checked as commbench reads one."""
    record = RunRecord.from_dict({"schema_version": SCHEMA_VERSION, **meta}, "test")
    RunDir(run_dir).write_record(record)


def write_run(run_dir: Path, rows: list[ResultRow], record: RunRecord | Mapping[str, Any]) -> Path:
    """A run directory (created if need be) holding `record` (or a run.json's fields) and
    `rows`, as a finished run leaves it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(record, RunRecord):
        RunDir(run_dir).write_record(record)
    else:
        write_meta(run_dir, record)
    write_results(run_dir, rows)
    return run_dir


def one_op_copy(fixture: Path, dst: Path, op: str = "all_reduce") -> Path:
    """A copy of a stored fixture run that keeps only `op`'s rows (its strategies too), for
    the tests of what is done with a run's figures (written, named, linked, labelled): each
    op is a figure of its own, and drawing one costs a second of matplotlib layout, so a
    test that checks one figure draws one."""
    import shutil

    from commbench.results.runs import load_run

    run = load_run(fixture)
    shutil.copytree(fixture, dst)
    write_results(dst, [r for r in run.rows if r.op == op])
    return dst


def dead_launcher() -> ProcessId:
    """The identity of a process that has ended, as a launcher killed outright leaves it
    (starts a process: for a test marked `integration`)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    who = ProcessId.of(proc.pid)
    proc.kill()
    proc.wait()
    return who


def abandoned_run(parent: Path, launcher: ProcessId, *, journaled: int, written: int) -> Path:
    """A run under `parent` as a launcher killed outright leaves it: run.json "running" and
    naming `launcher`, `journaled` all_reduce rows (1K, 2K, 4K, ...: 5 µs and 1 GB/s, which
    `model --from` fits) in events.jsonl of which the first `written` made it into the result
    files."""
    life = start_run(
        parent,
        RunKind.COLLECTIVES,
        settings={},
        context=RunContext.from_dict({"world_size": 2, "backend": "gloo"}, "context"),
        points_total=4,
        points_done=0,
    )
    life.record.launcher = launcher
    life.save()
    sizes = [1024 << i for i in range(journaled)]
    rows = [make_row(n, [(5 + n / 1000) * (1 + j / 20) for j in range(3)]) for n in sizes]
    events = [{"type": "context", "world_size": 2, "group_size": 2, "ranks": []}] + [
        {"type": "row", "point": i, "row": r.to_dict()} for i, r in enumerate(rows)
    ]
    (life.path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    life.dir.write_rows(rows[:written])
    return life.path


def fake_snapshot(
    machine: str, environ: Mapping[str, str] | None = None, **kw: Any
) -> TopologySnapshot:
    """What discovery sees on a fake machine of tests/fixtures/topology (`nvml_<machine>.json`);
    `kw` goes to `discover` (`root`, `all_nics`)."""
    from tests.fixtures.topology.fake_nvml import FakeNvml, load_machine

    return discover(nvml=FakeNvml(load_machine(machine)), environ=dict(environ or {}), **kw)


def cpu_gpus_for_p2p(monkeypatch: Any, count: int, **kw: Any) -> None:
    """`count` CPU tensors' 'GPUs' stand in for CUDA devices in `commbench p2p`: for torch
    (`CudaBackend` becomes `CpuBackend(count, **kw)`) and for the check, made before torch is
    imported, that a GPU may be there at all (`no_gpu_reason`)."""
    from commbench.p2p import measure
    from commbench.p2p import run as p2p_run

    monkeypatch.setattr(measure, "CudaBackend", lambda: measure.CpuBackend(count, **kw))
    monkeypatch.setattr(p2p_run, "no_gpu_reason", lambda snapshot: None)


def trace_call(
    op: str = "all_reduce",
    nbytes: int = 1 << 20,
    *,
    ranks: Sequence[int] = (0, 1),
    group: str = "0",
    dtype: str = "float32",
    out_bytes: int | None = None,
    **fields: Any,
) -> Call:
    """A traced call (rank, seq and group_seq are the writer's): an all_reduce of 1 MiB of
    float32 in the default group of 2 ranks unless told otherwise."""
    return Call(
        rank=0,
        seq=0,
        op=op,
        name=fields.pop("name", op),
        in_bytes=nbytes,
        out_bytes=nbytes if out_bytes is None else out_bytes,
        dtype=dtype if nbytes else "",
        count=nbytes // 4,
        group=Group(name=group, ranks=tuple(ranks)),
        **fields,
    )


def write_trace(
    directory: Path, per_rank: Mapping[int, Sequence[Call]], *, complete: bool = True
) -> Path:
    """A trace directory of `per_rank` calls, written by `TraceWriter` (rank 0's holds the
    manifest, of world size len(per_rank))."""
    manifest = Manifest(
        argv=("python", "train.py"),
        world_size=len(per_rank),
        hosts=("node0",),
        torch_version="2.9.0",
        backends=("gloo",),
        started=1.7e9,
    )
    for rank, calls in per_rank.items():
        writer = TraceWriter(directory, rank, manifest=manifest if rank == 0 else None)
        for call in calls:
            writer.write(call)
        writer.close(complete=complete)
    return directory


def ddp_trace(directory: Path, *, world: int = 4, steps: int = 3) -> Path:
    """A DDP-like job: a broadcast of the 4 MiB of parameters at start-up, then per step 4
    all_reduce buckets of 1 MiB of float32 (the parameters' gradients)."""
    ranks = tuple(range(world))
    calls = [trace_call("broadcast", 4 << 20, ranks=ranks, peer=0)]
    for step in range(steps):
        calls += [trace_call("all_reduce", 1 << 20, ranks=ranks, step=step) for _ in range(4)]
    return write_trace(directory, {r: calls for r in ranks})


def collectives_settings(**flat: Any) -> Any:
    """`CollectivesSettings` from flat fields, as run.json stores them (`nproc`, `warmup`,
    ... beside `ops`): the placement's (2 gloo CPU ranks unless named) and the timing's go
    into their records, the rest to the settings; a field none of them has is a TypeError,
    as the constructor's would be."""
    from dataclasses import fields

    from commbench.collectives.placement import Placement
    from commbench.collectives.settings import PLACED_KEYS, CollectivesSettings, Timing

    timing = {f.name: flat.pop(f.name) for f in fields(Timing) if f.name in flat}
    placed = {"nproc": 2, "backend": "gloo", "device": "cpu"}  # the CPU ranks of a laptop
    placed.update({key: flat.pop(key) for key in PLACED_KEYS if key in flat})
    return CollectivesSettings(placement=Placement(**placed), timing=Timing(**timing), **flat)
