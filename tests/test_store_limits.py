"""The limits a node holds the job's store under, checked at a multi-node run's start
(issue 45): one line each where they cannot hold, with the fix."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from commbench.launch.limits import store_fds, store_limits


def test_the_limits_hold_on_one_node_and_where_they_are_high() -> None:
    assert store_limits(1, 8, open_files=16, backlog=1) == []  # no job's store to host
    assert store_limits(64, 512, open_files=1 << 20, backlog=4096) == []


def test_a_low_backlog_is_said_with_its_fix() -> None:
    (line,) = store_limits(64, 512, open_files=1 << 20, backlog=128)
    assert "net.core.somaxconn = 128" in line and line.endswith("sysctl -w net.core.somaxconn=576")


def _limits_under(soft: int, nnodes: int, ranks: int) -> list[str]:
    """`store_limits` in a process whose open-file limit was lowered to `soft`: what a
    launcher started under `ulimit -n soft` says."""
    code = (
        "import resource\n"
        "_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, hard))\n"
        "from commbench.launch.limits import store_limits\n"
        f"print('\\n'.join(store_limits({nnodes}, {ranks}, backlog=1 << 20)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [line for line in out.splitlines() if line]


@pytest.mark.integration  # a process of its own, whose limit is lowered
def test_a_low_open_file_limit_is_said_in_one_line_with_its_fix() -> None:
    need = store_fds(16, 128)
    (line,) = _limits_under(need - 1, 16, 128)
    assert f"open-file limit here ({need - 1})" in line and line.endswith(f"ulimit -n {need}")
    assert _limits_under(need, 16, 128) == []


def _lowered(soft: int) -> Callable[[], None]:
    """A preexec_fn: the child's soft open-file limit lowered to `soft` (what `ulimit -Sn`
    does in a shell), its hard limit kept."""

    def lower() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return lower


@pytest.mark.integration  # two commbench processes, each with its torchrun and workers
def test_a_two_node_run_says_the_limit_before_its_workers_start_and_records_it(
    tmp_path: Path, free_port: int
) -> None:
    """Two "nodes" on this machine, launched under an open-file limit one short of what the
    job's store needs: each says the limit in one line before its first row, once, and its
    run.json keeps it; the run itself goes on (a warning: another node may host the store)."""
    need = store_fds(2, 4)
    common = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port}", "--rdzv-id", "lim"]
    sweep = ["--nproc", "2", "--device", "cpu", "--ops", "all_reduce", "--sizes", "4K,8K"]
    timing = ["--iters", "3", "--warmup", "1", "--timeout", "60", "--no-plot"]
    command = [sys.executable, "-m", "commbench", "collectives", *common, *sweep, *timing]
    nodes = [
        subprocess.Popen(
            [*command, "--node-rank", str(r), "-o", f"node{r}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_lowered(need - 1),
        )
        for r in (0, 1)
    ]
    outputs = [p.communicate(timeout=240) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    said = f"commbench: warning: the open-file limit here ({need - 1}) cannot hold"
    for r, (_, err) in enumerate(outputs):
        lines = err.splitlines()
        warned = [i for i, line in enumerate(lines) if line.startswith(said)]
        assert len(warned) == 1 and lines[warned[0]].endswith(f"ulimit -n {need}"), err
        rows = [i for i, line in enumerate(lines) if line.startswith("commbench: [")]
        assert all(warned[0] < i for i in rows), err  # before the first row, said once
        (run_dir,) = (tmp_path / f"node{r}").iterdir()
        warnings = json.loads((run_dir / "run.json").read_text())["warnings"]
        assert any(w.startswith(f"the open-file limit here ({need - 1})") for w in warnings)
    assert any("commbench: [" in err for _, err in outputs)  # the writer's rows were said


def test_diagnose_says_the_limits_before_the_nodes_sign_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`diagnose` waits for every node at its muster before it launches: the limits are
    said before that wait, not after it."""
    import commbench.diagnose.run as diagnose_run
    from commbench.collectives.placement import placement_for
    from commbench.diagnose.settings import DiagnoseRequest, diagnose_settings
    from commbench.launch.launcher import LaunchOptions

    order: list[str] = []

    def muster(*args: object) -> None:
        order.append("muster")
        raise KeyboardInterrupt  # far enough: nothing is launched

    monkeypatch.setattr(diagnose_run, "_muster", muster)
    monkeypatch.setattr(diagnose_run, "store_limits", lambda nnodes, ranks: [f"{nnodes}/{ranks}"])
    settings, collectives = diagnose_settings(placement_for(1, "cpu", 2, "gloo"), DiagnoseRequest())
    launch = LaunchOptions(nnodes=3, rdzv_endpoint="127.0.0.1:29400")
    with pytest.raises(KeyboardInterrupt):
        diagnose_run.run_diagnose(settings, collectives, tmp_path, launch, on_warning=order.append)
    assert order == ["3/6", "muster"]


def test_a_suite_says_the_limits_once_before_its_first_entry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`commbench run` across nodes: the limits said once, at the suite's start (each entry's
    run.json keeps them as `collectives` does), and kept in suite.json."""
    from typer.testing import CliRunner

    from commbench.cli import app
    from commbench.results.store import SuiteDir

    monkeypatch.setattr("commbench.suites.runner.store_limits", lambda n, r: [f"{n} nodes {r}"])
    monkeypatch.setattr("commbench.suites.runner._Suite.run_topology", lambda self: None)
    path = tmp_path / "topo.yaml"
    path.write_text("topo: true\n")
    flags = ["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:29400"]
    args = ["run", str(path), "-o", str(tmp_path / "out"), "--device", "cpu", "--nproc", "3"]
    result = CliRunner().invoke(app, [*args, *flags])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines.count("commbench: warning: 2 nodes 6") == 1, lines
    said = lines.index("commbench: warning: 2 nodes 6")
    assert lines[said - 1].startswith("commbench: suite ")  # at once after its announcement
    (suite_dir,) = (tmp_path / "out").iterdir()
    assert SuiteDir(suite_dir).read_record().warnings == ["2 nodes 6"]
