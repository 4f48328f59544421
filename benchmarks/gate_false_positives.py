"""How often the regression gate fails a plain repeat: its false-positive rate on this machine.

    python benchmarks/gate_false_positives.py --repeats 4 --out results/reference/gate-false-positives-cpu

Runs a suite (`configs/ci.yaml` by default) `--repeats` times, each a separate
`commbench run`, then compares every ordered pair of repeats with the suite's own gate (as
`commbench run --baseline` would). Nothing changed between the runs, so every failing
comparison is a false positive. Prints markdown: the machine's load average as each repeat
ended, one line per pair (exit code, worse / noisy points, the baseline's noise and the top
of its noise band, the largest drop judged worse) and the rate. A unit test cannot assert
this: it is a property of the gate on a machine's noise, so it is measured here and
recorded with the results.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from pathlib import Path

from commbench.compare import Gate, GateSettings, Mark, mann_whitney_greater
from commbench.results.runs import load_run
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("configs/ci.yaml"))
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("results/gate-false-positives"))
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error("--repeats must be at least 2")

    suites: list[Path] = []
    loads: list[float] = []
    for i in range(args.repeats):
        parent = args.out / f"repeat{i}"
        cmd = [sys.executable, "-m", "commbench", "run", str(args.config), "-o", str(parent)]
        done = subprocess.run([*cmd, "--no-plot"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        (suite,) = parent.iterdir()
        suites.append(suite)
        loads.append(os.getloadavg()[0])
        print(f"repeat {i}: {suite}", file=sys.stderr)

    gate = GateSettings(**recorded_gate(suites[0]))
    lines = [
        f"# Gate false positives: {args.repeats} repeats of `{args.config}`",
        "",
        f"Gate: tolerance {gate.tolerance:.0%} (latency-bound {gate.latency_tolerance:.0%}), "
        "widened to the baseline's noise floor and noise bands (5th to 95th percentile of "
        f"its iteration times over their medians); alpha {gate.alpha:g}.",
        "",
        f"{os.cpu_count()} CPUs; 1-minute load average as each repeat ended: "
        + ", ".join(f"{load:.1f}" for load in loads)
        + ".",
        "",
        "| baseline | new | exit | points | worse | noisy | baseline noise | band top "
        "| largest drop judged worse | plain gate: failing points |",
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
        tops = [c.baseline_band.high for _, c in results if c.baseline_band is not None]
        top = f"{max(tops):.1f}x" if tops else "-"
        drops = [1 / p.ratio for _, c in results for p in c.marked(Mark.worse) if p.ratio]
        largest = f"{max(drops):.1f}x slower" if drops else "-"
        plain = sum(plain_gate_fails(rows[a][name], rows[b].get(name, [])) for name in rows[a])
        plain_failing += plain > 0
        lines.append(
            f"| {a} | {b} | {code} | {points} | {worse} | {noisy} | {shown} | {top} "
            f"| {largest} | {plain} |"
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
