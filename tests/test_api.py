"""The Python API (`commbench.api`, reachable as `commbench.<name>`): the commands as functions
that return data, with the CLI's defaults and checks. The runs here are real torchrun launches
of gloo workers on CPU."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import commbench
from commbench.collectives.placement import Placement
from commbench.collectives.settings import (
    CPU_DEFAULT_SIZES,
    DEFAULT_MIN_TIME,
    GPU_DEFAULT_SIZES,
    CollectivesRequest,
)
from commbench.compare import Gate
from commbench.errors import Interrupted, RunFailed, UserError
from commbench.results.record import RunKind, RunStatus
from commbench.results.runs import Run, load_run
from commbench.results.schema import CHECK_FAILED
from commbench.results.verdict import judge
from commbench.sizes import parse_sizes

ROOT = Path(__file__).parents[1]
API_PAGE = (ROOT / "docs" / "api.md").read_text()
REFERENCE = ROOT / "results" / "reference" / "cpu-gloo-w4-strategies"
V1_RUN = REFERENCE / "20261121-060313-collectives"
V1_OTHER = REFERENCE / "20261121-060353-collectives"
SMI_DGX1V = "smi_dgx1v_v100_hybrid_cube_mesh.txt"


@pytest.mark.integration
def test_import_commbench_loads_no_heavy_module() -> None:
    code = (
        "import sys, commbench\n"
        "heavy = [m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "verbs = [getattr(commbench, name) for name in commbench.__all__ if name != '__version__']\n"
        "assert all(callable(f) for f in verbs)\n"
        "heavy = [m for m in ('torch', 'pandas', 'matplotlib') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print(sorted(commbench.__all__))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "run_collectives" in done.stdout and "model_strategies" in done.stdout


VERBS = {
    "run_collectives": "collectives",
    "run_p2p": "p2p",
    "run_diagnose": "diagnose",
    "replay_trace": "replay",
    "run_suite": "run",
    "compare_runs": "compare",
    "load_topology": "topo",
    "model_strategies": "model",
    "plot_run": "plot",
    "report_run": "report",
    "record_job": "record",
    "export_run": "export",
    "import_nccl_tests": "import",
    "slurm_script": "slurm-script",
    "k8s_manifest": "k8s-manifest",
    "history_add": "history",
    "history_list": "history",
    "history_show": "history",
    "history_changes": "history",
    "history_plot": "history",
    "settle_runs": "settle",
    "load_run": None,
}
"""Each verb of the API, and the command that is a thin layer over it."""


def test_the_api_is_verbs_each_documented_and_no_module_is_callable() -> None:
    import inspect
    import types

    import typer

    from commbench.cli import app

    assert sorted(commbench.__all__) == sorted(["__version__", *VERBS])
    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    for name, command in VERBS.items():
        verb = getattr(commbench, name)
        assert inspect.isfunction(verb), name
        assert verb.__doc__ and len(verb.__doc__) > 40, name
        assert command is None or command in commands, command
    import commbench.collectives.settings as settings  # the packages are packages

    assert settings.DEFAULT_MIN_TIME == DEFAULT_MIN_TIME
    for package in ("collectives", "p2p", "diagnose", "topology"):
        module = sys.modules.get(f"commbench.{package}") or __import__(f"commbench.{package}")
        assert type(module) is types.ModuleType and not callable(module)
    assert "on_progress" in inspect.signature(commbench.run_collectives).parameters


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'colectives'"):
        commbench.colectives  # noqa: B018


@pytest.fixture(scope="module")
def api_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[tuple[int, int]]]:
    out = tmp_path_factory.mktemp("api")
    progress: list[tuple[int, int]] = []
    run = commbench.run_collectives(
        ops="all_reduce,broadcast",
        sizes="1K-4K",
        nproc=2,
        device="cpu",
        iters=3,
        warmup=1,
        out=out,
        no_plot=True,
        on_progress=lambda done, total, row: progress.append((done, total)),
    )
    return run, progress


@pytest.mark.integration  # the module's fixture `api_run` starts processes
def test_collectives_returns_the_run(api_run: tuple[Run, list[tuple[int, int]]]) -> None:
    run, progress = api_run
    assert run.status == "complete" and run.status is RunStatus.COMPLETE
    assert run.verdict.passed and run.verdict.error() is None
    assert run.path.is_dir() and (run.path / "run.json").is_file()
    assert run.plots is None  # no_plot
    assert {(r.op, r.size_bytes) for r in run.rows} == {
        (op, size) for op in ("all_reduce", "broadcast") for size in (1024, 2048, 4096)
    }
    assert progress and progress[-1] == (6, 6)
    assert run.record.settings["iters"] == 3 and run.record.points_total == 6


@pytest.mark.integration  # the module's fixture `api_run` starts processes
def test_the_frame_has_the_csv_columns(api_run: tuple[Run, list[tuple[int, int]]]) -> None:
    run, _ = api_run
    with (run.path / "results.csv").open() as f:
        header = next(csv.reader(f))
    frame = run.to_frame()
    assert list(frame.columns) == header and len(frame) == len(run.rows) == 6
    assert (frame["world_size"] == 2).all() and (frame["check"] == "ok").all()


@pytest.mark.integration  # the module's fixture `api_run` starts processes
def test_load_and_compare_a_run_with_itself(api_run: tuple[Run, list[tuple[int, int]]]) -> None:
    run, _ = api_run
    same = commbench.load_run(run.path)
    assert isinstance(same, Run) and same.kind is RunKind.COLLECTIVES
    assert [r.to_dict() for r in same.rows] == [r.to_dict() for r in run.rows]
    gate = commbench.compare_runs(same, str(run.path))
    assert isinstance(gate, Gate) and len(gate) == 1
    assert gate.passed and gate.exit_code == 0
    frame = gate.to_frame()
    assert frame.columns[0] == "entry" and len(frame) == 6
    assert set(frame["mark"]) <= {"same", "noisy"}  # identical samples: never worse


@pytest.mark.integration  # the module's fixture `api_run` starts processes
def test_a_bad_tolerance_is_the_cli_line(api_run: tuple[Run, list[tuple[int, int]]]) -> None:
    run, _ = api_run
    with pytest.raises(UserError, match="--tolerance"):
        commbench.compare_runs(run, run, tolerance="lots")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sizes": "1K-1M:xinf"}, "inf"),
        ({"iters": 5, "min_time": 0.1}, "--iters and --min-time both given"),
        ({"ops": "all_reduse"}, "all_reduse"),
        ({"ranks": "0,x"}, "--ranks must be a comma list"),
        ({"ranks": []}, "--ranks is empty"),
        ({"sizes": [1024, True]}, "--sizes[1]: expected an integer or a string, got a boolean"),
        ({"ops": ["all_reduce", 3]}, "--ops[1]: expected a string, got the number 3"),
    ],
)
def test_bad_input_raises_before_anything_runs(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    out = tmp_path / "out"
    with pytest.raises(UserError, match=re.escape(message)):
        commbench.run_collectives(device="cpu", nproc=2, out=out, **kwargs)  # type: ignore[arg-type]
    assert not out.exists()  # nothing was created


def test_the_api_and_the_cli_print_the_same_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from commbench.cli import app

    with pytest.raises(UserError) as caught:
        commbench.run_collectives(device="cpu", sizes="1K-1M:xnan", out=tmp_path)
    result = CliRunner().invoke(
        app, ["collectives", "--device", "cpu", "--sizes", "1K-1M:xnan", "-o", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert result.output.strip() == f"commbench: error: {caught.value}"


def test_defaults_are_filled_in_once() -> None:
    cpu = CollectivesRequest().settings(Placement(device="cpu", nproc=2, backend="gloo"))
    gpu = CollectivesRequest().settings(Placement(device="cuda", nproc=8, backend="nccl"))
    assert cpu.sizes == parse_sizes(CPU_DEFAULT_SIZES) and cpu.sizes[-1] == 1 << 20
    assert gpu.sizes == parse_sizes(GPU_DEFAULT_SIZES) and gpu.sizes[-1] == 1 << 30
    assert cpu.timing.min_time == DEFAULT_MIN_TIME == 0.2 and cpu.timing.iters is None
    assert len(cpu.ops) > 5 and cpu.strategies == []
    only = CollectivesRequest(strategies="ring,direct").settings(cpu_place())
    assert only.ops == [] and only.strategies == ["ring", "direct"]
    listed = CollectivesRequest(ops=["all_reduce"], sizes=["1K", 4096], ranks=[1, 0]).settings(
        cpu_place()
    )
    assert listed.ops == ["all_reduce"] and listed.sizes == [1024, 4096]


def cpu_place() -> Placement:
    return Placement(device="cpu", nproc=2, backend="gloo")


def test_p2p_checks_its_flags_before_touching_a_gpu(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--matrix measures every pair"):
        commbench.run_p2p(matrix=True, src=0, out=tmp_path)
    with pytest.raises(UserError, match="expected a GPU index"):
        commbench.run_p2p(src="²", out=tmp_path)


def test_p2p_dry_run_explains_from_a_snapshot(tmp_path: Path) -> None:
    from commbench.p2p.run import DryRun

    snapshot = ROOT / "tests" / "fixtures" / "p2p" / "snapshot_puzzle8.json"
    dry = commbench.run_p2p(src=0, topology=snapshot, dry_run=True, out=tmp_path / "never")
    assert isinstance(dry, DryRun) and dry.expectations
    assert len(dry.snapshot.gpus) >= 2
    assert not (tmp_path / "never").exists()


def test_topology_from_a_snapshot_and_from_smi(tmp_path: Path) -> None:
    snapshot = commbench.load_topology()  # no GPU here: the snapshot says why, nothing raised
    assert snapshot.gpus or snapshot.nvml_error
    saved = tmp_path / "snap.json"
    saved.write_text(json.dumps(snapshot.to_dict()))
    assert commbench.load_topology(saved).to_dict() == snapshot.to_dict()
    with pytest.raises(UserError, match="give one"):
        commbench.load_topology(saved, from_smi=saved)
    smi = commbench.load_topology(from_smi=ROOT / "tests" / "fixtures" / "topology" / SMI_DGX1V)
    assert len(smi.gpus) == 8 and smi.source != snapshot.source


def test_v1_reference_runs_compare_through_the_api() -> None:
    gate = commbench.compare_runs(V1_RUN, V1_OTHER, allow_mismatch=True)
    assert gate.exit_code in (0, 1) and len(gate.to_frame()) > 0
    with pytest.raises(UserError, match="--tolerance: must be between"):
        commbench.compare_runs(V1_RUN, V1_OTHER, allow_mismatch=True, tolerance="-5%")


def test_a_wrong_result_fails_the_run_and_a_stop_is_interrupted(tmp_path: Path) -> None:
    run = load_run(V1_RUN)
    assert judge(RunStatus.COMPLETE, run.rows, tmp_path).passed
    run.rows[3].check = CHECK_FAILED
    verdict = judge(RunStatus.COMPLETE, run.rows, tmp_path)
    assert verdict.status is RunStatus.FAILED and not verdict.passed
    assert verdict.message is not None and verdict.message.startswith("wrong result at 1 point")
    assert isinstance(verdict.error(), RunFailed)
    assert run.status is RunStatus.FAILED  # the Run judges the same way
    stopped = judge(RunStatus.COMPLETE, run.rows[:3], tmp_path, stop_requested=True)
    assert stopped.passed and stopped.stopped and isinstance(stopped.error(), Interrupted)
    broke = judge(RunStatus.INTERRUPTED, run.rows[:3], tmp_path)
    assert isinstance(broke.error(), Interrupted) and "3 points" in (broke.message or "")


@pytest.mark.integration
def test_the_api_page_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = re.search(r"```python\n(.*?)```", API_PAGE, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/api.md", "exec"), {})  # cwd is tmp_path (conftest)
    printed = capsys.readouterr().out
    assert printed.startswith("complete results/") and "True 0" in printed
    assert len(list((tmp_path / "results").glob("*-collectives"))) == 1
