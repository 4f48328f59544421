"""What nccl-tests users type, taken as they mean it (issue 43, item 16): `--dtype all`,
`--reduce-op all` (nccl-tests' `-d all`, `-o all`), the dtype names `fp16`, `bf16`, `half`,
`float`, `double`, and a `-n` that counts iterations, as nccl-tests' does, said to be
`--nproc`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.cli._common import check_nproc
from commbench.collectives.placement import Placement
from commbench.collectives.settings import CollectivesRequest, CollectivesSettings, plan_points
from commbench.collectives.specs import DTYPES, OPS, REDUCE_OPS
from commbench.errors import UserError
from commbench.flags import NPROC_HINT
from commbench.results.names import DTYPE_ALIASES

CPU = Placement(device="cpu", nproc=2, backend="gloo")


def settings(**asked: object) -> CollectivesSettings:
    return CollectivesRequest(sizes="1K", **asked).settings(CPU)  # type: ignore[arg-type]


@pytest.mark.parametrize(("alias", "name"), sorted(DTYPE_ALIASES.items()))
def test_a_dtype_alias_is_the_dtype_it_stands_for(alias: str, name: str) -> None:
    """Stored under the name it stands for: `fp16` and `float16` runs are one series."""
    assert name in DTYPES
    assert settings(dtype=alias).dtypes == [name]
    assert settings(dtype=f"float64,{alias}" if name != "float64" else alias).dtypes[-1] == name


def test_fp16_and_bf16_in_a_list_and_twice_under_two_names() -> None:
    assert settings(dtype="fp16,bf16").dtypes == ["float16", "bfloat16"]
    assert settings(dtype=["bf16"]).dtypes == ["bfloat16"]  # the API's list
    with pytest.raises(UserError, match="names a dtype twice: float16,float16"):
        settings(dtype="float16,fp16")


def test_all_is_every_dtype_and_every_reduce_op() -> None:
    s = settings(dtype="all", reduce_op="all")
    assert s.dtypes == list(DTYPES) and s.reduce_ops == list(REDUCE_OPS)
    assert (s.dtype, s.reduce_op) == (next(iter(DTYPES)), REDUCE_OPS[0])  # the first, for readers
    for flag, value in (("dtype", "all,float32"), ("reduce_op", "sum,all")):
        with pytest.raises(UserError, match="all already names every one"):
            settings(**{flag: value})


def test_reduce_ops_are_measured_for_the_ops_that_reduce_only() -> None:
    """Each reducing op (and each strategy) at each reduce op; the others once."""
    s = settings(ops="all_reduce,all_gather", strategies="ring", reduce_op="sum,max")
    points = plan_points(s, 2)
    by_op = {
        (p.op, p.strategy): [
            q.reduce_op for q in points if (q.op, q.strategy) == (p.op, p.strategy)
        ]
        for p in points
    }
    assert by_op == {
        ("all_reduce", ""): ["sum", "max"],
        ("all_gather", ""): ["sum"],  # ignores it: its row says none
        ("all_reduce", "ring"): ["sum", "max"],
    }
    assert OPS["all_reduce"].reduces and not OPS["all_gather"].reduces


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("xor", "unknown reduce op 'xor'; choose from: sum, avg, max, min, prod"),
        ("sum,sum", "--reduce-op names a reduce op twice"),
        ("sum,,max", "item 2 of 3 is empty"),
    ],
)
def test_a_bad_reduce_op_list_is_one_line(value: str, said: str) -> None:
    with pytest.raises(UserError, match=said):
        settings(reduce_op=value)


def test_settings_stored_before_reduce_ops_still_load() -> None:
    old = settings(reduce_op="max").to_dict()
    assert old["reduce_ops"] == ["max"]
    old.pop("reduce_ops")
    assert CollectivesSettings.from_dict(old).reduce_ops == ["max"]


def test_a_suite_takes_the_same_names() -> None:
    from commbench.suites.config import parse_suite
    from commbench.suites.runner import Machine, plan_runs

    suite = parse_suite(
        {"collectives": {"ops": ["all_reduce"], "dtypes": "fp16,bf16", "reduce_op": "all"}},
        "s.yaml",
    )
    runs = plan_runs(suite, Machine(device="cpu", nproc=2, backend="gloo"))
    assert [r.name for r in runs] == ["collectives-float16", "collectives-bfloat16"]
    assert all(r.settings.reduce_ops == list(REDUCE_OPS) for r in runs)
    listed = parse_suite({"collectives": {"dtypes": ["bf16", "float32"]}}, "s.yaml")
    assert listed.collectives is not None and listed.collectives.dtypes == ["bfloat16", "float32"]
    with pytest.raises(UserError, match=r"s.yaml: collectives.reduce_op: expected one of"):
        parse_suite({"collectives": {"reduce_op": "xor"}}, "s.yaml")


# --- -n: processes per node, not iterations ------------------------------------------------


def test_n_counting_iterations_is_refused_in_one_line_with_the_hint() -> None:
    result = CliRunner().invoke(app, ["collectives", "--device", "cpu", "-n", "100000"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("commbench: error: --nproc 100000 is more than 8 CPU ranks per core")
    assert line.endswith(NPROC_HINT) and "Traceback" not in result.output


def test_more_gpu_ranks_than_gpus_is_refused_with_the_hint() -> None:
    with pytest.raises(UserError) as raised:
        check_nproc(20, "cuda", 8)
    assert str(raised.value) == (
        f"--nproc 20 asks for 20 GPU ranks on a node with 8 GPU(s); {NPROC_HINT}"
    )
    assert check_nproc(8, "cuda", 8) == []
    assert check_nproc(20, "cuda", None) == []  # NVML did not count: the probe will
    result = CliRunner().invoke(
        app, ["slurm-script", "--gpus-per-node", "8", "--", "collectives", "-n", "20"]
    )
    assert result.exit_code == 2 and NPROC_HINT in result.stderr


def test_more_cpu_ranks_than_cores_is_a_warning_with_the_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    (warning,) = check_nproc(20, "cpu", None)
    assert warning.startswith("warning: --nproc 20 starts 20 CPU ranks on 4 cores")
    assert NPROC_HINT in warning
    assert check_nproc(4, "cpu", None) == []
    with pytest.raises(UserError, match="more than 8 CPU ranks per core"):
        check_nproc(33, "cpu", None)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_real_run_of_every_reduce_op_with_an_alias(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable, "-m", "commbench", "collectives", "--device", "cpu", "-n", "2",
            "--ops", "all_reduce,all_gather", "--sizes", "1K", "--dtype", "bf16",
            "--reduce-op", "all", "--iters", "2", "--warmup", "1", "--no-plot", "--out", str(out),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = out.iterdir()
    rows = json.loads((run / "results.json").read_text())["rows"]
    assert sorted((r["op"], r["reduce_op"]) for r in rows) == sorted(
        [("all_reduce", op) for op in REDUCE_OPS] + [("all_gather", "")]
    )
    assert all(r["dtype"] == "bfloat16" and r["check"] == "ok" for r in rows)
    stored = json.loads((run / "run.json").read_text())["settings"]
    assert stored["reduce_ops"] == list(REDUCE_OPS) and stored["dtypes"] == ["bfloat16"]
    for op in REDUCE_OPS:
        assert f"# all_reduce  bfloat16  op={op}  2 ranks" in done.stdout
