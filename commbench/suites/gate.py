"""Suites compared entry by entry, and the gate a suite ran with.

A suite directory (`results.store.SuiteDir`: suite.json, topology.json, a run directory per
entry, comparison.json / comparison.md with --baseline) is read through `results.runs`.
Entries are named by what they measured (`collectives-float32`, `strategies-bfloat16`,
`p2p`), so a suite compares with a baseline suite entry by entry, whatever the timestamps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from commbench.arguments import PathLike
from commbench.compare import (
    Comparison,
    GateSettings,
    HistoryMedians,
    compare_history,
    compare_runs,
)
from commbench.errors import UserError
from commbench.fields import Fields, anything, string
from commbench.results.record import RunKind, RunRecord
from commbench.results.runs import Run, Suite, is_suite, load_run, load_suite


def entry_name(run: Run) -> str:
    """What a run directory measured, as a suite names it."""
    if run.kind is RunKind.COLLECTIVES:
        settings = Fields(run.record.settings, "settings")  # checked when run.json was read
        section = "collectives" if settings.opt("ops", anything) else "strategies"
        return f"{section}-{settings.opt('dtype', string) or 'float32'}"
    return run.kind.value


Target = PathLike | Run | Suite
"""What is compared: a run or a suite, stored at a path or already loaded (the API's)."""


def loaded(target: Target) -> Run | Suite:
    """`target` loaded, once: the one read of a path that the gate, the entries and a missing
    entry's stand-in are all taken from."""
    if isinstance(target, Run | Suite):
        return target
    path = Path(target)
    return load_suite(path) if is_suite(path) else load_run(path)


def runs_in(target: Run | Suite) -> dict[str, Run]:
    """The runs of a loaded target by entry name: every run of a suite, or the one run."""
    if isinstance(target, Suite):
        return target.runs()
    run = target.held_here()
    return {entry_name(run): run}


def load_runs(path: Path) -> dict[str, Run]:
    """The runs at `path` by entry name: every run of a suite, or the one run directory."""
    return runs_in(loaded(path))


def _absent(new: Run | Suite, name: str) -> Run:
    """Stands in for an entry the new suite lacks: every baseline point then is missing,
    and a suite that did not finish (its launcher gone before the entry ran) says why."""
    record = RunRecord(kind=RunKind.COLLECTIVES)
    if isinstance(new, Suite) and new.record.unfinished:
        record.status, record.failure = new.record.status, new.record.failure
    return Run(path=new.path / f"<no {name}>", record=record, rows=[])


ReferenceFn = Callable[[Run], tuple[HistoryMedians, Sequence[str]]]
"""A history's reference for a run: its points' medians in the comparable runs since each
series last changed, and those runs' ids (`commbench.history`)."""


def compare_targets(
    baseline: Target,
    new: Target,
    settings: GateSettings | None = None,
    reference: ReferenceFn | None = None,
) -> list[tuple[str, Comparison]]:
    """Compare two run directories, two suites entry by entry, or a run with its suite entry;
    with `reference`, each against how far its points moved in the history. Each target is
    read once (`loaded`): pass what is loaded already."""
    base, fresh = loaded(baseline), loaded(new)
    baseline, new = base.path, fresh.path  # as the messages name them
    base_runs, new_runs = runs_in(base), runs_in(fresh)
    if not base_runs:
        raise UserError(f"{baseline}: the baseline suite has no runs")

    def judged(b: Run, n: Run) -> Comparison:
        if reference is None:
            return compare_runs(b, n, settings)
        history, runs = reference(n)
        return compare_runs(b, n, settings, history=history, history_runs=runs)

    single = len(base_runs) == 1 and len(new_runs) == 1
    if single and not (isinstance(base, Suite) and isinstance(fresh, Suite)):
        # A run against a run (or a one-run suite): names need not match.
        ((name, b),) = base_runs.items()
        ((_, n),) = new_runs.items()
        return [(name, judged(b, n))]
    if not isinstance(base, Suite) and next(iter(base_runs)) not in new_runs:
        raise UserError(
            f"{new} has no {next(iter(base_runs))} run to compare {baseline} with "
            f"(it has: {', '.join(new_runs) or 'nothing'})"
        )
    out = []
    for name, b in base_runs.items():
        n = new_runs.get(name) or _absent(fresh, name)
        out.append((name, judged(b, n)))
    return out


def compare_to_history(
    new: Path, reference: ReferenceFn, settings: GateSettings | None = None
) -> list[tuple[str, Comparison]]:
    """Every collectives run at `new` (a run, or a suite's entries) against the history
    alone (`compare_history`); runs of other kinds have no series the gate reads yet."""
    out = []
    for name, run in load_runs(new).items():
        if run.kind is not RunKind.COLLECTIVES:
            continue
        history, runs = reference(run)
        out.append((name, compare_history(run, history, runs, settings)))
    return out


GATE_KEYS = tuple(f.name for f in fields(GateSettings) if f.name != "allow_mismatch")
"""The gate's own numbers (`GateSettings`' fields, less the flag a command line gives): what a
suite records of its gate, and what `gate_for` takes."""


def recorded_gate(target: Run | Suite) -> dict[str, Any]:
    """The gate a suite was run with (its config's `compare` section); {} for a run."""
    if not isinstance(target, Suite):
        return {}
    match target.record.config:  # its `gate` checked when suite.json was read
        case {"gate": dict(gate)}:
            return {k: gate[k] for k in GATE_KEYS if isinstance(gate.get(k), float | int)}
    return {}


def gate_for(
    baseline: Run | Suite, new: Run | Suite, *, allow_mismatch: bool = False, **given: float | None
) -> GateSettings:
    """The gate to judge `new` against `baseline` with: what the suites' configs gave
    `commbench run --baseline` (so `compare` of two suites reaches its verdict), under the
    values given on the command line (None: not given)."""
    unknown = set(given) - set(GATE_KEYS)
    if unknown:
        raise TypeError(f"not gate settings: {sorted(unknown)}")
    gate = {**recorded_gate(baseline), **recorded_gate(new)}
    gate.update({k: v for k, v in given.items() if v is not None})
    return GateSettings(**gate, allow_mismatch=allow_mismatch)
