"""An nccl-tests result as a commbench run directory.

What `parse` read becomes an ordinary run: run.json (kind `nccl-tests`, the source file, each
test's header, the rows left out) and the result files, written through the one lifecycle
every producer uses, so that report, plot and compare read it like any run of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.fields import pick
from commbench.files import shown
from commbench.importers.nccl_tests.model import Parsed
from commbench.importers.nccl_tests.parse import parse_file
from commbench.results.lifecycle import now, start_run
from commbench.results.record import RunContext, RunKind, RunStatus
from commbench.results.schema import CHECK_FAILED, ResultRow


def context_of(parsed: Parsed) -> dict[str, Any]:
    """run.json's context: what the log says of where it ran (no topology, no torch)."""
    first = parsed.sections[0]
    ranks = first.ranks
    hosts = sorted({r.host for r in ranks if r.host})
    names = sorted({r.device_name for r in ranks if r.device_name})
    world = first.rows[0].world_size
    return {
        "host": hosts[0] if hosts else None,
        "hosts": hosts,
        "backend": "nccl",
        "device": "cuda",
        "world_size": world,
        "nnodes": len(hosts) or None,
        "device_names": names,
        "ranks": [r.to_dict() for r in ranks],
        "nccl": parsed.nccl,
        "cuda": parsed.cuda,
        "torch": None,
        "env": {},
        "topology": None,
        "nccl_tests_version": parsed.tests_version,
    }


def _time_notes(rows: list[ResultRow]) -> list[str]:
    """What the rows' time_us is: nccl-tests' mean, or (with its per-iteration times, `-I 1`)
    the median of those, as commbench's own; and what a per-process time is."""
    sampled = sum(1 for r in rows if r.samples_us)
    notes = []
    if sampled < len(rows):
        notes.append(
            "time_us is nccl-tests' time: the mean over its timed iterations (averaged across "
            "ranks by default), not commbench's median of per-iteration maxima"
            + (f" ({len(rows) - sampled} of {len(rows)} rows)" if sampled else "")
        )
    if sampled:
        notes.append(
            "time_us is the median of nccl-tests' per-iteration times (-I 1: each iteration's "
            "maximum over the processes), the iterations its summary skipped (-K) left out"
        )
    if any(r.processes is not None for r in rows):
        notes.append(
            "processes: nccl-tests' per-process times (per MPI process, each iteration's "
            "maximum over its GPUs), each process named by its first rank"
        )
    return notes


def merge_repeats(rows: list[ResultRow]) -> tuple[list[ResultRow], list[str]]:
    """One row per point: a point the log measured more than once (nccl-tests `-N` prints
    every cycle's table; two logs joined) becomes one row whose samples are all of its
    measurements, so that `compare` joins one row per point. With what to say of it."""
    groups: dict[Any, list[ResultRow]] = {}
    for row in rows:
        groups.setdefault(row.key, []).append(row)
    if all(len(g) == 1 for g in groups.values()):
        return rows, []
    merged = []
    for group in groups.values():
        if len(group) == 1:
            merged.append(group[0])
            continue
        first = group[0]
        factor = (
            first.busbw_gbps / first.algbw_gbps
            if first.busbw_gbps is not None and first.algbw_gbps
            else None
        )
        samples = [t for r in group for t in (r.samples_us or [r.time_us])]
        wrong = [r for r in group if r.check == CHECK_FAILED]
        note = f"measured {len(group)} times in the log: its samples are all of them"
        merged.append(
            ResultRow.measured(
                samples_us=samples,
                size_bytes=first.size_bytes,
                busbw_factor=factor,
                **pick(first, "op", "strategy", "dtype", "reduce_op", "world_size", "count"),
                check=(wrong[0] if wrong else first).check,
                warmup=first.warmup,
                in_place=first.in_place,
                requested_bytes=first.requested_bytes,
                note="; ".join(x for x in (first.note, note) if x),
            )
        )
    times = max(len(g) for g in groups.values())
    said = (
        f"{sum(len(g) > 1 for g in groups.values())} point(s) were measured up to {times} "
        "times in the log (nccl-tests -N, or logs joined): each is one row whose samples "
        "are every measurement"
    )
    return merged, [said]


def _context(parsed: Parsed, path: Path) -> RunContext:
    """The run's context from what the file says of its devices, checked as a stored run's
    is; what it refuses (a host name with a line break) is said with the file's name."""
    try:
        return RunContext.from_dict(context_of(parsed), "context")
    except UserError as exc:
        raise UserError(f"{shown(path)}: {exc}") from None


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
    rows, repeated = merge_repeats(parsed.rows)
    first = parsed.sections[0]
    skipped = parsed.skipped_text()
    if skipped and on_skipped is not None:
        on_skipped(skipped)
    life = start_run(
        out_parent,
        RunKind.NCCL_TESTS,
        settings={
            "ops": list(dict.fromkeys(s.op for s in parsed.sections)),
            "nccl_tests": first.header_dict(),
            "dtype": rows[0].dtype,
        },
        context=_context(parsed, path),
        source=str(Path(path).resolve()),
        format=parsed.fmt,
        imported_at=now(),
        sections=[
            {
                "op": s.op,
                "header": s.header_dict(),
                "rows": len(s.rows),
                "dropped_zero_size_rows": s.dropped_empty,
                "avg_busbw_gbps": s.avg_busbw,
            }
            for s in parsed.sections
        ],
        points_total=len(rows),
        points_done=len(rows),
        notes=[*_time_notes(parsed.rows), *repeated, *([skipped] if skipped else [])],
    )
    with life.guarded():
        life.dir.write_rows(rows)
    life.finish(RunStatus.COMPLETE)
    return life.path
