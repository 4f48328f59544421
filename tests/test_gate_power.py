"""benchmarks/gate_power.py's `evaluate` runs on a small pool made here (the fixture run's rows
rescaled to each condition's known speed) and prints its tables, without writing anything: so the
script cannot rot while the gate changes under it. It starts no process (its `collect` phase,
which does, is run by hand; see the script's docstring)."""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from commbench.results.runs import load_run
from tests.factories import rescaled, write_run

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "runs" / "cpu-gloo-a"
SPEEDS = {"shaped-95": 0.95, "shaped-90": 0.90, "shaped-75": 0.75, "loop-2x": 0.5}
"""Each slower condition's busbw over its base's; the rest run at 1."""


def _gate_power() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gate_power", ROOT / "benchmarks" / "gate_power.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gate_power"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gp() -> ModuleType:
    return _gate_power()


def _pool(gp: ModuleType, pool: Path, runs: dict[str, int]) -> None:
    """`runs[condition]` runs of each condition, each point 1% apart from run to run."""
    fixture = load_run(FIXTURE)
    rng = random.Random(7)
    manifest = gp.Manifest(command=["commbench", "collectives"], commit="0" * 40)
    for name, count in runs.items():
        for i in range(count):
            rows = [rescaled(r, SPEEDS.get(name, 1.0) * rng.gauss(1, 0.01)) for r in fixture.rows]
            path = write_run(pool / "runs" / name / f"{i:03d}" / "run", rows, fixture.record)
            manifest.runs.append(
                gp.PoolRun(
                    condition=name,
                    index=i,
                    path=str(path.relative_to(pool)),
                    started=1.0e9 + i,
                    seconds=15.0,
                    load_before=[1.0, 1.0, 1.0],
                    load_after=[1.0, 1.0, 1.0],
                    setting="made by tests/test_gate_power.py",
                )
            )
    manifest.write(pool)


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(path)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(path.rglob("*"))
    }


def test_evaluate_prints_every_detector_on_a_small_pool_and_writes_nothing(
    gp: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = {name: 4 for name in gp.CONDITIONS} | {"shaped-base": 12, "loop-base": 7}
    _pool(gp, tmp_path, runs)
    before = _tree(tmp_path)
    argv = ["evaluate", "--pool", str(tmp_path), "--pairs", "3", "--trials", "2", "--series", "12"]
    assert gp.main(argv) == 0
    out = capsys.readouterr().out
    assert _tree(tmp_path) == before
    for pairing in gp.PAIRINGS:
        assert f"| pairwise gate | {pairing.label} |" in out
        assert f"| gate + 5-run history | {pairing.label} |" in out
    # what each detector decides is the gate's business (benchmarks measure it, tests don't);
    # that every one of them was asked is this script's
    assert "| pairwise gate | shaped -25% | A/B (power) | 3 | " in out
    assert "| shaped-75 | 4 | 0 |" in out
    for step in ("-10%", "-25%"):
        assert f"| {step} | 2 | " in out  # two 12-run series per point
    assert "| none | 2 | " in out


def test_pairs_are_distinct_and_an_aa_pair_is_two_runs(gp: ModuleType) -> None:
    runs = [
        gp.PoolRun(
            condition="shaped-base",
            index=i,
            path=f"r{i}",
            started=0.0,
            seconds=1.0,
            load_before=[0.0] * 3,
            load_after=[0.0] * 3,
            setting="",
        )
        for i in range(4)
    ]
    pairs = gp.draw_pairs(random.Random(1), runs, runs, 50, True)
    assert len(pairs) == 6  # all 4-choose-2 of them: no more exist
    assert all(a is not b for a, b in pairs)
    assert len({frozenset((a.path, b.path)) for a, b in pairs}) == 6


def test_the_collection_interleaves_every_condition(gp: ModuleType) -> None:
    order = gp.schedule(set())
    assert len(order) == sum(c.runs for c in gp.CONDITIONS.values())
    first_round = {name for name, _ in order[: len(gp.ROUND)]}
    assert first_round == set(gp.CONDITIONS)
    # a condition added to a pool half made is spread over the rest, not run back to back
    done = {(n, i) for n, c in gp.CONDITIONS.items() for i in range(c.runs // 2)}
    rest = gp.schedule({d for d in done if d[0] != "shaped-netem"})
    netem = [i for i, (name, _) in enumerate(rest) if name == "shaped-netem"]
    assert max(b - a for a, b in itertools.pairwise(netem)) <= len(gp.ROUND)
