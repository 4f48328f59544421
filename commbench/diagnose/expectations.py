"""What a diagnosis expects of each stage when the peers' median should not decide: an
expectations file, or an earlier diagnose run of a cluster known to be good."""

from __future__ import annotations

import statistics
from pathlib import Path

from commbench.diagnose.journal import INTER, STAGE_NAMES, RecordedTest
from commbench.errors import UserError
from commbench.files import load_json, parse_json, path_kind, read_text, shown


def load_expectations(path: Path) -> dict[str, float]:
    """Bus bandwidth (GB/s) expected per stage. A JSON file `{"inter-node": 40.0, ...}`, or
    a diagnose run directory: the median of its tests per stage."""
    if path_kind(path, "--baseline") == "dir":
        return _from_run(path)
    data = load_json(path, "expectations file")
    if not isinstance(data, dict) or not data:
        raise UserError(
            f'{shown(path)}: expected a mapping of stage to GB/s, e.g. {{"{INTER}": 40}}'
        )
    out: dict[str, float] = {}
    for name, value in data.items():
        if name not in STAGE_NAMES:
            raise UserError(
                f"{shown(path)}: unknown stage {name!r}; stages: {', '.join(STAGE_NAMES)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
            raise UserError(
                f"{shown(path)}: {name}: expected GB/s as a positive number, got {value!r}"
            )
        out[name] = float(value)
    return out


def _from_run(run_dir: Path) -> dict[str, float]:
    events = run_dir / "events.jsonl"
    if path_kind(events, "events.jsonl") != "file":
        raise UserError(f"{shown(run_dir)}: not a diagnose run directory (no events.jsonl)")
    where = shown(events)
    medians: dict[str, list[float]] = {}
    for number, text in enumerate(read_text(events, "events.jsonl").splitlines(), 1):
        at = f"{where}: line {number}:"
        try:
            event = parse_json(text, at)
            test = RecordedTest.from_event(event, at) if isinstance(event, dict) else None
        except UserError:
            continue
        if test is not None and test.samples_gbps:
            medians.setdefault(test.stage, []).append(statistics.median(test.samples_gbps))
    if not medians:
        raise UserError(f"{shown(run_dir)}: no diagnose tests in it")
    return {stage: statistics.median(values) for stage, values in medians.items()}
