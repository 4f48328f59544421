"""How `commbench diagnose` scales: its planner and decision (commbench.diagnose.plan, the
code the workers run) against simulated clusters of 16 to 1024 nodes.

Each test's samples are the slowest member's bandwidth with 5% noise (log-normal), and one
test in 50 is hit by a noisy outlier (a third of its samples at half speed). A bad node runs
at 60% of the others' speed (a link trained down, a sick NIC). Prints the markdown table the
README shows; exit 1 if any bad node was missed or a healthy one flagged.

    python benchmarks/diagnose_scale.py [--seed 1] [--trials 3]
"""

from __future__ import annotations

import argparse
import random
import sys

from commbench.diagnose.plan import Result, Test, drive, for_units

BASE_GBPS = 40.0
BAD_FACTOR = 0.6
NOISE = 0.05
OUTLIER_RATE = 0.02
SAMPLES = 10
TOLERANCE, ALPHA = 0.25, 0.01


def simulate(nodes: int, bad: set[int], rng: random.Random) -> tuple[int, int, set[int]]:
    """(rounds, tests, nodes found degraded) of one diagnosis of a simulated cluster."""
    tests_run = 0

    def measure(tests: list[Test]) -> list[Result]:
        nonlocal tests_run
        tests_run += len(tests)
        out = []
        for test in tests:
            speed = BASE_GBPS * min(BAD_FACTOR if u in bad else 1.0 for u in test.units)
            outlier = rng.random() < OUTLIER_RATE
            samples = []
            for i in range(SAMPLES):
                value = speed * rng.lognormvariate(0, NOISE)
                if outlier and i % 3 == 0:
                    value *= 0.5
                samples.append(value)
            out.append(Result(test, tuple(samples)))
        return out

    iso = drive(for_units(range(nodes), tolerance=TOLERANCE, alpha=ALPHA), measure)
    found = {u for u, f in iso.findings().items() if f.degraded}
    return iso.round, tests_run, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trials", type=int, default=3, help="clusters per row (worst shown)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    print("| nodes | bad | rounds | tests | found | false_positives |")
    print("|---:|---:|---:|---:|---:|---:|")
    ok = True
    for nodes in (16, 64, 256, 1024):
        for nbad in (1, 2, 3):
            rounds = tests = fps = 0
            found_all = 0
            for _ in range(args.trials):
                bad = set(rng.sample(range(nodes), nbad))
                r, t, found = simulate(nodes, bad, rng)
                rounds, tests = max(rounds, r), max(tests, t)
                found_all += len(found & bad)
                fps += len(found - bad)
            total = nbad * args.trials
            ok &= found_all == total and fps == 0
            print(f"| {nodes} | {nbad} | {rounds} | {tests} | {found_all}/{total} | {fps} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
