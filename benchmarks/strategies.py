"""Benchmark the all-reduce strategies and set them beside the model, repeated to show noise.

    python benchmarks/strategies.py --out results/reference/cpu-gloo-w4-strategies

Runs `commbench collectives --ops all_reduce --strategies all` `--repeats` times (each a
separate torchrun launch, so the spread includes run-to-run variation, not just
iteration-to-iteration), then prints in markdown: the first run's comparison with the
model fitted to its direct rows, the spread of each point's median across runs, and the
model fitted to all runs' direct rows, predicting 8, 64 and 1024 ranks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import STRATEGIES
from commbench.launch.launcher import run_collectives
from commbench.results.exporters import Format
from commbench.results.record import RunStatus
from commbench.results.schema import ResultRow
from commbench.sizes import format_size, parse_sizes
from commbench.strategies.model import fit, predict
from commbench.strategies.report import render_comparison, render_predictions


def spread_table(runs: list[list[ResultRow]]) -> list[str]:
    """Per point: median of the runs' medians, and max/min across runs."""
    medians: dict[tuple[str, int], list[float]] = {}
    for rows in runs:
        for r in rows:
            medians.setdefault((r.strategy or "(all_reduce)", r.size_bytes), []).append(r.time_us)
    sizes = sorted({size for _, size in medians})
    names = [s for s in ("(all_reduce)", *STRATEGIES) if any(k[0] == s for k in medians)]
    out = [
        "| size | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for size in sizes:
        cells = []
        for name in names:
            values = medians.get((name, size), [])
            if not values:
                cells.append("-")
                continue
            cells.append(f"{statistics.median(values):.0f} ({max(values) / min(values):.1f}x)")
        out.append(f"| {format_size(size)} | " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--sizes", default="1K-4M")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.2)
    args = parser.parse_args(argv)
    settings = CollectivesSettings(
        ops=["all_reduce"],
        strategies=list(STRATEGIES),
        sizes=parse_sizes(args.sizes),
        nproc=args.nproc,
        backend="gloo",
        device="cpu",
        min_time=args.min_time,
    )
    runs: list[list[ResultRow]] = []
    for i in range(args.repeats):
        outcome = run_collectives(settings, args.out)
        print(f"run {i + 1}/{args.repeats}: {outcome.status} in {outcome.run_dir}", file=sys.stderr)
        if outcome.status != RunStatus.COMPLETE:
            print(f"failed: {outcome.failure}", file=sys.stderr)
            return 1
        runs.append(outcome.rows)
    print("## First run: measured vs model (fitted to this run's direct rows)\n")
    print(render_comparison(runs[0], Format.md, backend="gloo"))
    print("## Run-to-run spread: median of run medians in us (max/min across runs)\n")
    print("\n".join(spread_table(runs)) + "\n")
    pooled = fit([r for rows in runs for r in rows], backend="gloo")
    print("## Model fitted to every run's direct rows, at scale\n")
    worlds = [args.nproc, 8, 64, 1024]
    sizes = parse_sizes("1K,64K,1M,64M,1G")
    print(
        render_predictions(predict(pooled.params, worlds, sizes), pooled.params, Format.md, pooled)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
