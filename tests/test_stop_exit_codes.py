"""A command asked to stop exits with its signal's code, 128 + N, as a shell reports a process
that signal ended: Ctrl-C (SIGINT) 130, a scheduler's SIGTERM (SLURM at a time limit,
Kubernetes at preemption) 143, a closed terminal's SIGHUP 129. A job script or a scheduler's
log then tells a preempted job from one a user stopped. What was measured stays on disk as
before (the launches' tests: test_integration_collectives, test_stop_signals_multinode)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from commbench.cli._common import reported_errors
from commbench.diagnose.verdict import Diagnosis, NodeVerdict
from commbench.launch import procs
from commbench.results.record import RunStatus
from commbench.results.store import SuiteDir
from tests.test_cli_main import run_main
from tests.test_suite import FakeLauncher, run_suite_cli

CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


@pytest.fixture(autouse=True)
def _handlers_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`main` installs its handlers for the process's life: given back after each test, and
    its gc.freeze (an exiting command's) kept out of the test session."""
    monkeypatch.setattr("commbench.cli.gc.freeze", lambda: None)
    before = {sig: signal.getsignal(sig) for sig in CODES}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)
    with reported_errors():  # a command's start forgets the stop noted here, as a new process
        pass


def _signal_self(sig: int) -> Any:
    """A core call that gets `sig` as it runs (the handler raises within the sleep)."""

    def call(*_: object, **__: object) -> None:
        os.kill(os.getpid(), sig)
        time.sleep(5)
        raise AssertionError(f"{signal.Signals(sig).name} did not stop the command")

    return call


def _skip_ignored(sig: int) -> None:
    if signal.getsignal(sig) is signal.SIG_IGN:  # nohup's SIGHUP: ignored on purpose
        pytest.skip(f"{signal.Signals(sig).name} is ignored in this session")


@pytest.mark.parametrize("sig", list(CODES), ids=lambda s: signal.Signals(s).name)
def test_a_command_stopped_by_a_signal_exits_with_its_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sig: int
) -> None:
    _skip_ignored(sig)
    monkeypatch.setattr("commbench.strategies.model.predict", _signal_self(sig))
    code, _, err = run_main(capsys, "model", "--bw", "10", "--latency", "1")
    assert (code, err.strip()) == (CODES[sig], "commbench: interrupted")


def test_the_first_stop_signal_decides_the_exit_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler's SIGTERM, then a Ctrl-C while the launcher winds up: it was preempted."""

    def both(*_: object, **__: object) -> None:
        signals = procs.StopSignals()
        with signals.installed():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                os.kill(os.getpid(), signal.SIGINT)  # held: the launch is winding up
            assert signals.held == [signal.SIGINT]
            raise KeyboardInterrupt

    monkeypatch.setattr("commbench.strategies.model.predict", both)
    code, _, _ = run_main(capsys, "model", "--bw", "10", "--latency", "1")
    assert code == 143


def test_a_stop_noted_by_an_earlier_command_does_not_decide_the_next(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process (the Python API's user, these tests), each command starts unstopped."""
    monkeypatch.setattr("commbench.strategies.model.predict", _signal_self(signal.SIGTERM))
    assert run_main(capsys, "model", "--bw", "10", "--latency", "1")[0] == 143

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt  # no signal: Python's own Ctrl-C, or code

    monkeypatch.setattr("commbench.strategies.model.predict", interrupted)
    assert run_main(capsys, "model", "--bw", "10", "--latency", "1")[0] == 130


def test_a_suite_stopped_by_sigterm_exits_143_and_says_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = tmp_path / "unit.yaml"
    suite.write_text(
        "name: unit\ncollectives:\n  ops: [all_reduce]\n  sizes: 1K-4K\n"
        "  dtypes: [float32, bfloat16]\n"
    )
    measured = FakeLauncher()

    def preempted(settings: Any, out_parent: Path, **kw: Any) -> Any:
        if measured.calls:  # the second entry: the job's time is up
            _signal_self(signal.SIGTERM)()
        return measured(settings, out_parent, **kw)

    result = run_suite_cli(monkeypatch, preempted, str(suite), "-o", str(tmp_path / "out"))
    assert result.exit_code == 143, result.output
    (suite_dir,) = (tmp_path / "out").iterdir()
    record = SuiteDir(suite_dir).read_record()
    assert record.status == "interrupted"
    assert [(e.name, e.status) for e in record.entries] == [
        ("collectives-float32", "complete"),
        ("collectives-bfloat16", "interrupted"),
    ]


def _diagnosis(status: RunStatus, *, stopped: bool = False) -> Diagnosis:
    return Diagnosis(
        path=Path("d"),
        status=status,
        nodes=[NodeVerdict(host="a", node=0), NodeVerdict(host="b", node=1)],
        stages=[],
        stopped=stopped,
    )


def test_a_diagnosis_a_signal_stopped_exits_with_its_code_not_as_a_failed_node() -> None:
    """A preempted diagnosis is no sick cluster: not exit 1, nor 0 for one wound up whole."""
    with procs.StopSignals().installed(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert _diagnosis(RunStatus.INTERRUPTED).exit_code == 143
    assert _diagnosis(RunStatus.COMPLETE, stopped=True).exit_code == 143
    assert _diagnosis(RunStatus.COMPLETE).exit_code == 0
    assert _diagnosis(RunStatus.FAILED).exit_code == 1


@pytest.mark.integration
def test_a_stop_signal_that_lands_in_an_exec_still_exits_with_its_code(tmp_path: Path) -> None:
    """CPython remembers a KeyboardInterrupt that left an exec() of a string, caught or not,
    and `python -m` then ended the process by SIGINT (-2) whatever its exit code: seen on a
    diagnose node SIGTERMed as it imported torch (its dataclasses are made by exec)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import commbench.sizes\n"
        "def parse_sizes(*args, **kwargs):\n"
        "    exec('import os, signal, time\\n"
        "os.kill(os.getpid(), signal.SIGTERM)\\n"
        "time.sleep(5)')\n"
        "commbench.sizes.parse_sizes = parse_sizes\n"
    )
    checkout = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), checkout])}
    proc = subprocess.run(
        [sys.executable, "-m", "commbench", "model", "--bw", "10", "--latency", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip() == "commbench: interrupted"
