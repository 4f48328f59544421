"""Reading never writes (issue 42, item 6): every reader of stored runs, through the real
command line and the Python API, on a copy made read-only and run as a user who may not write
it, exits as it should, says what it should, and leaves every byte, mode and mtime of the copy
as it was. Three copies: a run, a suite, and a run whose launcher was killed outright (run.json
"running", two points only in events.jsonl), which a reader takes as ended, its points
recovered, in memory. Writing that into the run is a deliberate act: `commbench settle`, or a
command that writes into the run's directory anyway.

The reader: as root, the user nobody through setpriv; where the interpreter lies where nobody
may not read (pyenv under /root), nobody keeps one capability, CAP_DAC_READ_SEARCH: it reads
and searches what root may, and writes only what nobody may. As another user, that user.
Skipped where neither can run commbench.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.results.record import Entry, RunStatus, SuiteRecord
from commbench.results.runs import load_run, load_suite
from commbench.results.store import SuiteDir
from tests.factories import abandoned_run, dead_launcher

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parent.parent
RUNS = Path(__file__).parent / "fixtures" / "runs"
READ_SEARCH = "-all,+dac_read_search"


@dataclass(frozen=True)
class Reader:
    """Who runs the readers: the command line before the interpreter, its home."""

    prefix: list[str]
    home: Path
    who: str

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "MPLCONFIGDIR": str(self.home / "matplotlib"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(ROOT),
            "LC_ALL": "C.UTF-8",
        }
        command = [*self.prefix, sys.executable, *args]
        return subprocess.run(
            command, cwd=self.home, env=env, capture_output=True, text=True, timeout=120
        )

    def commbench(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "commbench", *args)


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    """A directory every user may search (pytest's own tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="commbench-read-only-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for path in [base, *base.rglob("*")]:  # a user other than root needs them writable
            with contextlib.suppress(OSError):
                path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def reader(place: Path) -> Reader:
    home = place / "home"
    home.mkdir()
    if os.geteuid() != 0:
        return Reader([], home, pwd.getpwuid(os.geteuid()).pw_name)
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody to read as")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to read as nobody")
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}"]
    as_nobody.append("--clear-groups")
    searching = [f"--{s}={READ_SEARCH}" for s in ("inh-caps", "ambient-caps", "bounding-set")]
    tried = []
    for prefix, who in (
        ([*as_nobody, "--"], "nobody"),
        ([*as_nobody, *searching, "--"], "nobody with CAP_DAC_READ_SEARCH"),
    ):
        candidate = Reader(prefix, home, who)
        probe = candidate.run("-c", "import commbench.cli")
        if probe.returncode == 0:
            return candidate
        tried.append(f"{who}: {probe.stderr.strip().splitlines()[-1:]}")
    pytest.skip("no unprivileged user can run commbench here: " + "; ".join(tried))


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every directory and file under `root`, itself included: its mode, its mtime (ns) and,
    for a file, the SHA-256 of its bytes."""
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, digest)
    return found


def _read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)


def _suite(parent: Path, runs: dict[str, Path]) -> Path:
    """A suite directory whose entries are copies of `runs`, by entry name."""
    suite = parent / "20261121-060000-suite-ci"
    suite.mkdir(parents=True)
    for name, run in runs.items():
        shutil.copytree(run, suite / name)
    done = RunStatus.COMPLETE
    entries = [Entry(name=n, section="collectives", path=n, status=done) for n in runs]
    SuiteDir(suite).write_record(SuiteRecord(name="ci", status=done, entries=entries))
    return suite


def _api(reader: Reader, path: Path) -> dict[str, object]:
    """What `load_run` and `load_suite` give the reader, in short."""
    code = (
        "import json, sys\n"
        "from commbench import load_run\n"
        "from commbench.results.runs import Suite, load_suite\n"
        "found = load_run(sys.argv[1])\n"
        "runs = load_suite(sys.argv[1]).runs() if isinstance(found, Suite) else {'': found}\n"
        "print(json.dumps({name: {'status': run.record.status.value, 'failure':\n"
        "    run.record.failure, 'sizes': [r.size_bytes for r in run.rows], 'warnings':\n"
        "    run.record.warnings} for name, run in runs.items()}))\n"
    )
    done = reader.run("-c", code, str(path))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("kind", ["run", "suite", "killed"])
def test_every_reader_leaves_a_read_only_copy_as_it_was(
    place: Path, reader: Reader, kind: str
) -> None:
    copies = place / kind
    copies.mkdir()
    out = reader.home / f"plots-{kind}"
    why = None
    if kind == "run":
        target = one = shutil.copytree(RUNS / "cpu-gloo-a", copies / "cpu-gloo-a")
    elif kind == "suite":
        target = _suite(copies, {"a": RUNS / "cpu-gloo-a", "b": RUNS / "cpu-gloo-b"})
        one = target / "a"
    else:
        launcher = dead_launcher()
        target = one = abandoned_run(copies, launcher, journaled=3, written=1)
        why = f"its launcher (pid {launcher.pid}) is gone"
    _read_only(copies)
    before = _snapshot(copies)

    compared = reader.commbench("compare", str(target), str(target))
    last = compared.stdout.splitlines()[-1]
    if why is None:
        assert compared.returncode == 0 and last.startswith("PASS"), compared.stderr
    else:
        assert compared.returncode == 1, compared.stderr
        assert last.startswith(f"FAIL: the new run was interrupted ({why})"), last

    report = reader.commbench("report", str(target))
    assert report.returncode == 0, report.stderr
    title = f"# commbench suite ci: {target.name}" if kind == "suite" else "# commbench report"
    assert report.stdout.startswith(title), report.stdout[:200]
    if why is not None:
        assert f"| status | interrupted: {why} |" in report.stdout
        assert "| points | 3/4 |" in report.stdout
        assert "\n| 4K | 1024 |" in report.stdout  # a point only events.jsonl holds

    plotted = reader.commbench("plot", str(target), "--out", str(out), "--formats", "svg")
    assert plotted.returncode == 0, plotted.stderr
    figures = plotted.stdout.split()
    assert figures and all(Path(f).parent == out and Path(f).is_file() for f in figures)
    if why is not None:
        assert f"commbench: warning: {target} was interrupted ({why})" in plotted.stderr

    exported = reader.commbench("export", str(one))
    assert exported.returncode == 0, exported.stderr
    busbw = [ln for ln in exported.stdout.splitlines() if ln.startswith("commbench_busbw_")]
    assert len(busbw) == (3 if why is not None else 27), busbw

    modelled = reader.commbench("model", "--from", str(one), "--world", "8")
    assert modelled.returncode == 0, modelled.stderr

    loaded = _api(reader, target)
    if kind == "suite":
        assert sorted(loaded) == ["a", "b"]
    for run in loaded.values():
        assert isinstance(run, dict)
        if why is None:
            assert run["status"] == "complete" and len(run["sizes"]) == 27
        else:
            assert run["status"] == "interrupted" and run["failure"] == why
            assert run["sizes"] == [1024, 2048, 4096]
            assert any("2 point(s) taken from events.jsonl" in w for w in run["warnings"])

    if why is not None:  # writing it is a deliberate act, which a read-only copy refuses
        settled = reader.commbench("settle", str(target))
        assert settled.returncode == 2, settled.stdout
        assert settled.stderr.startswith("commbench: error: cannot write "), settled.stderr
        assert len(settled.stderr.splitlines()) == 1

    assert _snapshot(copies) == before, f"a reader ({reader.who}) changed the copy"


def _killed(parent: Path) -> tuple[Path, str]:
    launcher = dead_launcher()
    run = abandoned_run(parent, launcher, journaled=3, written=1)
    return run, f"its launcher (pid {launcher.pid}) is gone"


def test_reading_a_killed_run_changes_nothing_and_settle_writes_it(tmp_path: Path) -> None:
    """As root, on a directory anyone could write: the readers still write nothing."""
    run, why = _killed(tmp_path / "runs")
    suite = _suite(tmp_path / "suites", {"killed": run, "ok": RUNS / "cpu-gloo-a"})
    before, suite_before = _snapshot(run), _snapshot(suite)
    cli = CliRunner()
    elsewhere = tmp_path / "elsewhere"
    for target in (run, suite):
        for args in (
            ["report", str(target)],
            ["compare", str(target), str(target), "--out", str(elsewhere / "compare.txt")],
            ["plot", str(target), "--out", str(elsewhere / "plots"), "--formats", "svg"],
            ["report", str(target), "--out", str(elsewhere / "report.md")],
        ):
            assert cli.invoke(app, args).exit_code in (0, 1), args
    assert cli.invoke(app, ["export", str(run), "--out", str(elsewhere / "m.prom")]).exit_code == 0
    assert load_run(run).record.status is RunStatus.INTERRUPTED
    assert len(load_suite(suite).runs()["killed"].rows) == 3
    assert _snapshot(run) == before and _snapshot(suite) == suite_before

    settled = cli.invoke(app, ["settle", str(run)])
    assert settled.exit_code == 0, settled.output
    assert settled.stdout == (
        f"{run}: settled: run.json says interrupted ({why}); 2 point(s) from events.jsonl "
        "written into results.json and results.csv\n"
    )
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "interrupted" and record["failure"] == why
    assert record["points_done"] == 3 and "launcher" not in record
    assert [w for w in record["warnings"] if "commbench settle (pid " in w]
    stored = json.loads((run / "results.json").read_text())["rows"]
    assert [r["size_bytes"] for r in stored] == [1024, 2048, 4096]
    assert len((run / "results.csv").read_text().splitlines()) == 1 + 3
    after = _snapshot(run)
    again = cli.invoke(app, ["settle", str(run), str(suite)])
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines() == [
        f"{run}: left as it is: it is interrupted",
        f"{suite / 'killed'}: settled: run.json says interrupted ({why}); 2 point(s) from "
        "events.jsonl written into results.json and results.csv",
        f"{suite / 'ok'}: left as it is: it is complete",
    ]
    assert _snapshot(run) == after


@pytest.mark.parametrize(
    ("command", "into"),
    [
        ("plot", None),  # its default: RUN_DIR/plots
        ("plot", "figures"),
        ("report", "report.md"),
        ("export", "metrics.prom"),
        ("compare", "compare.txt"),
    ],
)
def test_a_command_that_writes_into_the_run_settles_it(
    tmp_path: Path, command: str, into: str | None
) -> None:
    run, why = _killed(tmp_path / "runs")
    args = [command, str(run), *([str(run)] if command == "compare" else [])]
    if into is not None:
        args += ["--out", str(run / into)]
    if command == "plot":
        args += ["--formats", "svg"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == (1 if command == "compare" else 0), done.output
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "interrupted" and record["failure"] == why
    assert [w for w in record["warnings"] if f"commbench {command} (pid " in w], record
    assert len(json.loads((run / "results.json").read_text())["rows"]) == 3


def test_plotting_a_suite_into_it_settles_its_killed_entry(tmp_path: Path) -> None:
    run, why = _killed(tmp_path / "runs")
    suite = _suite(tmp_path / "suites", {"killed": run, "ok": RUNS / "cpu-gloo-a"})
    ok_before = _snapshot(suite / "ok")
    done = CliRunner().invoke(app, ["plot", str(suite), "--formats", "svg"])
    assert done.exit_code == 0, done.output
    assert (suite / "plots").is_dir()
    record = json.loads((suite / "killed" / "run.json").read_text())
    assert record["status"] == "interrupted" and record["failure"] == why
    assert _snapshot(suite / "ok") == ok_before
