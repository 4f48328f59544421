"""The container image `k8s-manifest --image` runs (Dockerfile, .dockerignore), read by Docker's
own parser (the `dockerfile` package wraps BuildKit's Go parser): no Docker daemon is needed
to check what matters. The base is PyTorch's official CUDA runtime image with a torch
commbench supports; commbench is installed as the README installs it, without the dev extra;
the image runs `commbench`, as a user that is not root; everything it copies is sent to the
build, and nothing of results/, tests/ or their fixtures is."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from commbench.torch_version import TORCH_FLOOR

dockerfile = pytest.importorskip("dockerfile")

ROOT = Path(__file__).parent.parent
OFFICIAL = re.compile(
    r"pytorch/pytorch:(?P<torch>[0-9]+\.[0-9]+)\.[0-9]+-cuda(?P<cuda>[0-9]+\.[0-9]+)"
    r"-cudnn[0-9]+-runtime"
)
"""The tags of PyTorch's official images on Docker Hub: `2.11.0-cuda12.8-cudnn9-runtime`."""


def commands() -> list[dockerfile.Command]:
    return list(dockerfile.parse_file(str(ROOT / "Dockerfile")))


def instructions(name: str) -> list[tuple[str, ...]]:
    return [c.value for c in commands() if c.cmd == name]


def test_the_dockerfile_is_what_docker_builds() -> None:
    """Docker's parser reads the syntax (it refuses an unterminated heredoc) and leaves the
    instructions to the builder: each one here is one the builder knows, and the exec forms
    are JSON arrays (a broken one reads as a shell form)."""
    with pytest.raises(dockerfile.GoParseError):
        dockerfile.parse_string("FROM a\nRUN <<EOF\nno end\n")
    assert not dockerfile.parse_string('FROM a\nENTRYPOINT ["a"\n')[1].json
    assert {c.cmd for c in commands()} <= {name.upper() for name in dockerfile.all_cmds()}
    assert all(c.json for c in commands() if c.cmd in ("ENTRYPOINT", "CMD"))


def test_the_base_is_an_official_pytorch_cuda_runtime_image_with_a_supported_torch() -> None:
    (base,) = instructions("FROM")  # one stage: no builder image left behind
    assert len(base) == 1, base
    match = OFFICIAL.fullmatch(base[0])
    assert match is not None, f"not an official PyTorch CUDA runtime image: {base[0]}"
    torch = tuple(int(n) for n in match.group("torch").split("."))
    assert torch >= TORCH_FLOOR
    assert match.group("cuda").startswith("12.")  # a driver >= 525 (docs/development.md)


def pip_installs() -> list[tuple[str, list[str]]]:
    """Each `pip install` of a RUN: (the WORKDIR it runs in, its words)."""
    found, workdir = [], "/"
    for c in commands():
        if c.cmd == "WORKDIR":
            workdir = c.value[0]
        elif c.cmd == "RUN":
            for step in re.split(r"&&|;|\|\|", c.value[0]):
                words = shlex.split(step)
                if "pip" in words[:3] and "install" in words:
                    found.append((workdir, words))
    return found


def test_commbench_is_installed_as_the_readme_says_without_the_dev_extra() -> None:
    (workdir, words), *more = pip_installs()
    assert not more  # one install: commbench and what it declares
    targets = [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    assert targets == ["."], words  # the project itself: no "[dev]", no other package
    assert "-e" not in words and "--editable" not in words
    # `.` is where the project was copied
    copied = [c.value[-1] for c in commands() if c.cmd == "COPY"]
    assert workdir == "/src" and all(d in ("./", f"./{Path(d).name}") for d in copied)


def test_the_image_runs_commbench_as_a_user_that_is_not_root() -> None:
    assert instructions("ENTRYPOINT") == [("commbench",)]  # the manifest's args go to it
    (user,) = instructions("USER")
    assert user[0].isdigit() and int(user[0]) != 0  # numeric: runAsNonRoot can check it
    from commbench.launch.k8s import WORKDIR

    assert instructions("WORKDIR")[-1] == (WORKDIR,)  # where the manifest's pods work


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _matches(pattern: str, path: str) -> bool:
    """Docker's rule: a pattern (filepath.Match, `**` any number of directories) excludes
    a path when it matches the path or one of its parent directories."""
    regex = re.escape(pattern.strip("/")).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
    regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    parts = path.split("/")
    return any(re.fullmatch(regex, "/".join(parts[:i])) for i in range(1, len(parts) + 1))


def sent(path: str) -> bool:
    """Whether `docker build .` sends `path` (relative to the root): the last pattern that
    matches it decides, a `!` pattern sending it again."""
    keep = True
    for pattern in dockerignore():
        if _matches(pattern.removeprefix("!"), path):
            keep = pattern.startswith("!")
    return keep


def files_under(top: str) -> list[str]:
    """Every file under `top`, relative to the root (links not followed: the sysfs fixtures
    link back up their tree)."""
    return [
        str((Path(d) / f).relative_to(ROOT)) for d, _, names in os.walk(ROOT / top) for f in names
    ]


def test_the_ignore_rules_read_as_docker_reads_them() -> None:
    assert _matches("*", "tests/x.py") and _matches("tests", "tests/fixtures/a/b")
    assert _matches("**/__pycache__", "commbench/cli/__pycache__/x.pyc")
    assert not _matches("commbench/", "commbench2/x") and not _matches("*.md", "docs/x.md")


def test_everything_copied_exists_and_is_sent_to_the_build() -> None:
    for copy in instructions("COPY"):
        *sources, _ = copy
        for source in sources:
            assert (ROOT / source).exists(), source
            assert sent(source), f"{source} is copied but .dockerignore keeps it out"
    # what pip needs from the copy: pyproject.toml's readme, and every module of the package
    assert re.search(r'^readme = "README.md"$', (ROOT / "pyproject.toml").read_text(), re.M)
    package = [p for p in (ROOT / "commbench").rglob("*.py") if "__pycache__" not in p.parts]
    assert package and all(sent(str(p.relative_to(ROOT))) for p in package)


def test_results_tests_and_fixtures_stay_out_of_the_build() -> None:
    """Every file under results/, tests/ (their fixtures with them), benchmarks/, docs/ and
    .ci/ is left out of the build context, and so are a run made later and Python's caches."""
    for top in ("results", "tests", "tests/fixtures", "benchmarks", "docs", ".ci"):
        under = files_under(top)
        assert under, top
        assert not any(sent(f) for f in under), [f for f in under if sent(f)][:5]
    assert not sent("results/20240101-000000-collectives/run.json")
    assert sent("commbench/__init__.py") and not sent("commbench/__pycache__/x.pyc")


def env_values() -> dict[str, str]:
    """The ENV instructions' values, in order (a later one replaces an earlier)."""
    found: dict[str, str] = {}
    for value in instructions("ENV"):
        found.update(zip(value[::2], value[1::2], strict=True))
    return found


def run_steps() -> list[list[str]]:
    """Each command of each RUN (split at &&, ;, ||), as words."""
    return [
        shlex.split(step)
        for c in commands()
        if c.cmd == "RUN"
        for step in re.split(r"&&|;|\|\|", c.value[0])
        if step.strip()
    ]


def test_commbench_goes_into_a_venv_that_keeps_the_image_s_torch() -> None:
    """A base image whose Python is marked externally managed (PEP 668) refuses a plain
    `pip install`: commbench goes into a venv, made before it with the image's packages
    visible (--system-site-packages: the image's torch and NCCL, not a second torch), its
    bin/ first on PATH, so that the ENTRYPOINT's `commbench` is the venv's."""
    (venv,) = [words for words in run_steps() if words[1:3] == ["-m", "venv"]]
    assert "--system-site-packages" in venv
    where = venv[-1]
    (_, words), *_ = pip_installs()
    assert words[:3] == [f"{where}/bin/python", "-m", "pip"], words
    assert env_values()["PATH"].split(":")[0] == f"{where}/bin"
    # made before the install, which must find it
    order = [" ".join(words) for words in run_steps()]
    assert order.index(" ".join(venv)) < order.index(" ".join(words))


def test_the_image_has_ibverbs_for_nccl_s_infiniband_transport() -> None:
    """NCCL loads libibverbs.so.1 for InfiniBand and RoCE; without it NCCL between nodes
    falls back to TCP sockets, whatever RDMA device the pod is given."""
    installed = {w for words in run_steps() if "apt-get" in words[:2] for w in words}
    assert {"libibverbs1", "ibverbs-providers"} <= installed


def test_the_image_s_user_is_the_one_the_manifest_runs_its_pods_as() -> None:
    from commbench.launch.k8s import IMAGE_UID

    (user,) = instructions("USER")
    assert user == (str(IMAGE_UID),)
    made = [words for words in run_steps() if words[0] in ("useradd", "groupadd")]
    assert {w[w.index("--uid") + 1] for w in made if "--uid" in w} == {str(IMAGE_UID)}
    assert {w[w.index("--gid") + 1] for w in made if "--gid" in w} == {str(IMAGE_UID)}


def _marked_python() -> str | None:
    """A Python whose installation is marked externally managed (PEP 668: Debian's
    /usr/bin/python3), with the venv module and setuptools, or None."""
    import shutil
    import subprocess

    for name in ("/usr/bin/python3", shutil.which("python3")):
        if not name or not Path(name).exists():
            continue
        probe = (
            "import sysconfig, os, venv, ensurepip, setuptools, sys; "
            "sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join("
            "sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) else 1)"
        )
        if subprocess.run([name, "-c", probe], capture_output=True, timeout=60).returncode == 0:
            return name
    return None


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_the_dockerfile_s_install_steps_run_on_a_pep_668_python(tmp_path: Path) -> None:
    """No Docker daemon here: the Dockerfile's own venv and pip steps are run, as written
    but for the venv's place and pip's offline flags (no index, no dependencies, the
    marked Python's setuptools), against a Python marked externally managed, where the plain
    `pip install .` the image used to run is refused."""
    import shutil
    import subprocess

    python = _marked_python()
    if python is None:
        pytest.skip("no Python marked externally managed (PEP 668) with venv and setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for copy in instructions("COPY"):
        for source in copy[:-1]:
            if (ROOT / source).is_dir():
                shutil.copytree(
                    ROOT / source, src / source, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy2(ROOT / source, src / source)
    offline = ["--no-index", "--no-deps", "--no-build-isolation"]

    def run(words: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(words, cwd=src, capture_output=True, text=True, timeout=300)

    refused = run([python, "-m", "pip", "install", *offline, "."])
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr

    (venv,) = [words for words in run_steps() if words[1:3] == ["-m", "venv"]]
    where = venv[-1]
    made = run([python, *venv[1:-1], str(tmp_path / "venv")])
    assert made.returncode == 0, made.stderr
    (_, words), *_ = pip_installs()
    into = str(tmp_path / "venv")
    step = [w.replace(where, into, 1) for w in words]
    installed = run(
        [*step[: step.index("install") + 1], *offline, *step[step.index("install") + 1 :]]
    )
    assert installed.returncode == 0, installed.stderr
    assert (tmp_path / "venv" / "bin" / "commbench").exists()
    # the marked Python's own packages stay importable in the venv (the image's torch, there)
    show = "import json, site, sys; print(json.dumps([site.getsitepackages(), sys.path]))"
    base, _ = json.loads(run([python, "-c", show]).stdout)
    _, path = json.loads(run([f"{into}/bin/python", "-c", show]).stdout)
    assert set(base) & set(path), (base, path)
