"""The fast lane's guard (tests/conftest.py) catches a process started for an unmarked test
by any route: in the test, in a module- or session-scoped fixture (set up before any autouse
fixture could guard it), through multiprocessing, through an os function bound before the
guard was set, and while a module is collected. Run on a generated test module, in-process
(`pytester`), which starts nothing itself."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()

INNER = ("-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:hypothesispytest")
"""The inner session's options, the plugins the suite's own addopts (pyproject.toml) leave
out: pytest-benchmark, where installed, runs git at start-up; hypothesis's plugin imports
hypothesis and reports at the end (most of a second per inner session)."""

CASES = {
    "in_the_test": """
import subprocess, sys
def test_it():
    subprocess.run([sys.executable, "-c", "pass"])
""",
    "module_fixture": """
import subprocess, sys, pytest
@pytest.fixture(scope="module")
def started():
    subprocess.run([sys.executable, "-c", "pass"])
def test_it(started):
    pass
""",
    "multiprocessing_spawn": """
import multiprocessing, pytest
@pytest.fixture(scope="session")
def started():
    p = multiprocessing.get_context("spawn").Process(target=print)
    p.start(); p.join()
def test_it(started):
    pass
""",
    "bound_before_the_guard": """
import os, sys, pytest
from os import posix_spawn, system
@pytest.fixture(scope="module")
def started():
    os.waitpid(posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ), 0)
def test_it(started):
    system("true")
""",
}


def test_an_unmarked_test_that_starts_a_process_fails(pytester: pytest.Pytester) -> None:
    """Each case a module of one test, all in one inner session (each session costs a
    second): every one fails, named by the inner session's own guard (the outer one, in
    force as well, would name this test instead)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**{f"test_{case}": source for case, source in CASES.items()})
    result = pytester.runpytest_inprocess(*INNER)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) == 0, result.stdout.str()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == len(CASES), outcomes
    for case in CASES:
        result.stdout.fnmatch_lines([f"*test_{case}.py::test_it starts a process: mark it @*"])


def test_a_module_that_starts_a_process_as_it_is_collected_fails(
    pytester: pytest.Pytester,
) -> None:
    """Whatever its marks: the fast lane imports every module before it deselects any test."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_probe="""
import subprocess, sys, pytest
probed = subprocess.run([sys.executable, "-c", "pass"]).returncode
@pytest.mark.skipif(probed != 0, reason="probed")
def test_it():
    pass
"""
    )
    result = pytester.runpytest_inprocess(*INNER)
    assert result.parseoutcomes().get("errors", 0) == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_probe.py, collected, starts a process: ask at setup*"])


@pytest.mark.integration  # its inner test starts a process, as it may
def test_a_marked_module_fixture_is_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(
        "[pytest]\nmarkers =\n    integration: x\n    netns: x\n    slurm: x\n    gpu: x\n"
    )
    pytester.makepyfile(
        test_marked="""
import pytest
import subprocess, sys
@pytest.fixture(scope="module")
def started():
    return subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).returncode + 1
@pytest.mark.integration
def test_it(started):
    assert started == 1
"""
    )
    result = pytester.runpytest_inprocess(*INNER)
    result.assert_outcomes(passed=1)
