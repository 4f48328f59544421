"""Peer-to-peer copy bandwidth, explained by the topology (`commbench p2p`).

    from commbench.p2p import P2PSettings, dry_run, run_p2p
    dry = dry_run(P2PSettings(dsts=[1, 2, 4]), load_snapshot("snap.json"))  # no GPU needed
    outcome = run_p2p(P2PSettings(), Path("results"))                      # measures

Modules: `settings` (what to measure), `plan` (the steps: sets of copies timed together;
pure), `fabric` (the route of each copy over the machine's links, their rates and typical
efficiencies; pure), `expect` (per copy: peak, ceiling when sharing, typical figure,
diagnosis; pure),
`measure` (torch: streams, start gate, CUDA events, verification), `run` (orchestration,
the rows and the files), `render` (table/md/csv/json), `heatmap` (`--matrix` PNG).

A run directory (`results/<timestamp>-p2p/`) holds:

* `run.json`: `schema_version`, `"kind": "p2p"`, `run_id`, `status` (running, complete,
  failed, interrupted), `failure`, `settings`, `notes`, `steps_total`/`steps_done`,
  `suspicious` (pairs measured above their theoretical peak, when any), and `context`: host,
  versions, `device_names`, and the `topology` snapshot the verdicts used.
* `results.json`: `schema_version`, `rows`: one `commbench.results.schema.ResultRow` per copy
  (op `p2p`, the copy's name as its strategy, stats and `samples_us` in microseconds, the
  bandwidth as busbw) with the copy's `p2p` sub-record (`P2PCopy`); `results.csv`: the flat
  columns below, without samples.
* `p2p-matrix.png` with `--matrix`.

results.csv's columns (see `P2PCopy`): `step` (rows of one step were timed together), `test`
(bandwidth|latency), `mode` (concurrent|sequential), `direction` (uni|bi), `copy`
(p2p|d2d|h2d|d2h|total), `src`/`dst` (int CUDA ordinals; null for pinned host memory, and
`dst` null for a total), `pair` (`0->1`, `host->0`, `0->{1,2,4}`, `0<->1`), `size_bytes`,
`dtype`, `time_ms` (median), `bw_gbps` (GB/s = 1e9 B/s at the median), `peak_gbps`,
`ceiling_gbps`, `expected_gbps`, `efficiency` (bw / peak), `link`, `nvlinks`, `p2p`, `path`,
`suspicious`, `diagnosis`, `check` (ok|failed|skipped), `min_ms`, `q1_ms`, `q3_ms`, `p95_ms`,
`max_ms`, `mean_ms`, `stddev_ms`, `cv`, `n`, `outliers`, `warmup`.

A heatmap of the matrix takes rows with `test == "bandwidth"`, `copy == "p2p"`,
`direction == "uni"` and, preferably, `mode == "sequential"` (each link alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

_NAMES = {
    "DryRun": "commbench.p2p.run",
    "P2POutcome": "commbench.p2p.run",
    "dry_run": "commbench.p2p.run",
    "load_topology": "commbench.p2p.run",
    "run_p2p": "commbench.p2p.run",
    "P2PSettings": "commbench.p2p.settings",
}
"""Loaded on first use (PEP 562): the command line reads `p2p.settings` to build `--help`,
and must not pay for the topology and expectation modules behind `run`."""

if TYPE_CHECKING:
    from commbench.p2p.run import DryRun, P2POutcome, dry_run, load_topology, run_p2p
    from commbench.p2p.settings import P2PSettings


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _NAMES:
        raise AttributeError(f"module 'commbench.p2p' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)


__all__ = [
    "DryRun",
    "P2POutcome",
    "P2PSettings",
    "dry_run",
    "load_topology",
    "run_p2p",
]
