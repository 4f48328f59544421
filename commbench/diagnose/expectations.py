"""What a diagnosis expects of each stage when the peers' median should not decide: an
expectations file, or an earlier diagnose run of a cluster known to be good."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from commbench.diagnose.journal import INTER, STAGE_NAMES, RecordedTest
from commbench.errors import UserError
from commbench.files import load_json, parse_json, path_kind, read_text, shown


@dataclass(frozen=True, slots=True)
class Expectations:
    """Bus bandwidth (GB/s) expected per stage, and what reading them left to say."""

    gbps: dict[str, float]
    notes: list[str] = field(default_factory=list)
    """Lines of a baseline run's events.jsonl that could not be read, counted (the command
    says them on stderr: a baseline read from part of a journal is worth knowing)."""


def load_expectations(path: Path) -> Expectations:
    """A JSON file `{"inter-node": 40.0, ...}`, or a diagnose run directory: the median of
    its tests per stage."""
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
    return Expectations(out)


def _from_run(run_dir: Path) -> Expectations:
    events = run_dir / "events.jsonl"
    if path_kind(events, "events.jsonl") != "file":
        raise UserError(f"{shown(run_dir)}: not a diagnose run directory (no events.jsonl)")
    where = shown(events)
    medians: dict[str, list[float]] = {}
    lines = read_text(events, "events.jsonl").splitlines()
    unreadable = 0
    bad_tests: list[str] = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        at = f"{where}: line {number}:"
        try:
            event = parse_json(text, at)
        except UserError:
            unreadable += 1
            continue
        if not isinstance(event, dict):
            unreadable += 1
            continue
        try:
            test = RecordedTest.from_event(event, at)
        except UserError as exc:
            bad_tests.append(str(exc))
            continue
        if test is not None and test.samples_gbps:
            medians.setdefault(test.stage, []).append(statistics.median(test.samples_gbps))
    written = sum(1 for text in lines if text.strip())
    if written and unreadable == written:
        raise UserError(f"{where}: none of its {written} line(s) is a JSON object")
    notes = []
    if unreadable:
        notes.append(
            f"--baseline: skipped {unreadable} of {written} line(s) of {where} "
            "that are not JSON objects"
        )
    if bad_tests:
        notes.append(
            f"--baseline: skipped {len(bad_tests)} test line(s) that do not read "
            f"(the first: {bad_tests[0]})"
        )
    if not medians:
        raise UserError(f"{shown(run_dir)}: no diagnose tests in it")
    stages = {stage: statistics.median(values) for stage, values in medians.items()}
    return Expectations(stages, notes)
