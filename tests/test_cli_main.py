"""The console script's last-resort handler (`commbench.cli.main`): one line and an exit code
for every known error, the help for `commbench` alone, and a plain traceback for a bug."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import commbench
from commbench.cli import main
from commbench.errors import RunFailed, UserError
from tests.package_source import ROOT, parsed


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The console script as a user runs it: argv in, exit code and output back."""
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as exit_info:
        patch.setattr(sys, "argv", ["commbench", *args])
        main()
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 0), out, err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_a_parse_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys, "collectives", "--no-such-flag")
    assert code == 2
    assert one_line(err).startswith("commbench: error: No such option: --no-such-flag")
    assert "(see 'commbench collectives --help')" in err


def test_a_bad_option_value_is_reworded_for_a_user(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys, "collectives", "--nproc", "x")
    assert code == 2 and "expected a whole number" in one_line(err)


def test_commbench_alone_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys)
    assert code == 2 and err.startswith("Usage: commbench") and "collectives" in err


def test_version_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.strip() == f"commbench {commbench.__version__}"


def _raising(exc: BaseException):  # a core call that fails the way the test wants
    def fail(*_: object, **__: object) -> None:
        raise exc

    return fail


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (KeyboardInterrupt(), 130, "commbench: interrupted"),
        (UserError("bad\ninput"), 2, "commbench: error: bad input"),
        (RunFailed("a worker died"), 1, "commbench: error: a worker died"),
        (typer.BadParameter("no good"), 2, "commbench: error: Invalid value: no good"),
    ],
)
def test_known_errors_inside_a_command_are_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exc: BaseException,
    code: int,
    line: str,
) -> None:
    monkeypatch.setattr("commbench.strategies.model.predict", _raising(exc))
    got, _, err = run_main(capsys, "model", "--bw", "10", "--latency", "1")
    assert got == code
    assert one_line(err).startswith(line)


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (KeyboardInterrupt(), 130, "commbench: interrupted"),
        (typer.Abort(), 130, "commbench: interrupted"),
        (UserError("outside any command"), 2, "commbench: error: outside any command"),
    ],
)
def test_known_errors_outside_a_command_are_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exc: BaseException,
    code: int,
    line: str,
) -> None:
    # raised by the app itself, where no command's reported_errors() catches it
    monkeypatch.setattr("commbench.cli.app", _raising(exc))
    got, _, err = run_main(capsys, "topo")
    assert (got, one_line(err)) == (code, line)


@pytest.mark.integration
def test_a_bug_keeps_its_own_traceback_and_nothing_else(tmp_path: Path) -> None:
    """A bug is no input error: exit 1 with the traceback of the bug, not a second,
    chained one raised by the handler itself (as `errors.Abort` once did)."""
    code = (
        "import sys, commbench.cli as cli\n"
        "def boom(*a, **k): raise ZeroDivisionError('the bug')\n"
        "cli.app = boom\n"
        "sys.argv = ['commbench', 'topo']\n"
        "cli.main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.count("Traceback") == 1, proc.stderr
    assert "During handling" not in proc.stderr
    assert proc.stderr.rstrip().endswith("ZeroDivisionError: the bug")


@pytest.mark.integration
def test_the_console_script_reports_a_bad_size_in_one_line(tmp_path: Path) -> None:
    """The issue's reproduction, through the real entry point in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-m", "commbench", "collectives", "--sizes", "1K-1M:xinf"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert one_line(proc.stderr).startswith("commbench: error: malformed step 'xinf'")
    assert list(tmp_path.iterdir()) == []


def test_no_private_module_of_a_library_is_imported() -> None:
    """`typer._click` moved between Typer releases and broke the handler: the package
    imports no module whose path has a private (underscore) part outside commbench."""
    private = []
    for path, tree in parsed():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
                names = [a.value for a in node.args if isinstance(a, ast.Constant)]
            for name in names:
                parts = str(name).split(".")
                if parts[0] != "commbench" and any(p.startswith("_") for p in parts[1:]):
                    private.append(f"{path.relative_to(ROOT)}: {name}")
    assert private == []
