from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import UserError
from commbench.launch.launcher import LaunchOptions, resolve_launch
from commbench.launch.request import LaunchRequest
from commbench.launch.slurm import expand_nodelist, from_env


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ["node1"]),
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("gpu[01-02],login1,cpu[9-10]", ["gpu01", "gpu02", "login1", "cpu9", "cpu10"]),
        ("r[1-2]n[08-09]", ["r1n08", "r1n09", "r2n08", "r2n09"]),
        ("a-b[1,3]", ["a-b1", "a-b3"]),
    ],
)
def test_expand_nodelist(text: str, hosts: list[str]) -> None:
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[01-04", "gpu01]", "gpu[a-b]", ""])
def test_malformed_nodelist(text: str) -> None:
    with pytest.raises(UserError):
        expand_nodelist(text)


JOB = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_NNODES": "2",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_GPUS_ON_NODE": "8",
}


def test_job_from_environment() -> None:
    job = from_env(JOB)
    assert job is not None
    assert (job.nnodes, job.node_rank, job.head, job.tasks_per_node, job.gpus_on_node) == (
        2,
        1,
        "gpu07",
        1,
        8,
    )
    assert job.rdzv_endpoint == "gpu07:29642"  # 29400 + 4242 % 1000: the same on every node


def test_outside_slurm_or_in_a_bare_salloc_shell() -> None:
    assert from_env({}) is None
    assert from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1"}) is None  # no step yet


def test_slurm_builds_the_rendezvous_unless_flags_say_otherwise() -> None:
    launch = resolve_launch(LaunchRequest(), environ=JOB)
    assert (
        launch.nnodes,
        launch.node_rank,
        launch.rdzv_endpoint,
        launch.rdzv_id,
        launch.source,
    ) == (2, 1, "gpu07:29642", "slurm-4242", "slurm")
    explicit = resolve_launch(
        LaunchRequest(nnodes=2, node_rank=0, rdzv_endpoint="h:1234"), environ=JOB
    )
    assert explicit.rdzv_endpoint == "h:1234" and explicit.source == "flags"


def test_several_tasks_per_node_is_refused() -> None:
    env = {**JOB, "SLURM_TASKS_PER_NODE": "8(x2)"}
    with pytest.raises(UserError, match="ntasks-per-node=1"):
        resolve_launch(LaunchRequest(), environ=env)


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"nnodes": 2}, "needs --rdzv-endpoint"),
        ({"nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}, "outside"),
        ({"rdzv_endpoint": "nohost"}, "HOST:PORT"),
        ({"rdzv_endpoint": "h:99999"}, "HOST:PORT"),
    ],
)
def test_bad_multinode_flags(kw: dict, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        LaunchOptions(**kw)


def test_bad_multinode_flags_on_the_cli_are_one_line() -> None:
    result = CliRunner().invoke(app, ["collectives", "--nnodes", "2", "--device", "cpu"])
    assert result.exit_code == 2 and "needs --rdzv-endpoint" in result.stderr


def test_slurm_script_runs_one_task_per_node() -> None:
    result = CliRunner().invoke(
        app,
        [
            "slurm-script",
            "-N",
            "4",
            "--gpus-per-node",
            "8",
            "-p",
            "gpu",
            "--",
            "collectives",
            "--sizes",
            "1K-1G",
            "--ops",
            "all_reduce",
        ],
    )
    assert result.exit_code == 0
    script = result.stdout
    assert script.startswith("#!/bin/bash")
    for line in [
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --exclusive",  # the nodes to itself, every CPU and all memory for the task
        "#SBATCH --mem=0",
        "srun --ntasks-per-node=1 --cpu-bind=none commbench collectives --sizes 1K-1G --ops all_reduce",
    ]:
        assert line in script


CI_SUITE = str(Path(__file__).parent.parent / "configs" / "ci.yaml")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--", "collectives", "--sizes", "1X"], "unknown unit 'X'"),
        (["--", "collectives", "--bogus"], "the wrapped command: No such option: --bogus"),
        (["--", "collectives", "--iters", "many"], "--iters: expected a whole number"),
        (
            ["--", "compare", "a", "b"],
            "runs collectives, run or diagnose on every node, not 'compare'",
        ),
        (["--", "run", "missing.yaml"], "missing.yaml: no such suite file"),
        (["--time", "abc"], "is not a SLURM time"),
        (["--time", "25:61"], "--time '25:61': seconds must be below 60, got 61"),
        (["--time", "1-24"], "hours must be below 24"),
        (["--time", "1:60:00"], "minutes must be below 60"),
        (["--time", "99999999-00"], "is more than 365 days"),
        (["--time", "600000"], "is more than 365 days"),
        (["--time", "1:2:3:4"], "is not a SLURM time"),
        (["--time", "-5"], "is not a SLURM time"),
        (["--gpus-per-node", "1000000"], "--gpus-per-node"),
        (["--gpus-per-node", "65"], "--gpus-per-node"),
        (["--job-name", "a;rm -rf /"], "--job-name 'a;rm -rf /'"),
        (["--", "collectives", "--iters", "5", "--min-time", "1"], "--iters and --min-time"),
        (["-N", "2", "--", "collectives", "--nproc", "2", "--ranks", "0,5"], "rank 5 is outside"),
        # CPU ranks in a GPU job: 2 per node, as `collectives --device cpu` places them there
        (["-N", "2", "--", "collectives", "--device", "cpu", "--ranks", "5"], "(0..3)"),
        (["--", "collectives", "--nnodes", "4"], "--nnodes: the script builds the rendezvous"),
        (["--gpus-per-node", "0", "--", "collectives", "--backend", "nccl"], "needs GPUs"),
        (["--", "run", CI_SUITE, "--baseline", "/nonexist"], "no such run directory"),
    ],
)
def test_slurm_script_refuses_what_would_fail_on_the_nodes(args: list[str], fragment: str) -> None:
    """A job that waited in the queue must not die on a typo the submit host could see."""
    result = CliRunner().invoke(app, ["slurm-script", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and fragment in result.stderr


@pytest.mark.parametrize(
    "time_limit",
    ["30", "00:30:00", "1-00", "2-12:00:00", "90:00", "25:59", "1-23:59", "365-00", "INFINITE"],
)
def test_slurm_times_are_accepted_in_every_form(time_limit: str) -> None:
    result = CliRunner().invoke(app, ["slurm-script", "--time", time_limit])
    assert result.exit_code == 0 and f"#SBATCH --time={time_limit}" in result.stdout


def test_account_qos_and_constraint_are_sbatch_lines() -> None:
    result = CliRunner().invoke(
        app,
        ["slurm-script", "-A", "proj-42", "--qos", "high", "--constraint", "a100&ib|h100*2"],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for line in (
        "#SBATCH --account=proj-42",
        "#SBATCH --qos=high",
        "#SBATCH --constraint=a100&ib|h100*2",
    ):
        assert line in lines
    plain = CliRunner().invoke(app, ["slurm-script"]).stdout
    assert "--account" not in plain and "--qos" not in plain and "--constraint" not in plain


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-A", "a b"], "--account 'a b'"),
        (["--account", "x\n#SBATCH --mem=1"], "--account"),
        (["--qos", "high;rm"], "--qos 'high;rm'"),
        (["--constraint", "a100 ib"], "--constraint 'a100 ib'"),
        (["--constraint", "a100\n#SBATCH --x"], "--constraint"),
        (["--constraint", "a100#x"], "--constraint"),
        (["--constraint", "&a100"], "--constraint"),
        (["--venv", "/no/such/venv"], "no virtual environment there"),
        (["--venv", "/tmp/a\nb"], "--venv"),
    ],
)
def test_a_value_sbatch_would_read_otherwise_is_refused(args: list[str], fragment: str) -> None:
    """Nothing a value holds may become a line, a word or a comment of its own."""
    result = CliRunner().invoke(app, ["slurm-script", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and fragment in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_script_runs_the_venv_s_commbench_or_says_where_it_looks(tmp_path: Path) -> None:
    """commbench must be on the compute nodes' PATH: the script says so, and stops in one
    line where it is not; `--venv DIR` activates DIR (a shared filesystem's) first."""
    plain = CliRunner().invoke(app, ["slurm-script"]).stdout
    assert "# commbench must be on the nodes' PATH" in plain
    check = next(line for line in plain.splitlines() if line.startswith("command -v commbench"))
    assert "exit 2" in check and "--venv DIR" in check
    venv = tmp_path / "my venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    result = CliRunner().invoke(app, ["slurm-script", "--venv", str(venv) + "/"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    activate = lines.index(f"source '{venv}/bin/activate'")  # quoted: the blank
    assert activate < lines.index("set -euo pipefail") < len(lines) - 1
    assert lines[-1].startswith("srun ")
    # a relative path is taken from here, where sbatch runs the script by default
    relative = CliRunner().invoke(app, ["slurm-script", "--venv", "my venv"])
    assert f"source '{venv}/bin/activate'" in relative.stdout.splitlines()
