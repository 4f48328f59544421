"""The diagnosis's planner and decision (commbench.diagnose.plan and .stages), against simulated
measurements: the same code the workers run and the launcher replays."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.diagnose.plan import SMALL, Isolation, Result, Test, drive, for_units, round_robin
from commbench.diagnose.run import DEGRADED, FAILED, HEALTHY, conclude
from commbench.diagnose.settings import DiagnoseSettings
from commbench.diagnose.stages import GPU_PAIRS, INTER, INTRA, Layout, plan_stages
from commbench.results.record import RunStatus

ROOT = Path(__file__).parents[1]


def simulated(speed: dict[int, float], rng: random.Random, noise: float = 0.05):
    """A measure function: a test runs at its slowest unit's speed, with log-normal noise."""

    def measure(tests: list[Test]) -> list[Result]:
        return [
            Result(
                t,
                tuple(
                    40.0 * min(speed.get(u, 1.0) for u in t.units) * rng.lognormvariate(0, noise)
                    for _ in range(10)
                ),
            )
            for t in tests
        ]

    return measure


def degraded(iso: Isolation) -> set[int]:
    return {u for u, f in iso.findings().items() if f.degraded}


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_round_robin_runs_every_pair_once_in_disjoint_rounds(n: int) -> None:
    rounds = round_robin(range(n))
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    for r in rounds:
        used = [u for p in r for u in p]
        assert len(used) == len(set(used))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_few_nodes_name_the_bad_one_at_every_position(n: int) -> None:
    rng = random.Random(n)
    for bad in range(n):
        iso = drive(for_units(range(n), tolerance=0.25, alpha=0.01), simulated({bad: 0.5}, rng))
        assert iso.mode == "pairs"
        assert degraded(iso) == {bad}, (n, bad)


@pytest.mark.parametrize("n", [16, 64])
def test_many_nodes_screen_bisect_and_confirm(n: int) -> None:
    rng = random.Random(n)
    for bad in ({0}, {n - 1}, {2, 3}, {5, 6, n - 2}):  # {2, 3}: both in one screening pair
        iso = drive(
            for_units(range(n), tolerance=0.25, alpha=0.01), simulated(dict.fromkeys(bad, 0.6), rng)
        )
        assert iso.mode == "screen" and degraded(iso) == bad, bad
        assert iso.round <= 5
        for unit in bad:  # convicted by two tests with different healthy partners
            evidence = iso.findings()[unit].evidence
            partners = {f for result, _ in evidence for f in result.test.fillers}
            assert len(evidence) >= 2 and len(partners) >= 2 and not partners & bad


@pytest.mark.parametrize("n", [3, 6, 16, 33])
def test_a_healthy_cluster_is_never_flagged(n: int) -> None:
    for seed in range(10):
        iso = drive(
            for_units(range(n), tolerance=0.25, alpha=0.01),
            simulated({}, random.Random(seed), noise=0.07),
        )
        assert degraded(iso) == set(), seed


def test_a_slightly_slower_node_within_tolerance_is_healthy() -> None:
    iso = drive(
        for_units(range(6), tolerance=0.25, alpha=0.01), simulated({2: 0.85}, random.Random(1))
    )
    assert degraded(iso) == set()


def test_a_noisy_outlier_test_does_not_convict() -> None:
    rng = random.Random(3)
    base = simulated({}, rng)
    hit = {"done": False}

    def measure(tests: list[Test]) -> list[Result]:
        out = base(tests)
        if not hit["done"]:  # the first screening test is hit hard, once
            hit["done"] = True
            out[0] = Result(out[0].test, tuple(s * 0.4 for s in out[0].samples))
        return out

    iso = drive(for_units(range(32), tolerance=0.25, alpha=0.01), measure)
    assert degraded(iso) == set()


def test_an_expectation_given_judges_even_two_nodes() -> None:
    rng = random.Random(0)
    slow = Isolation(range(2), mode="pairs", tolerance=0.25, alpha=0.01, expected=40.0)
    drive(slow, simulated({1: 0.5}, rng))
    assert [r.test.units for r in slow.short_links()] == [(0, 1)]
    fine = Isolation(range(2), mode="pairs", tolerance=0.25, alpha=0.01, expected=40.0)
    drive(fine, simulated({}, rng))
    assert fine.short_links() == []


def layout(nodes: int, gpus: int) -> Layout:
    return Layout(
        hosts=[f"n{i}" for i in range(nodes)],
        ranks=[[i * gpus + g for g in range(gpus)] for i in range(nodes)],
    )


def run_stages(lay: Layout, speed_of_rank: dict[int, float], seed: int = 0) -> list[dict]:
    """Run every stage as the workers do, journalling the events they would write."""
    rng = random.Random(seed)
    events: list[dict] = []
    for stage in plan_stages(lay, DiagnoseSettings(size_bytes=1 << 20)):
        while tests := stage.iso.next_round():
            results = []
            for t in tests:
                ranks = stage.ranks_of(t)
                speed = min(speed_of_rank.get(r, 1.0) for r in ranks)
                samples = tuple(40.0 * speed * rng.lognormvariate(0, 0.05) for _ in range(10))
                results.append(Result(t, samples))
                events.append(
                    {
                        "type": "diagnose",
                        "stage": stage.name,
                        "round": t.round,
                        "probe": list(t.probe),
                        "fillers": list(t.fillers),
                        "ranks": ranks,
                        "samples_gbps": list(samples),
                    }
                )
            stage.iso.record(results)
    return events


def test_stages_inside_and_across_nodes() -> None:
    stages = plan_stages(layout(4, 4), DiagnoseSettings(size_bytes=1 << 20))
    assert [s.name for s in stages] == [INTRA, GPU_PAIRS, INTER]
    assert [s.name for s in plan_stages(layout(3, 1), DiagnoseSettings(size_bytes=1))] == [INTER]
    only = DiagnoseSettings(size_bytes=1, stages=["intra"])
    assert [s.name for s in plan_stages(layout(3, 2), only)] == [INTRA]


def test_the_launcher_replays_the_workers_tests_to_the_same_verdict(tmp_path: Path) -> None:
    lay = layout(4, 4)
    events = run_stages(lay, {9: 0.4})  # node 2's GPU 1 is slow
    diagnosis = conclude(
        lay,
        DiagnoseSettings(size_bytes=1 << 20),
        events,
        status=RunStatus.COMPLETE,
        failed_ranks=[],
        failure=None,
        path=tmp_path,
    )
    verdicts = {n.host: n.verdict for n in diagnosis.nodes}
    assert verdicts == {"n0": HEALTHY, "n1": HEALTHY, "n2": DEGRADED, "n3": HEALTHY}
    assert any(g.unit == "n2 GPU 1" for g in diagnosis.nodes[2].gpus)
    assert diagnosis.exit_code == 1 and diagnosis.verdict == DEGRADED
    assert {s.name for s in diagnosis.stages} == {INTRA, GPU_PAIRS, INTER}
    assert GPU_PAIRS in diagnosis.pair_gbps and INTER in diagnosis.pair_gbps


def test_a_slow_node_link_is_named_across_nodes(tmp_path: Path) -> None:
    lay = layout(5, 1)
    events = run_stages(lay, {3: 0.5})
    diagnosis = conclude(
        lay,
        DiagnoseSettings(size_bytes=1),
        events,
        status=RunStatus.COMPLETE,
        failed_ranks=[],
        failure=None,
        path=tmp_path,
    )
    assert [n.verdict for n in diagnosis.nodes] == [HEALTHY] * 3 + [DEGRADED, HEALTHY]
    assert "n3" in diagnosis.nodes[3].evidence[0] and "expected" in diagnosis.nodes[3].evidence[0]


def test_a_failed_rank_fails_its_node_and_keeps_what_was_measured(tmp_path: Path) -> None:
    lay = layout(4, 1)
    events = run_stages(lay, {})
    partial = events[: len(events) // 2]  # the run died half-way
    diagnosis = conclude(
        lay,
        DiagnoseSettings(size_bytes=1),
        partial,
        status=RunStatus.FAILED,
        failed_ranks=[2],
        failure="rank 2 on n2 is gone",
        path=tmp_path,
    )
    assert [n.verdict for n in diagnosis.nodes] == [HEALTHY, HEALTHY, FAILED, HEALTHY]
    assert diagnosis.verdict == FAILED and diagnosis.exit_code == 1
    assert diagnosis.stages[0].tests > 0
    assert diagnosis.to_dict()["nodes"][2]["evidence"][0].startswith("rank 2 failed")


@pytest.mark.integration
def test_the_scale_benchmark_meets_its_goal() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "diagnose_scale.py"), "--trials", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "| nodes | bad | rounds | tests | found | false_positives |"
    for line in lines[2:]:
        nodes, bad, rounds, tests, found, fps = (c.strip() for c in line.strip("|").split("|"))
        assert int(rounds) <= 20 and found == f"{bad}/{bad}" and fps == "0"
        assert int(tests) < 2 * int(nodes)  # all pairs would take nodes * (nodes - 1) / 2
    assert any(line.startswith("| 1024 |") for line in lines)
    assert SMALL < 16  # the table's rows all exercise screen mode
