"""Suite directories: one `suite.json` naming the run directories a suite run produced.

```
results/suites/20240611-090000-suite-ci/
  suite.json            {schema_version, kind: "suite", name, config, status, entries: [...]}
  topology.json         when the suite has `topo: true`
  20240611-090001-collectives/   one run directory per entry (run.json, results.*)
  comparison.json / comparison.md   with --baseline
```

Entries are named by what they measured (`collectives-float32`, `strategies-bfloat16`,
`p2p`), so a suite compares with a baseline suite entry by entry, whatever the timestamps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from commbench.compare import Comparison, GateSettings, compare_runs
from commbench.errors import EXIT_OK, UserError
from commbench.fields import Fields, anything, list_of, mapping_of, string
from commbench.files import path_kind, shown
from commbench.report.runs import load_any
from commbench.results.schema import SCHEMA_VERSION
from commbench.results.store import (
    STATUS_RUNNING,
    Run,
    atomic_write,
    dump_json,
    load_json,
    recognise_status,
    stamp_writer,
)

SUITE_FILE = "suite.json"
SUITE_KIND = "suite"


@dataclass(kw_only=True, slots=True)
class Entry:
    """One thing a suite ran: a run directory, or why there is none."""

    name: str
    section: str
    path: str | None = None
    """Run directory, relative to the suite directory."""
    status: str = "pending"
    """complete, failed, interrupted, skipped."""
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True, slots=True)
class SuiteRecord:
    path: Path
    meta: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)


def write_suite(path: Path, meta: dict[str, Any], entries: list[Entry]) -> None:
    payload = {
        "schema_version": SCHEMA_VERSION,
        "kind": SUITE_KIND,
        **meta,
        "entries": [e.to_dict() for e in entries],
    }
    atomic_write(path / SUITE_FILE, dump_json(stamp_writer(payload)))


def is_suite(path: Path) -> bool:
    """Whether `path` is a suite directory (a FIFO or a name the OS refuses: UserError)."""
    path = Path(path)
    return path_kind(path, "run or suite directory") == "dir" and (
        path_kind(path / SUITE_FILE, SUITE_FILE) == "file"
    )


def load_suite_dir(path: Path) -> SuiteRecord:
    """Read suite.json, checking the fields readers use (the one place for this file kind)."""
    path = Path(path)
    meta = load_json(path / SUITE_FILE, "suite file")
    f = Fields(meta, f"{shown(path / SUITE_FILE)}:")
    if meta.get("kind") != SUITE_KIND:
        raise UserError(f"{shown(path / SUITE_FILE)}: not a suite file")
    for key in ("name", "description", "status", "topology_file", "baseline"):
        f.opt(key, string)
    f.opt("warnings", list_of(string))
    config = f.sub("config")
    if config is not None:
        config.opt("gate", mapping_of(anything))
    meta = recognise_status(meta)
    entries = []
    for item in f.items("entries"):
        e = item.obj()
        entries.append(
            Entry(
                name=e.req("name", string),
                section=e.req("section", string),
                path=e.opt("path", string),
                status=e.opt("status", string) or "pending",
                failure=e.opt("failure", string),
            )
        )
    if meta.get("recorded_status") == STATUS_RUNNING:  # its launcher is gone: so is the entry's
        for entry in entries:
            if entry.status == STATUS_RUNNING:
                entry.status, entry.failure = meta["status"], meta["failure"]
    return SuiteRecord(path=path, meta=meta, entries=entries)


def entry_name(run: Run) -> str:
    """What a run directory measured, as a suite names it."""
    kind = str(run.meta.get("kind") or "run")
    settings = run.meta.get("settings") or {}
    if kind == "collectives":
        section = "collectives" if settings.get("ops") else "strategies"
        return f"{section}-{settings.get('dtype', 'float32')}"
    return kind


def load_runs(path: Path) -> dict[str, Run]:
    """The runs at `path` by entry name: every run of a suite, or the one run directory."""
    path = Path(path)
    if not is_suite(path):
        run = load_any(path)
        return {entry_name(run): run}
    record = load_suite_dir(path)
    runs = {}
    for entry in record.entries:
        if entry.path:
            runs[entry.name] = load_any(path / entry.path)
    return runs


def _absent(path: Path, name: str) -> Run:
    """Stands in for an entry the new suite lacks: every baseline point then is missing."""
    return Run(path=path / f"<no {name}>", meta={"status": "missing"}, rows=[])


def compare_targets(
    baseline: Path, new: Path, settings: GateSettings | None = None
) -> list[tuple[str, Comparison]]:
    """Compare two run directories, two suites entry by entry, or a run with its suite entry."""
    base_runs, new_runs = load_runs(baseline), load_runs(new)
    if not base_runs:
        raise UserError(f"{baseline}: the baseline suite has no runs")
    single = len(base_runs) == 1 and len(new_runs) == 1
    if single and not (is_suite(Path(baseline)) and is_suite(Path(new))):
        # A run against a run (or a one-run suite): names need not match.
        ((name, b),) = base_runs.items()
        ((_, n),) = new_runs.items()
        return [(name, compare_runs(b, n, settings))]
    if not is_suite(Path(baseline)) and next(iter(base_runs)) not in new_runs:
        raise UserError(
            f"{new} has no {next(iter(base_runs))} run to compare {baseline} with "
            f"(it has: {', '.join(new_runs) or 'nothing'})"
        )
    out = []
    for name, b in base_runs.items():
        n = new_runs.get(name) or _absent(Path(new), name)
        out.append((name, compare_runs(b, n, settings)))
    return out


_GATE_KEYS = ("tolerance", "latency_tolerance", "alpha", "noisy_cv")


def recorded_gate(path: Path) -> dict[str, Any]:
    """The gate a suite directory was run with (its config's `compare` section); {} for a
    run directory."""
    if not is_suite(Path(path)):
        return {}
    gate = (load_suite_dir(path).meta.get("config") or {}).get("gate") or {}
    return {
        k: gate[k]
        for k in _GATE_KEYS
        if isinstance(gate, dict) and isinstance(gate.get(k), float | int)
    }


def gate_for(
    baseline: Path, new: Path, *, allow_mismatch: bool = False, **given: float | None
) -> GateSettings:
    """The gate to judge `new` against `baseline` with: what the suites' configs gave
    `commbench run --baseline` (so `compare` of two suites reaches its verdict), under the
    values given on the command line (None: not given)."""
    unknown = set(given) - set(_GATE_KEYS)
    if unknown:
        raise TypeError(f"not gate settings: {sorted(unknown)}")
    gate = {**recorded_gate(baseline), **recorded_gate(new)}
    gate.update({k: v for k, v in given.items() if v is not None})
    return GateSettings(**gate, allow_mismatch=allow_mismatch)


def exit_code(results: list[tuple[str, Comparison]]) -> int:
    return max((c.exit_code for _, c in results), default=EXIT_OK)
