"""How often the regression gate fails a plain repeat: its false-positive rate on this machine.

    python benchmarks/gate_false_positives.py --repeats 10 --out /tmp/gfp
    python benchmarks/gate_false_positives.py --compare-only /tmp/gfp

Runs a suite (`configs/ci.yaml` by default) `--repeats` times, each a separate
`commbench run` under `--out` (`repeat0/`, `repeat1/`, ..., and the load averages in
`loads.json`), then compares every ordered pair of repeats with the suite's own gate (as
`commbench run --baseline` would). `--compare-only DIR` judges the repeats kept in DIR again
without running anything: the same runs under a changed gate. Nothing changed between the
runs, so every failing comparison is a false positive. Prints markdown: the machine's load
average as each repeat ended, one line per pair (exit code, worse / noisy points, the
baseline's noise, the widest between-block spread a point was held to, the largest drop
judged worse) and the rate. benchmarks/gate_power.py measures the gate on links of known
truth (power and false failures, pairwise, with a history and with --confirm). A unit test cannot assert this: it is a property
of the gate on a machine's noise, so it is measured here and recorded with the results.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from commbench.compare import Gate, GateSettings, Mark, mann_whitney_greater
from commbench.results.runs import load_run, load_suite
from commbench.results.schema import ResultRow
from commbench.suites.gate import compare_targets, load_runs, recorded_gate

PLAIN_TOLERANCE = 0.05
PLAIN_ALPHA = 0.01


def plain_gate_fails(base: list[ResultRow], new: list[ResultRow]) -> int:
    """Points the textbook gate fails: busbw down more than 5% and a one-sided Mann-Whitney
    p below 0.01, with none of commbench's noise rules. The contrast the defaults answer."""
    by_key = {r.key: r for r in base if r.samples_us}
    failing = 0
    for n in new:
        b = by_key.get(n.key)
        if b is None or not n.samples_us or not b.time_us or not n.time_us:
            continue
        slower = b.time_us / n.time_us < 1 - PLAIN_TOLERANCE  # busbw ratio, same size
        if slower and mann_whitney_greater(n.samples_us, b.samples_us) < PLAIN_ALPHA:
            failing += 1
    return failing


LOADS = "loads.json"


def run_repeats(config: Path, repeats: int, out: Path) -> tuple[list[Path], list[float]] | int:
    """Run the suite `repeats` times under `out`; the suites and the 1-minute load average as
    each ended (kept in `out/loads.json`), or the exit code of a run that failed."""
    suites: list[Path] = []
    loads: list[float] = []
    for i in range(repeats):
        parent = out / f"repeat{i}"
        cmd = [sys.executable, "-m", "commbench", "run", str(config), "-o", str(parent)]
        done = subprocess.run([*cmd, "--no-plot"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        (suite,) = parent.iterdir()
        suites.append(suite)
        loads.append(os.getloadavg()[0])
        print(f"repeat {i}: {suite}", file=sys.stderr)
    (out / LOADS).write_text(json.dumps(loads) + "\n")
    return suites, loads


def kept_repeats(out: Path) -> tuple[list[Path], list[float] | None]:
    """The suites of an earlier run of this script, in order, and its load averages (None
    when it kept none)."""
    numbered = [p for p in out.glob("repeat*") if p.name.removeprefix("repeat").isdigit()]
    parents = sorted(numbered, key=lambda p: int(p.name.removeprefix("repeat")))
    suites = [suite for parent in parents for suite in sorted(parent.iterdir()) if suite.is_dir()]
    loads = out / LOADS
    return suites, json.loads(loads.read_text()) if loads.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/ci.yaml"))
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("results/gate-false-positives"))
    parser.add_argument(
        "--compare-only",
        type=Path,
        metavar="DIR",
        help="judge the repeats kept in DIR (an earlier --out) again; run nothing",
    )
    args = parser.parse_args(argv)
    loads: list[float] | None
    if args.compare_only:
        suites, loads = kept_repeats(args.compare_only)
        if len(suites) < 2:
            parser.error(f"{args.compare_only}: fewer than 2 kept repeats (repeat*/SUITE)")
    else:
        if args.repeats < 2:
            parser.error("--repeats must be at least 2")
        ran = run_repeats(args.config, args.repeats, args.out)
        if isinstance(ran, int):
            return ran
        suites, loads = ran

    gate = GateSettings(**recorded_gate(suites[0]))
    config = load_suite(suites[0]).record.config_path or args.config
    lines = [
        f"# Gate false positives: {len(suites)} repeats of `{config}`",
        "",
        f"Gate: tolerance {gate.tolerance:.0%} (latency-bound {gate.latency_tolerance:.0%}), "
        "widened to 4 spreads of how far each point's median moves (the baseline's blocks "
        f"of iterations over time); alpha {gate.alpha:g}.",
        "",
        f"{os.cpu_count()} CPUs; 1-minute load average as each repeat ended: "
        + (", ".join(f"{load:.1f}" for load in loads) if loads else "not kept")
        + ".",
        "",
        "| baseline | new | exit | points | worse | noisy "
        "| baseline noise | widest spread | largest drop judged worse "
        "| plain gate: failing points |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    failing = 0
    plain_failing = 0
    rows = [
        {name: load_run(run.path).rows for name, run in load_runs(suite).items()}
        for suite in suites
    ]
    pairs = list(itertools.permutations(range(len(suites)), 2))
    for a, b in pairs:
        results = compare_targets(suites[a], suites[b], gate)
        code = Gate(results).exit_code
        failing += code != 0
        points = sum(len(c.points) for _, c in results)
        worse = sum(len(c.marked(Mark.worse)) for _, c in results)
        noisy = sum(len(c.marked(Mark.noisy)) for _, c in results)
        noise = [c.baseline_noise for _, c in results if c.baseline_noise is not None]
        shown = f"{max(noise):.2f}" if noise else "-"
        spreads = [p.spread for _, c in results for p in c.points if p.spread is not None]
        top = f"{max(spreads):.3f}" if spreads else "-"
        drops = [1 / p.ratio for _, c in results for p in c.marked(Mark.worse) if p.ratio]
        largest = f"{max(drops):.1f}x slower" if drops else "-"
        plain = sum(plain_gate_fails(rows[a][name], rows[b].get(name, [])) for name in rows[a])
        plain_failing += plain > 0
        lines.append(
            f"| {a} | {b} | {code} | {points} | {worse} | {noisy} | {shown} "
            f"| {top} | {largest} | {plain} |"
        )
    lines += [
        "",
        f"**{failing} of {len(pairs)} comparisons failed** with commbench's gate (every one "
        "would be a false positive: nothing changed between the runs); a plain "
        f'"{PLAIN_TOLERANCE:.0%} + Mann-Whitney at {PLAIN_ALPHA}" gate would have failed '
        f"**{plain_failing} of {len(pairs)}**.",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
