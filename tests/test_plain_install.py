"""A plain install works: `pip install .` without the dev extra, into a fresh virtual environment
with no system site-packages, then every command once for real, `--help` and one small
invocation each, through the console script a new user runs (issue 33, A).

On such an install `slurm-script` and `k8s-manifest` with a wrapped command once died importing
click, which Typer only vendors; and `commbench.replay`, a directory without `__init__.py`, was
left out of the wheel, so that every command failed on importing it. Neither shows in an editable
install on a machine that happens to have click.

What makes the venv cheap: torch (a 190 MB wheel, about 40 s to unpack) is linked in file by file
from the torch running these tests, its metadata included, so pip counts it installed and
installs everything else commbench declares, torch's own dependencies too; `--no-compile` leaves
the byte-compiling of pandas and matplotlib to the imports that need them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
import yaml

from commbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
BUILD_INPUTS = ("pyproject.toml", "README.md", "commbench")
"""What the build reads (pyproject.toml: the readme, the packages and their data); the install
is made from a copy of these, so that no build/ or egg-info lands in the checkout."""

NOT_PACKAGES = {"commbench/record/inject"}
"""Directories of .py files that are package data, not packages: the capture's sitecustomize.py
(pyproject.toml's package-data)."""

integration = pytest.mark.integration
"""Every test below but the first starts processes: the venv, pip, the commands."""

TINY = ["--device", "cpu", "--nproc", "2", "--iters", "2", "--warmup", "1"]


def test_every_directory_of_code_is_a_package() -> None:
    """setuptools puts only directories with an `__init__.py` into the wheel (namespaces =
    false, pyproject.toml says why): a directory of modules without one works in a checkout
    and in an editable install, and is missing after `pip install .`."""
    loose = {
        d.relative_to(ROOT).as_posix()
        for d in (ROOT / "commbench").rglob("*")
        if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").is_file()
    }
    assert loose == NOT_PACKAGES, "add an __init__.py (or declare the directory package data)"


@dataclass(frozen=True)
class Venv:
    """A fresh venv holding a plain install of commbench, and how to run its commands."""

    path: Path
    env: dict[str, str]

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def run(self, *args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """A command as a user types it: the venv's `commbench`, from a directory of its own
        (never the checkout, whose commbench/ `python -m` would import first)."""
        return subprocess.run(
            [str(self.path / "bin" / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
        )

    def ok(self, *args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        proc = self.run(*args, cwd=cwd, timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(args)}: exit {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc


def _link_torch(purelib: Path) -> None:
    """The running torch's installed files, hard-linked (copied across file systems) into the
    venv, its dist-info with them. Its scripts (bin/torchrun) are left out: commbench starts
    workers with `python -m torch.distributed.run`."""
    dist = importlib.metadata.distribution("torch")
    if dist.files is None:
        pytest.fail("torch is installed without a RECORD: cannot tell its files")
    for file in dist.files:
        source = Path(str(dist.locate_file(file)))
        if file.parts[0] == ".." or not source.is_file():
            continue
        target = purelib / file
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    base = tmp_path_factory.mktemp("plain")
    path = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=240)
    # Nothing points Python at the checkout or another environment; bytecode is written, as
    # on a user's machine (pip compiled none: --no-compile, so the first import of each does).
    left_out = (
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "VIRTUAL_ENV",
        "PYTHONDONTWRITEBYTECODE",
    )
    env = {k: v for k, v in os.environ.items() if k not in left_out}
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"  # nor ~/.local's packages
    made = Venv(path, env)
    purelib = made.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=base
    ).stdout.strip()
    _link_torch(Path(purelib))
    source = base / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(ROOT / name, source / name)
    made.ok(
        "python", "-m", "pip", "install", "-q", "--no-compile", str(source), cwd=base, timeout=280
    )
    return made


@integration
def test_the_install_is_plain(venv: Venv, tmp_path: Path) -> None:
    """The premise of the tests below: commbench from the venv's site-packages, not the
    checkout; no system site-packages; no dev extra; every requirement met (pip check)."""
    probe = (
        "import importlib.util, json, site, sys, commbench\n"
        "print(json.dumps({'file': commbench.__file__, 'prefix': sys.prefix,\n"
        "  'base': sys.base_prefix, 'path': sys.path, 'system': site.getsitepackages([sys.base_prefix]),\n"
        "  'pytest': importlib.util.find_spec('pytest') is not None}))"
    )
    found = json.loads(venv.ok("python", "-c", probe, cwd=tmp_path).stdout)
    assert found["file"].startswith(found["prefix"]) and "site-packages" in found["file"]
    assert found["prefix"] != found["base"]
    assert not set(found["system"]) & set(found["path"])
    assert not found["pytest"]
    venv.ok("python", "-m", "pip", "check", cwd=tmp_path)


def _command_names() -> list[str]:
    group = typer.main.get_group(app)
    names = []
    for name, command in sorted(group.commands.items()):
        subs = getattr(command, "commands", None)
        names += [f"{name} {sub}" for sub in sorted(subs)] if subs else [name]
    return names


@integration
@pytest.mark.parametrize("name", _command_names())
def test_every_command_answers_help(venv: Venv, tmp_path: Path, name: str) -> None:
    proc = venv.ok("commbench", *name.split(), "--help", cwd=tmp_path)
    assert proc.stdout.startswith(f"Usage: commbench {name} ")


@integration
def test_version_and_python_m(venv: Venv, tmp_path: Path) -> None:
    version = venv.ok("commbench", "--version", cwd=tmp_path).stdout
    assert venv.ok("python", "-m", "commbench", "--version", cwd=tmp_path).stdout == version
    assert version.startswith("commbench ")


# -- one small invocation of each command ----------------------------------------------------


@integration
def test_topo(venv: Venv, tmp_path: Path) -> None:
    """On this GPU-less machine through NVML (nvidia-ml-py) and sysfs, and a fixture."""
    here = venv.ok("commbench", "topo", cwd=tmp_path)
    assert "Host:" in here.stdout
    fixture = venv.ok(
        "commbench", "topo", "--from", str(FIXTURES / "topology/snapshot_dgx1v.json"), cwd=tmp_path
    )
    assert "GPU0<->GPU1" in fixture.stdout


@integration
def test_p2p_dry_run(venv: Venv, tmp_path: Path) -> None:
    proc = venv.ok(
        "commbench", "p2p", "--dry-run", "--topology", str(FIXTURES / "p2p/snapshot_puzzle8.json"),
        "--dst", "1,2,4", cwd=tmp_path,
    )  # fmt: skip
    assert "0->4" in proc.stdout


@integration
def test_model(venv: Venv, tmp_path: Path) -> None:
    proc = venv.ok(
        "commbench", "model", "--bw", "100", "--latency", "5", "--world", "8", "--sizes", "1M,1G",
        cwd=tmp_path,
    )  # fmt: skip
    assert "winner" in proc.stdout


@integration
def test_compare_two_runs(venv: Venv, tmp_path: Path) -> None:
    runs = [str(FIXTURES / "runs" / name) for name in ("cpu-gloo-a", "cpu-gloo-b")]
    proc = venv.run("commbench", "compare", *runs, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr  # passed, or a regression found: both a verdict
    assert "PASS" in proc.stdout or "FAIL" in proc.stdout


@integration
def test_import_nccl_tests(venv: Venv, tmp_path: Path) -> None:
    log = FIXTURES / "nccl_tests" / "gb10x2_all_gather_v2.17.log"
    venv.ok("commbench", "import", "nccl-tests", str(log), "-o", "imported", cwd=tmp_path)
    (run,) = (tmp_path / "imported").iterdir()
    assert json.loads((run / "run.json").read_text())["kind"]


@integration
@pytest.mark.parametrize("scheduler", ["slurm-script", "k8s-manifest"])
def test_a_multi_node_job_with_a_wrapped_command(
    venv: Venv, tmp_path: Path, scheduler: str
) -> None:
    """The wrapped command is parsed here as the nodes will parse it (the click import)."""
    extra = ["--image", "registry.example/commbench:1"] if scheduler == "k8s-manifest" else []
    wrapped = ["collectives", "--device", "cpu", "--nproc", "2", "--sizes", "1K-4K"]
    out = venv.ok("commbench", scheduler, *extra, "--", *wrapped, cwd=tmp_path).stdout
    if scheduler == "slurm-script":
        assert out.startswith("#!") and "#SBATCH" in out
    else:
        assert {"Job", "Service"} <= {d["kind"] for d in yaml.safe_load_all(out) if d}
    assert "collectives --device cpu --nproc 2 --sizes 1K-4K" in out
    bad = venv.run(
        "commbench", scheduler, *extra, "--", "collectives", "--nprocs", "2", cwd=tmp_path
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr


@pytest.fixture(scope="module")
def measured(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny `collectives` run on gloo, 2 CPU ranks: its run directory."""
    work = tmp_path_factory.mktemp("collectives")
    venv.ok(
        "commbench", "collectives", *TINY, "--ops", "all_reduce", "--sizes", "1K", "-o", "out",
        cwd=work,
    )  # fmt: skip
    (run,) = (work / "out").iterdir()
    return run


@integration
def test_collectives(measured: Path) -> None:
    assert json.loads((measured / "run.json").read_text())["status"] == "complete"


@integration
def test_export(venv: Venv, measured: Path, tmp_path: Path) -> None:
    out = venv.ok("commbench", "export", str(measured), cwd=tmp_path).stdout
    assert "# TYPE commbench_" in out


@integration
def test_report_and_plot(venv: Venv, measured: Path, tmp_path: Path) -> None:
    """matplotlib draws for both: the html report embeds its figures."""
    assert venv.ok("commbench", "report", str(measured), cwd=tmp_path).stdout.startswith("# ")
    html = venv.ok("commbench", "report", str(measured), "-f", "html", cwd=tmp_path).stdout
    assert "<html" in html and "data:image/" in html
    venv.ok("commbench", "plot", str(measured), "-o", "plots", cwd=tmp_path)
    assert list((tmp_path / "plots").glob("*.png"))


@integration
def test_run_a_suite(venv: Venv, tmp_path: Path) -> None:
    suite = tmp_path / "tiny.yaml"
    suite.write_text("name: tiny\ncollectives:\n  ops: [all_reduce]\n  sizes: 1K\n  iters: 2\n")
    venv.ok(
        "commbench", "run", str(suite), "--device", "cpu", "--nproc", "2", "--no-plot", "-o", "out",
        cwd=tmp_path,
    )  # fmt: skip
    (suite_dir,) = (tmp_path / "out").iterdir()
    assert suite_dir.name.endswith("suite-tiny")


@integration
def test_diagnose(venv: Venv, tmp_path: Path) -> None:
    proc = venv.ok(
        "commbench", "diagnose", *TINY, "--sizes", "1K", "--stages", "intra", "-o", "out",
        cwd=tmp_path,
    )  # fmt: skip
    assert "healthy" in proc.stderr + proc.stdout


@pytest.fixture(scope="module")
def trace(
    venv: Venv,
    tmp_path_factory: pytest.TempPathFactory,
    hold_port: Callable[..., AbstractContextManager[int]],
) -> Iterator[Path]:
    """A 2-step DDP job of the suite's, recorded on 2 ranks with the venv's torch."""
    work = tmp_path_factory.mktemp("record")
    job = ROOT / "tests" / "jobs" / "ddp_mlp.py"
    with hold_port() as port:
        proc = venv.ok(
            "commbench", "record", "-o", "trace", "--", venv.python, "-m", "torch.distributed.run",
            "--nproc-per-node", "2", "--master-port", str(port), str(job), "--steps", "2",
            cwd=work,
        )  # fmt: skip
    assert "(complete)" in proc.stderr
    yield work / "trace"


@integration
def test_record_and_replay(venv: Venv, trace: Path, tmp_path: Path) -> None:
    plan = venv.ok("commbench", "replay", str(trace), "--dry-run", cwd=tmp_path)
    assert plan.stdout.strip()
    venv.ok("commbench", "replay", str(trace), *TINY, "-o", "out", cwd=tmp_path)
    (run,) = (tmp_path / "out").iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "complete"
