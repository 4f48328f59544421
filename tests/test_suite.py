"""Suites: YAML validation, the runner (with a stand-in launcher), and one real suite run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import RunFailed, UserError
from commbench.launch.launcher import Outcome
from commbench.results.record import RunRecord, RunStatus
from commbench.results.runs import load_run
from commbench.results.schema import SCHEMA_VERSION, ResultRow
from commbench.results.store import SuiteDir, new_run_dir
from commbench.suites.config import load_suite, parse_suite
from commbench.suites.gate import compare_targets, load_runs
from tests.factories import rescaled, write_meta, write_run

CONFIGS = Path(__file__).parent.parent / "configs"
GOLDEN = Path(__file__).parent / "fixtures" / "runs" / "h100x8-golden"


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["quick", "full", "ci"])
def test_shipped_suites_are_valid(name: str) -> None:
    suite = load_suite(CONFIGS / f"{name}.yaml")
    assert suite.name == name and suite.collectives is not None
    assert suite.collectives.sizes.for_device("cpu")


def test_ci_suite_is_a_gate() -> None:
    suite = load_suite(CONFIGS / "ci.yaml")
    assert suite.gate.tolerance == 0.05 and suite.gate.latency_tolerance == 0.15
    assert suite.collectives is not None and suite.collectives.timing.min_iters >= 20
    assert suite.collectives.sizes.for_device("cuda")[-1] == 1 << 30


def test_full_suite_sweeps_1k_to_1g() -> None:
    suite = load_suite(CONFIGS / "full.yaml")
    assert suite.collectives is not None and suite.strategies is not None and suite.p2p
    sizes = suite.collectives.sizes.for_device("cuda")
    assert (sizes[0], sizes[-1], len(sizes)) == (1024, 1 << 30, 21)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"collectives": {"sizez": "1K"}}, "collectives.sizez: unknown key"),
        (
            {"collectives": {"ops": ["all_reduce", "allreduce"]}},
            r"collectives.ops\[1\]: unknown op",
        ),
        (
            {"collectives": {"min_time": "fast"}},
            "collectives.min_time: expected a number, got a string",
        ),
        ({"collectives": {"iters": 2.5}}, "collectives.iters: expected an integer"),
        (
            {"collectives": {"in_place": "yes please"}},
            "collectives.in_place: expected true, false or both",
        ),
        ({"collectives": {"sizes": "1K-"}}, "collectives.sizes: malformed size"),
        ({"collectives": {"sizes": {"cuda": "1K"}}}, "collectives.sizes.cpu: missing"),
        (
            {"collectives": {"dtypes": ["float32", 8]}},
            r"collectives.dtypes\[1\]: expected a string",
        ),
        (
            {"collectives": {"min_iters": 50, "max_iters": 10}},
            "collectives.min_iters: must not exceed",
        ),
        ({"collectives": [1, 2]}, "collectives: expected a mapping, got a list"),
        (
            {"collectives": True, "compare": {"tolerance": "150%"}},
            "compare.tolerance: must be between",
        ),
        ({"collectives": True, "compare": {"tolerance": 5}}, "compare.tolerance: .*ambiguous"),
        ({"collectives": True, "world_size": 0}, "world_size: must be at least 1"),
        ({"collectives": True, "backend": "mpi"}, "backend: expected one of nccl, gloo"),
        ({"collectives": True, "colectives": {}}, "colectives: unknown key"),
        ({"p2p": {"pairs": [[0, 1], [1]]}}, r"p2p.pairs\[1\]: expected \[src, dst\]"),
        ({"topo": False}, "nothing to run"),
        ([1, 2], r"\(top level\): expected a mapping"),
        ({"schema_version": 9, "topo": True}, "schema_version: 9 is newer"),
        ({"collectives": {"min_time": float("nan")}}, "collectives.min_time: must be positive"),
        (
            {"collectives": {"iters": 5, "min_time": 1}},
            "collectives.min_time: iters and min_time both given",
        ),
        ({"name": "../../etc", "topo": True}, "name: '../../etc' is not a plain name"),
    ],
)
def test_bad_suites_name_the_key(data: Any, message: str) -> None:
    with pytest.raises(UserError, match=f"^s.yaml: {message}"):
        parse_suite(data, "s.yaml")


def test_a_section_set_to_true_takes_its_defaults() -> None:
    suite = parse_suite({"collectives": True}, "s.yaml")
    assert suite.collectives is not None and suite.collectives.ops[0] == "all_reduce"
    assert suite.name == "s" and suite.strategies is None


def test_a_suite_measures_both_forms_when_asked() -> None:
    from commbench.suites.runner import Machine, plan_runs

    suite = parse_suite({"collectives": {"in_place": "both", "dtypes": ["float32"]}}, "s.yaml")
    assert suite.collectives is not None and suite.collectives.in_place == "both"
    (planned,) = plan_runs(suite, Machine(device="cpu", nproc=2, backend="gloo"))
    assert planned.settings.in_place == "both"
    plain = parse_suite({"collectives": {"in_place": True}}, "s.yaml")
    (planned,) = plan_runs(plain, Machine(device="cpu", nproc=2, backend="gloo"))
    assert planned.settings.in_place == "yes"


def test_a_suite_machine_holds_its_launch_and_gives_each_entry_its_own() -> None:
    """`Machine` holds the `LaunchOptions` it was resolved with, not copies of their fields;
    an entry of a multi-node suite meets at a rendezvous id of its own."""
    from dataclasses import fields

    from commbench.launch.launcher import LaunchOptions
    from commbench.suites.runner import Machine

    assert [f.name for f in fields(Machine)] == ["device", "nproc", "backend", "launch"]
    nodes = LaunchOptions(nnodes=2, node_rank=1, rdzv_endpoint="head:29400", rdzv_id="s")
    machine = Machine(device="cpu", nproc=2, backend="gloo", launch=nodes)
    entry = machine.entry_launch("collectives-float32")
    assert (entry.nnodes, entry.node_rank, entry.rdzv_endpoint) == (2, 1, "head:29400")
    assert (entry.rdzv_id, entry.source) == ("s-collectives-float32", "flags")
    single = Machine(device="cpu", nproc=2, backend="gloo", launch=LaunchOptions(debug=True))
    assert single.entry_launch("x") == LaunchOptions(debug=True)


def test_run_refuses_bad_yaml_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("collectives:\n  ops: [all_reduce\n")
    result = CliRunner().invoke(app, ["run", str(bad)])
    assert result.exit_code == 2 and "not valid YAML (line" in result.stderr
    bad.write_text("collectives:\n  warmpu: 3\n")
    result = CliRunner().invoke(app, ["run", str(bad)])
    assert result.exit_code == 2 and "collectives.warmpu: unknown key" in result.stderr
    assert CliRunner().invoke(app, ["run", str(tmp_path / "none.yaml")]).exit_code == 2
    bad.write_bytes(b"\xff\xfe")
    result = CliRunner().invoke(app, ["run", str(bad)])
    assert result.exit_code == 2 and "bad.yaml: not a suite file: not UTF-8" in result.stderr


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    evil = tmp_path / "evil.yaml"
    evil.write_text("collectives: !!python/object/apply:os.system ['echo hi']\n")
    result = CliRunner().invoke(app, ["run", str(evil)])
    assert result.exit_code == 2 and "not valid YAML" in result.stderr


# -- the runner, with a stand-in for torchrun --------------------------------------------------


class FakeLauncher:
    """Writes golden rows (scaled by `speed`) where run_collectives would measure them."""

    def __init__(
        self, speed: float = 1.0, elsewhere_dtypes: tuple[str, ...] = (), stop_after: int = 0
    ) -> None:
        self.speed = speed
        self.calls: list[Any] = []
        self.elsewhere_dtypes = elsewhere_dtypes
        """Runs whose global rank 0 is on another node: no rows here, as on a real node."""
        self.stop_after = stop_after
        """The run of this number is complete, but a SIGTERM came while it was wound up."""

    def __call__(self, settings: Any, out_parent: Path, **kw: Any) -> Outcome:
        self.calls.append(settings)
        golden = load_run(GOLDEN)
        if settings.strategies:
            wanted = [r for r in golden.rows if r.strategy in settings.strategies]
        else:
            wanted = [r for r in golden.rows if r.op in settings.ops and not r.strategy]
        rows = [self.scaled(r) for r in wanted]
        held = settings.dtype not in self.elsewhere_dtypes
        rows = rows if held else []
        run_dir = new_run_dir(out_parent, kw.get("name") or "collectives")
        meta = {
            "kind": "collectives",
            "run_id": run_dir.name,
            "status": "complete",
            "settings": settings.to_dict(),
            "context": golden.context.to_dict(),
            "points_total": len(rows),
            "points_done": len(rows),
            "holds_results": held,
        }
        record = RunRecord.from_dict({"schema_version": SCHEMA_VERSION, **meta}, "test")
        write_run(run_dir, rows, record)
        return Outcome(
            run_dir=run_dir,
            status=RunStatus.COMPLETE,
            rows=rows,
            points_total=len(rows),
            record=record,
            stop_requested=len(self.calls) == self.stop_after,
        )

    def scaled(self, r: ResultRow) -> ResultRow:
        return r if self.speed == 1.0 else rescaled(r, self.speed)


def p2p_row(src: int, dst: int, ms: float) -> dict[str, Any]:
    """A stored P2PRow (commbench.p2p.schema) for one sequential copy of 64 MiB."""
    samples = [ms * f for f in (0.99, 1.0, 1.01, 1.0, 0.995, 1.005, 1.0, 0.998)]
    size = 64 << 20
    return {
        "step": src,
        "test": "bandwidth",
        "mode": "sequential",
        "direction": "uni",
        "copy": "p2p",
        "src": src,
        "dst": dst,
        "pair": f"{src}->{dst}",
        "size_bytes": size,
        "dtype": "float32",
        "time_ms": ms,
        "bw_gbps": size / (ms * 1e-3) / 1e9,
        "peak_gbps": 450.0,
        "ceiling_gbps": 450.0,
        "expected_gbps": 380.0,
        "efficiency": 0.2,
        "link": "NV18",
        "nvlinks": 18,
        "p2p": True,
        "path": "nvlink",
        "suspicious": False,
        "diagnosis": "",
        "check": "ok",
        "min_ms": min(samples),
        "q1_ms": ms,
        "q3_ms": ms,
        "p95_ms": max(samples),
        "max_ms": max(samples),
        "mean_ms": ms,
        "stddev_ms": 0.005 * ms,
        "cv": 0.005,
        "n": len(samples),
        "outliers": 0,
        "warmup": 5,
        "samples_ms": samples,
    }


class FakeP2P:
    """Stands in for commbench.p2p.run_p2p: writes a p2p run directory as it would."""

    def __init__(self, ms: float = 1.0) -> None:
        self.ms = ms
        self.options: list[Any] = []

    def __call__(self, options: Any, out_parent: Path) -> Any:
        from commbench.p2p import P2POutcome
        from commbench.results.record import RunKind, RunRecord, RunStatus

        self.options.append(options)
        run_dir = new_run_dir(out_parent, "p2p")
        context = {
            "device": "cuda",
            "device_names": ["NVIDIA H100 80GB HBM3"] * 2,
            "device_count": 2,
        }
        write_meta(run_dir, {"kind": "p2p", "status": "complete", "context": context})
        rows = [p2p_row(0, 1, self.ms), p2p_row(1, 0, self.ms * 1.1)]
        payload = {"schema_version": 1, "kind": "p2p", "rows": rows}
        (run_dir / "results.json").write_text(json.dumps(payload))
        record = RunRecord(kind=RunKind.P2P, status=RunStatus.COMPLETE)
        return P2POutcome(run_dir=run_dir, status=RunStatus.COMPLETE, rows=[], record=record)


SUITE = """
name: unit
collectives:
  ops: [all_reduce, all_gather]
  sizes: {cuda: 1K-1G:x4, cpu: 1K-64K}
  dtypes: [float32, bfloat16]
strategies:
  names: [direct, ring]
  sizes: 1M
p2p:
  pairs: [[0, 1]]
"""


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "unit.yaml"
    path.write_text(SUITE)
    return path


def run_suite_cli(
    monkeypatch: pytest.MonkeyPatch, launcher: FakeLauncher, *args: str, p2p: FakeP2P | None = None
) -> Any:
    monkeypatch.setattr("commbench.launch.launcher.run_collectives", launcher)
    # the suite preflights every run before it starts; this machine has no GPU to probe
    monkeypatch.setattr("commbench.launch.launcher.preflight", lambda *_, **__: {})
    monkeypatch.setattr("commbench.p2p.run_p2p", p2p or FakeP2P())
    return CliRunner().invoke(app, ["run", *args, "--device", "cuda", "--nproc", "8", "--no-plot"])


def test_suite_runs_every_section_into_one_directory(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = FakeLauncher()
    result = run_suite_cli(monkeypatch, launcher, str(suite_file), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    # what was measured is on stdout, a table per run, as `commbench collectives` prints it
    for name in ("collectives-float32", "collectives-bfloat16", "strategies-float32"):
        assert f"=== {name} (complete) ===" in result.stdout
    assert "# all_reduce  float32  op=sum  8 ranks" in result.stdout
    assert "# Bus bandwidth: peak, and average over the bandwidth-bound sizes" in result.stdout
    # the suite's progress: entry i of n, as each starts
    started = [ln for ln in result.stderr.splitlines() if ln.endswith(": measuring")]
    assert started == [
        "commbench: [1/4] collectives-float32: measuring",
        "commbench: [2/4] collectives-bfloat16: measuring",
        "commbench: [3/4] strategies-float32: measuring",
        "commbench: [4/4] p2p: measuring",
    ]
    (suite_dir,) = (tmp_path / "out").iterdir()
    record = SuiteDir(suite_dir).read_record()
    # each run's directory is named after its entry, and the suite records the path
    for entry in record.entries:
        if entry.section in ("collectives", "strategies"):
            assert entry.path is not None and entry.path.endswith(f"-{entry.name}"), entry.path
    assert [(e.name, e.status) for e in record.entries] == [
        ("collectives-float32", "complete"),
        ("collectives-bfloat16", "complete"),
        ("strategies-float32", "complete"),
        ("p2p", "complete"),
    ]
    assert record.status == "complete" and record.machine["backend"] == "nccl"
    first, second, strategies = launcher.calls
    assert (first.dtype, second.dtype, first.placement.nproc, first.placement.device) == (
        "float32",
        "bfloat16",
        8,
        "cuda",
    )
    assert first.sizes[-1] == 1 << 30 and first.ops == ["all_reduce", "all_gather"]
    assert (strategies.ops, strategies.strategies, strategies.sizes) == (
        [],
        ["direct", "ring"],
        [1 << 20],
    )
    runs = load_runs(suite_dir)
    assert sorted(runs) == [
        "collectives-bfloat16",
        "collectives-float32",
        "p2p",
        "strategies-float32",
    ]
    assert [r.strategy for r in runs["p2p"].rows] == [
        "0->1 p2p uni sequential",
        "1->0 p2p uni sequential",
    ]


def test_a_stop_held_while_a_run_was_wound_up_still_stops_the_suite(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI job cancelled as an entry finished: that entry is whole, nothing more runs."""
    launcher = FakeLauncher(stop_after=1)
    result = run_suite_cli(monkeypatch, launcher, str(suite_file), "-o", str(tmp_path / "out"))
    assert result.exit_code == 130, result.output
    assert len(launcher.calls) == 1
    (suite_dir,) = (tmp_path / "out").iterdir()
    record = SuiteDir(suite_dir).read_record()
    assert [(e.name, e.status) for e in record.entries] == [("collectives-float32", "complete")]
    assert record.status == "interrupted"


def test_a_stop_held_while_a_failed_run_was_wound_up_still_stops_the_suite(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []

    def failing(settings: Any, out_parent: Path, **_: Any) -> Outcome:
        calls.append(settings)
        raise RunFailed("complete; and cannot write results.json", stop_requested=True)

    result = run_suite_cli(monkeypatch, failing, str(suite_file), "-o", str(tmp_path / "out"))
    assert result.exit_code == 130, result.output
    assert len(calls) == 1
    (suite_dir,) = (tmp_path / "out").iterdir()
    record = SuiteDir(suite_dir).read_record()
    assert [(e.name, e.status) for e in record.entries] == [("collectives-float32", "failed")]


def test_suite_with_baseline_exits_like_compare(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / "base"))
    (baseline,) = (tmp_path / "base").iterdir()

    same = run_suite_cli(
        monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / "a"), "-b", str(baseline)
    )
    assert same.exit_code == 0, same.output
    assert same.stdout.count("PASS: no regression") == 4

    slow = run_suite_cli(
        monkeypatch,
        FakeLauncher(speed=0.8),
        str(suite_file),
        "-o",
        str(tmp_path / "b"),
        "-b",
        str(baseline),
    )
    assert slow.exit_code == 1 and "REGRESSION" in slow.stdout
    (new_dir,) = (tmp_path / "b").iterdir()
    gate = json.loads((new_dir / "comparison.json").read_text())
    assert set(gate["entries"]) == {
        "collectives-float32",
        "collectives-bfloat16",
        "strategies-float32",
        "p2p",
    }
    assert "❌" in (new_dir / "comparison.md").read_text()
    assert SuiteDir(new_dir).read_record().exit_code == 1

    # The same suite directories compare with `commbench compare` too.
    again = CliRunner().invoke(app, ["compare", str(baseline), str(new_dir), "-f", "json"])
    assert again.exit_code == 1 and set(json.loads(again.stdout)) == set(gate["entries"])


def test_an_entry_missing_from_the_new_suite_is_a_regression(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / "base"))
    (baseline,) = (tmp_path / "base").iterdir()
    fewer = tmp_path / "fewer.yaml"
    fewer.write_text(SUITE.replace("dtypes: [float32, bfloat16]", "dtypes: [float32]"))
    result = run_suite_cli(
        monkeypatch, FakeLauncher(), str(fewer), "-o", str(tmp_path / "n"), "-b", str(baseline)
    )
    assert result.exit_code == 1
    assert "=== collectives-bfloat16 ===" in result.stdout and "! MISSING" in result.stdout


def test_a_bad_baseline_is_refused_before_measuring(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = FakeLauncher()
    result = run_suite_cli(
        monkeypatch, launcher, str(suite_file), "-o", str(tmp_path), "-b", str(tmp_path / "x")
    )
    assert result.exit_code == 2 and launcher.calls == []


def test_an_incomparable_baseline_exits_2(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / "base"))
    (baseline,) = (tmp_path / "base").iterdir()
    for run_dir in baseline.glob("*-collectives*"):
        meta = json.loads((run_dir / "run.json").read_text())
        context = meta["context"]
        context.update(world_size=4, group_size=4, ranks=context["ranks"][:4])
        (run_dir / "run.json").write_text(json.dumps(meta))
    launcher = FakeLauncher()
    result = run_suite_cli(
        monkeypatch, launcher, str(suite_file), "-o", str(tmp_path / "n"), "-b", str(baseline)
    )
    assert result.exit_code == 2 and "world size differs" in result.stderr
    assert launcher.calls == [], "refused before measuring anything"
    assert not (tmp_path / "n").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc", "0"], "--nproc must be >= 1, got 0"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--backend", "mpi", "--device", "cpu"], "unknown backend 'mpi'"),
    ],
)
def test_bad_run_flags_are_refused_before_anything_runs(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    launcher = FakeLauncher()
    monkeypatch.setattr("commbench.launch.launcher.run_collectives", launcher)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(suite_file), "-o", str(out), *args])
    assert result.exit_code == 2 and message in result.stderr
    assert launcher.calls == [] and not out.exists()


def test_compare_of_two_suites_judges_with_the_suites_own_tolerances(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compare A B` of suites must reach the verdict `run --baseline A` reached for B."""
    suite_file.write_text(SUITE + "compare:\n  tolerance: 12%\n  latency_tolerance: 30%\n")
    for name in ("a", "b"):
        run_suite_cli(monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / name))
    a, b = (next((tmp_path / name).iterdir()) for name in ("a", "b"))
    result = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "tolerance 12% (latency-bound 30%)" in result.stdout
    flagged = CliRunner().invoke(app, ["compare", str(a), str(b), "-t", "3%"])
    assert "tolerance 3% (latency-bound 30%)" in flagged.stdout  # a flag still wins
    runs = CliRunner().invoke(
        app, ["compare", str(load_runs(a)["p2p"].path), str(load_runs(b)["p2p"].path)]
    )
    assert "tolerance 5% (latency-bound 15%)" in runs.stdout  # plain runs: the defaults


def test_a_node_gates_only_the_runs_it_holds(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a multi-node suite, global rank 0 (and so the rows) may land on either node, entry
    by entry: a node must not fail the job for the entries the other node holds and gates."""
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / "base"))
    (baseline,) = (tmp_path / "base").iterdir()
    here = FakeLauncher(elsewhere_dtypes=("bfloat16",))
    result = run_suite_cli(
        monkeypatch, here, str(suite_file), "-o", str(tmp_path / "n"), "-b", str(baseline)
    )
    assert result.exit_code == 0, result.output
    assert "collectives-bfloat16: gated on the node that ran global rank 0" in result.stderr
    (new_dir,) = (tmp_path / "n").iterdir()
    gated = json.loads((new_dir / "comparison.json").read_text())["entries"]
    assert "collectives-bfloat16" not in gated and "collectives-float32" in gated
    # what this node holds is still gated: a slow float32 run fails here
    slow = FakeLauncher(speed=0.5, elsewhere_dtypes=("bfloat16",))
    result = run_suite_cli(
        monkeypatch, slow, str(suite_file), "-o", str(tmp_path / "s"), "-b", str(baseline)
    )
    assert result.exit_code == 1


def test_compare_run_against_its_suite_entry(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / "s"))
    (suite_dir,) = (tmp_path / "s").iterdir()
    runs = load_runs(suite_dir)
    one = runs["strategies-float32"].path
    ((name, comparison),) = compare_targets(one, suite_dir)
    assert name == "strategies-float32" and comparison.exit_code == 0


def test_topology_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Snapshot:
        gpus: tuple[Any, ...] = ()
        nvml_error = "NVML: library not found"

        def to_dict(self) -> dict[str, Any]:
            return {"schema_version": 1, "gpus": [], "nvml_error": "NVML: library not found"}

    monkeypatch.setattr("commbench.topology.discover", lambda: Snapshot(), raising=False)
    path = tmp_path / "topo.yaml"
    path.write_text("topo: true\n")
    result = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    (suite_dir,) = (tmp_path / "out").iterdir()
    assert json.loads((suite_dir / "topology.json").read_text())["nvml_error"].startswith("NVML")
    assert SuiteDir(suite_dir).read_record().topology_file == "topology.json"


# -- for real ----------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_real_suite_and_its_repeat_go_through_the_gate(tmp_path: Path) -> None:
    """The whole path, for real: run, plot, run again against it, gate, write the verdict.

    The suite's gate only fails a 90% drop here: whether the *default* gate passes a repeat
    on a noisy machine is a statistical property, measured by
    benchmarks/gate_false_positives.py, not a fact one pair of runs can assert.
    """
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "name: tiny\ncollectives:\n  ops: [all_reduce]\n  sizes: 4K,256K\n  min_time: 0.05\n"
        "compare:\n  tolerance: 90%\n  latency_tolerance: 90%\n"
    )
    first = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    (base,) = (tmp_path / "a").iterdir()
    run_dir = load_runs(base)["collectives-float32"].path
    assert (run_dir / "plots" / "all_reduce.png").is_file()
    assert run_dir.parent == base and run_dir.name.endswith("-collectives-float32")
    # entry 1 of 1, then its points one line each, in order, as they were measured
    err = first.stderr.splitlines()
    start = err.index("commbench: [1/1] collectives-float32: measuring")
    points = [ln for ln in err[start:] if ln.startswith("commbench: [") and "all_reduce" in ln]
    assert [ln.split()[1] for ln in points] == ["[1/2", "[2/2"]
    assert "  4K  " in points[0] and "  256K  " in points[1]

    again = CliRunner().invoke(
        app, ["run", str(path), "-o", str(tmp_path / "b"), "--baseline", str(base), "--no-plot"]
    )
    assert again.exit_code == 0, again.output
    assert "tolerance 90% (latency-bound 90%)" in again.stdout
    (new,) = (tmp_path / "b").iterdir()
    assert not (load_runs(new)["collectives-float32"].path / "plots").exists()
    assert (new / "comparison.md").is_file()


def test_p2p_copies_are_gated_too(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_suite_cli(monkeypatch, FakeLauncher(), str(suite_file), "-o", str(tmp_path / "base"))
    (baseline,) = (tmp_path / "base").iterdir()
    slow = FakeP2P(ms=1.25)
    result = run_suite_cli(
        monkeypatch,
        FakeLauncher(),
        str(suite_file),
        "-o",
        str(tmp_path / "n"),
        "-b",
        str(baseline),
        p2p=slow,
    )
    assert result.exit_code == 1
    (new_dir,) = (tmp_path / "n").iterdir()
    comparison = json.loads((new_dir / "comparison.json").read_text())
    assert comparison["schema_version"] == SCHEMA_VERSION
    gate = comparison["entries"]
    assert gate["p2p"]["counts"]["worse"] == 2 and gate["collectives-float32"]["exit_code"] == 0
    assert slow.options == [{"pairs": [[0, 1]], "bidirectional": False}]


@pytest.mark.integration
def test_p2p_is_skipped_on_a_cpu_run(
    tmp_path: Path, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("commbench.launch.launcher.run_collectives", FakeLauncher())
    result = CliRunner().invoke(
        app, ["run", str(suite_file), "-o", str(tmp_path), "--device", "cpu", "--no-plot"]
    )
    assert result.exit_code == 0, result.output
    assert "p2p skipped: p2p measures GPU copies; this suite runs on cpu" in result.stderr


@pytest.mark.integration
def test_a_suite_left_running_by_a_vanished_launcher_reads_as_interrupted(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import os, sys; from pathlib import Path; "
        "from commbench.results.lifecycle import start_suite; "
        "from commbench.results.record import Entry, RunStatus, SuiteRecord; "
        "life = start_suite(Path(sys.argv[1]), SuiteRecord(name='ci', entries=["
        "Entry(name='collectives-float32', section='collectives', status=RunStatus.COMPLETE), "
        "Entry(name='strategies-float32', section='strategies', status=RunStatus.RUNNING)])); "
        "print(os.getpid(), life.path)"
    )
    pid, suite_dir = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.split()
    record = SuiteDir(Path(suite_dir)).read_record()
    why = f"its launcher (pid {pid}) is gone"
    assert (record.status, record.failure) == ("interrupted", why)
    assert [(e.status, e.failure) for e in record.entries] == [
        ("complete", None),
        ("interrupted", why),
    ]
