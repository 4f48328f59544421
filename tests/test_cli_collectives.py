"""CLI behaviour that needs no launch: help, bad input (one line, exit 2), import cost."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from commbench.cli import app

runner = CliRunner()


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--sizes", "1K-banana"], "malformed size"),
        (["--sizes", "4K-1K"], "backwards"),
        (["--ops", "all_reduce,allgather"], "unknown op 'allgather'"),
        (["--backend", "nccl", "--device", "cpu"], "nccl backend needs --device cuda"),
        (["--backend", "mpi"], "unknown backend"),
        (["--dtype", "float8"], "unknown dtype"),
        (["--dtype", "float32,nope"], "unknown dtype 'nope'"),
        (["--dtype", ","], "--dtype ',': item 1 of 2 is empty"),
        (["--dtype", "float32,,bfloat16"], "item 2 of 3 is empty"),
        (["--dtype", "float32,float32"], "names a dtype twice"),
        (["--in-place", "maybe"], "--in-place must be one of no, yes, both"),
        (["--reduce-op", "xor"], "unknown reduce op"),
        (["--device", "cpu", "--graph"], "--graph needs --device cuda"),
        (["--iters", "0"], "--iters must be >= 1"),
        (["--timeout", "0"], "--timeout must be a positive number"),
        (["--timeout", "nan"], "--timeout: expected a number"),
        (["--timeout", "inf"], "--timeout: expected a number"),
        (["--min-time", "nan"], "--min-time: expected a number"),
        (["--node-rank", "1"], "--node-rank needs --nnodes"),
        (["--ranks", "0,x"], "--ranks must be a comma list"),
        (["--device", "cpu", "--nproc", "2", "--ranks", "0,5"], "rank 5 is outside the world"),
        (["--device", "cpu", "--ranks", "1,1"], "lists a rank twice"),
        (["--sizes", ""], "--sizes is empty"),
        (["--ops", ""], "--ops is empty"),
        (["--strategies", ""], "--strategies is empty"),
        (["--iters", "5", "--min-time", "1"], "--iters and --min-time both given"),
        (["--device", "cpu", "--nproc", "100000"], "more than 8 CPU ranks per core"),
        (
            ["--device", "cpu", "--ops", "all_reduce", "--sizes", "4T"],
            "needs about 24.0T of buffers",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    line = one_line_error(runner.invoke(app, ["collectives", *args]))
    assert fragment in line


@pytest.mark.integration
def test_backend_limits_are_probed_not_hard_coded() -> None:
    # gloo raises on AVG for integer dtypes on one rank only; commbench must refuse up front
    line = one_line_error(
        runner.invoke(
            app,
            [
                "collectives",
                "--device",
                "cpu",
                "--dtype",
                "int32",
                "--reduce-op",
                "avg",
                "--ops",
                "all_reduce",
            ],
        )
    )
    assert "gloo cannot run all_reduce with dtype int32 and reduce op avg" in line


@pytest.mark.integration
def test_cuda_without_a_gpu_is_a_clear_error(no_gpu_env) -> None:
    line = one_line_error(
        runner.invoke(app, ["collectives", "--device", "cuda", "--ops", "all_reduce"])
    )
    assert "no CUDA GPU is visible" in line


def test_bad_input_creates_no_run_directory(tmp_path) -> None:
    runner.invoke(
        app,
        ["collectives", "--device", "cpu", "--dtype", "int8", "--reduce-op", "avg", "-o", "out"],
    )
    assert not (tmp_path / "out").exists()


def test_help_lists_every_option() -> None:
    result = runner.invoke(app, ["collectives", "--help"])
    assert result.exit_code == 0
    for flag in [
        "--sizes",
        "--ops",
        "--nproc",
        "--backend",
        "--device",
        "--dtype",
        "--reduce-op",
        "--warmup",
        "--iters",
        "--min-time",
        "--in-place",
        "--check",
        "--no-check",
        "--async-op",
        "--graph",
        "--ranks",
        "--timeout",
        "--out",
        "--format",
    ]:
        assert flag in result.output


@pytest.mark.integration
def test_top_level_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from commbench.cli import app; "
        "print(sorted(m for m in ('torch','pandas','matplotlib','numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.integration
def test_strategies_are_probed_too() -> None:
    line = one_line_error(
        runner.invoke(
            app,
            [
                "collectives",
                "--device",
                "cpu",
                "--strategies",
                "ring",
                "--dtype",
                "int32",
                "--reduce-op",
                "avg",
            ],
        )
    )
    assert "cannot run the ring all-reduce with dtype int32 and reduce op avg" in line


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["collectives", "--iters", "abc"], "--iters: expected a whole number"),
        (["collectives", "--format", "csvx"], "'csvx' is not one of"),
        (["topo", "--bogus"], "No such option: --bogus"),
        (["compare"], "Missing argument 'BASELINE'"),
    ],
)
def test_parse_errors_are_one_line_too(args: list[str], fragment: str) -> None:
    """What Typer itself refuses (choices, unknown flags) reads like our own errors, with
    the help to read; a number is read by commbench's own parser, and its error is ours."""
    out = subprocess.run(
        [sys.executable, "-m", "commbench", *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("commbench: error: ") and fragment in lines[0]
    if "--iters" not in args:
        assert f"commbench {args[0]} --help" in lines[0]
