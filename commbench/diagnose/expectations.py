"""What a diagnosis expects of each stage when the peers' median should not decide: an
expectations file, or an earlier diagnose run of a cluster known to be good."""

from __future__ import annotations

import statistics
from pathlib import Path

from commbench.diagnose.stages import GPU_PAIRS, INTER, INTRA
from commbench.errors import UserError
from commbench.files import load_json, path_kind, read_text, shown

STAGE_NAMES = (INTRA, GPU_PAIRS, INTER)


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
    import json

    events = run_dir / "events.jsonl"
    if path_kind(events, "events.jsonl") != "file":
        raise UserError(f"{shown(run_dir)}: not a diagnose run directory (no events.jsonl)")
    medians: dict[str, list[float]] = {}
    for line in read_text(events, "events.jsonl").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("type") == "diagnose":
            samples = [float(x) for x in e.get("samples_gbps", []) if isinstance(x, int | float)]
            if samples:
                medians.setdefault(str(e.get("stage")), []).append(statistics.median(samples))
    if not medians:
        raise UserError(f"{shown(run_dir)}: no diagnose tests in it")
    return {stage: statistics.median(values) for stage, values in medians.items()}
