"""Every code block of README.md and docs/ runs as written, in a fresh copy of the checkout.

A reader copies a block and runs it; so does this test. Each fenced block of README.md and
docs/**/*.md is run in its language:

- a shell block (no info string, `bash`, `sh`, `shell`, `console`) runs through bash
  (`set -eo pipefail`): where its lines start with `$ `, those are the commands and the rest
  is their output; else the whole block is the script;
- `python` runs through python; `yaml`, `json` and `ini` must parse; `promql` must pass
  `promtool check rules` (skipped without promtool, failed without it under CI=true, as
  tests/test_export_metrics.py does).

The blocks of one page run in order in one copy of the checkout (its tracked and unignored
files: what a fresh clone holds), so a page's later blocks see what its earlier ones wrote,
and nothing is written into the checkout itself. What they write goes under `results/` (or a
temporary directory): a reader who follows the page finds no plots/, report.html or topo.json
left in the root of the clone, among its own files. `commbench`, `python` and `torchrun` are the
ones of the Python running the tests, with the copy first on PYTHONPATH.

A block that cannot run here says why in an HTML comment on the line right above it,
`<!-- not-run: REASON -->`, REASON one of `REASONS`; a block whose output is deterministic
may say `<!-- output: as shown -->`, and then its shown output must be the real one, where
a line `...` stands for any lines and `...` inside a line for any text. Blocks marked
"needs a GPU" run on a machine with one (the `gpu` test below).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

REASONS = {
    "needs a GPU": "a CUDA GPU (the `gpu` test runs these where there is one)",
    "needs several nodes": "a torchrun rendezvous across machines, or network namespaces",
    "needs a SLURM cluster": "sbatch, srun and their daemons",
    "needs Kubernetes": "a cluster to apply a manifest to",
    "needs Docker": "a Docker engine to build an image, a registry to push it to",
    "needs root": "writes system directories, installs a daemon, a cron job or a unit",
    "needs a CI runner": "the GPU runner a committed baseline (baselines/<runner>) is for",
    "installs packages": "pip installs into the environment (.ci/run does, in a fresh venv)",
    "is output, not a command": "what a command printed, shown for reading",
    "is a synopsis, not a command": "options in brackets, placeholders, a list of targets",
    "is an excerpt, not a whole program": "lines of a larger program, names defined elsewhere",
}
"""Why a block may stay unrun: the whole list. A new reason is added here, knowingly."""

SHELL = {"", "bash", "sh", "shell", "console"}
LANGUAGES = SHELL | {"python", "yaml", "json", "ini", "promql"}
TOOLS = {"promtool": "Debian's prometheus package: `make metrics-deps`"}
"""Programs a runnable block may need that are not Python's: skipped where absent, except
under CI=true (.ci/run installs them)."""

INSTALLS = re.compile(r"\bpip3?\s+install\b|\bmake\s+(install|demo|test|test-fast|bench)\b")
"""What changes the environment the tests run in (an editable install of the copy, made in a
test, would replace the checkout's), or runs the suite from inside itself."""

BLOCK_TIMEOUT = 600
"""Seconds one block may take: a torchrun launch on a busy 2-core machine, with margin."""

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)[^`]*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
AS_SHOWN = re.compile(r"^\s*<!--\s*output:\s*as shown\s*-->\s*$")
MARKER = re.compile(r"^\s*<!--\s*(not-run|output)\b")


@dataclass(frozen=True)
class Block:
    page: str
    """The page's path from the repository root."""
    line: int
    """The line of its opening fence (1-based)."""
    lang: str
    text: str
    """Its lines, without the fences and the indentation of a list item."""
    not_run: str | None = None
    """Why it is not run (`<!-- not-run: ... -->` right above it)."""
    as_shown: bool = False
    """Its shown output is checked (`<!-- output: as shown -->` right above it)."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a markdown page, with the marker of each."""
    lines = path.read_text().splitlines()
    page = path.relative_to(ROOT).as_posix()
    found = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1 : end]]
        above = lines[i - 1] if i > 0 else ""
        reason = NOT_RUN.match(above)
        found.append(
            Block(
                page=page,
                line=i + 1,
                lang=opening["info"].lower(),
                text="\n".join(body) + "\n",
                not_run=reason["reason"] if reason else None,
                as_shown=AS_SHOWN.match(above) is not None,
            )
        )
        i = end + 1
    return found


BLOCKS = {page: blocks_of(page) for page in PAGES}
ALL = [b for blocks in BLOCKS.values() for b in blocks]


# --- the markers (no process: the fast lane) -----------------------------------------------


@pytest.mark.parametrize("block", ALL, ids=lambda b: b.where)
def test_every_block_is_runnable_or_says_why_not(block: Block) -> None:
    if block.not_run is not None:
        assert block.not_run in REASONS, (
            f"{block.where}: not-run reason {block.not_run!r} is not one of: " + "; ".join(REASONS)
        )
        return
    assert block.lang in LANGUAGES, (
        f"{block.where}: a ```{block.lang} block: run it in a language this test knows "
        f"({', '.join(sorted(LANGUAGES - {''}))}) or mark it <!-- not-run: REASON -->"
    )
    if block.lang in SHELL:
        assert not INSTALLS.search(block.text), (
            f"{block.where}: installs packages or runs the suite: mark it "
            "<!-- not-run: installs packages -->"
        )
    if block.as_shown:
        assert block.lang in SHELL and commands_of(block.text)[1], (
            f"{block.where}: `output: as shown` needs `$ ` commands and their output"
        )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_marker_sits_right_above_a_block(page: Path) -> None:
    """A marker a line too high marks nothing, and its block would run: say so instead."""
    lines = page.read_text().splitlines()
    marked = {b.line - 1 for b in BLOCKS[page] if b.not_run is not None or b.as_shown}
    stray = [n for n, line in enumerate(lines, 1) if MARKER.search(line) and n not in marked]
    assert not stray, f"{page.name}: markers not on the line right above a fence: {stray}"


def test_the_reasons_are_documented() -> None:
    """docs/development.md lists the markers and every reason, so a writer finds them."""
    text = (ROOT / "docs" / "development.md").read_text()
    missing = [r for r in REASONS if r not in text]
    assert "<!-- not-run: " in text and "<!-- output: as shown -->" in text
    assert not missing, f"docs/development.md does not list: {missing}"


def commands_of(text: str) -> tuple[list[str], list[str]]:
    """A console block's commands (`$ ` lines, with their `\\` continuations) and its shown
    output (every other line); no `$ ` line: the whole block is one script, no output."""
    lines = text.splitlines()
    if not any(line.startswith("$ ") for line in lines):
        return [text], []
    commands: list[str] = []
    output: list[str] = []
    continued = False
    for line in lines:
        if continued:
            commands[-1] += "\n" + line
        elif line.startswith("$ "):
            commands.append(line[2:])
        else:
            output.append(line)
            continue
        continued = line.endswith("\\")
    return commands, output


def matches(shown: list[str], real: list[str]) -> bool:
    """The real output, abridged as shown: a line `...` is any lines (none included), `...`
    in a line any text; every other character as printed (trailing blanks aside)."""
    patterns = [
        None
        if line.strip() == "..."
        else re.compile(".*".join(re.escape(part) for part in line.rstrip().split("...")))
        for line in shown
    ]
    real = [line.rstrip() for line in real]
    # shown[i:] matches real[j:]; filled from the end
    ok = [[False] * (len(real) + 1) for _ in range(len(patterns) + 1)]
    ok[len(patterns)][len(real)] = True
    for i in range(len(patterns) - 1, -1, -1):
        for j in range(len(real), -1, -1):
            pattern = patterns[i]
            if pattern is None:
                ok[i][j] = ok[i + 1][j] or (j < len(real) and ok[i][j + 1])
            else:
                ok[i][j] = j < len(real) and bool(pattern.fullmatch(real[j])) and ok[i + 1][j + 1]
    return ok[0][0]


def test_matches_reads_the_abridged_output() -> None:
    real = ["# head", "a  1", "b  2", "c  3", "", "tail line (long)"]
    assert matches(real, real)
    assert matches(["# head", "...", "c  3", "", "tail ... (long)"], real)
    assert matches(["...", "tail line (long)"], real)
    assert not matches(["# head", "a  1"], real)  # the rest was not marked as left out
    assert not matches(
        [
            "# head",
            "a  1",
            "c  3",
            "...",
        ],
        real,
    )  # b is missing, not elided
    assert not matches(["# head", "...", "a  9", "..."], real)  # a number that is not printed
    assert not matches(["...", "tail (long)"], real)


# --- running them --------------------------------------------------------------------------


def fresh_copy(into: Path) -> Path:
    """The checkout's tracked and unignored files (a fresh clone of this working tree),
    copied into `into`; symlinks stay links (the sysfs fixtures are full of them)."""
    try:
        listed = subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: all but what git ignores
        ignored = shutil.ignore_patterns(".git", "results", "__pycache__", "*.egg-info", ".*cache")
        shutil.copytree(ROOT, into, symlinks=True, ignore=ignored)
        return into
    for name in filter(None, listed.split("\0")):
        src, dst = ROOT / name, into / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet in git
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return into


def environment(clone: Path) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)  # its python and torchrun
    # `commbench` is the copy's, installed or not (make gpu-check runs from a plain checkout)
    shim = clone / ".docs-bin"
    shim.mkdir(exist_ok=True)
    script = shim / "commbench"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m commbench "$@"\n')
    script.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(shim), bin_dir, env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(clone), env.get("PYTHONPATH")]))
    for name in ("GITHUB_STEP_SUMMARY", "COMMBENCH_SYSFS_ROOT"):  # what a reader has not set
        env.pop(name, None)
    return env


def missing_tool(block: Block) -> str | None:
    for tool, where in TOOLS.items():
        if re.search(rf"\b{tool}\b", block.text) and shutil.which(tool) is None:
            return f"{tool} ({where})"
    return None


def run_block(block: Block, clone: Path, env: dict[str, str]) -> str | None:
    """Run one block in `clone`; None when it did what the page says, else why not."""

    def run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=clone,
            env=env,
            input=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )

    if block.lang in SHELL:
        commands, shown = commands_of(block.text)
        script = "set -eo pipefail\n" + "\n".join(commands) + "\n"
        done = run(["bash", "-c", script, "docs-block"])
    elif block.lang == "python":
        shown = []
        done = run([sys.executable, "-c", block.text])
    elif block.lang == "promql":
        return check_promql(block, clone)
    else:
        return parse_error(block)
    tail = "\n".join(done.stdout.splitlines()[-40:])
    if done.returncode != 0:
        return f"exit {done.returncode}; its output ends:\n{tail}"
    if block.as_shown and not matches(shown, done.stdout.splitlines()):
        return f"the output is not the one shown; the real one:\n{done.stdout}"
    return None


def parse_error(block: Block) -> str | None:
    try:
        if block.lang == "yaml":
            yaml.safe_load(block.text)
        elif block.lang == "json":
            json.loads(block.text)
        else:
            configparser.ConfigParser(interpolation=None).read_string(block.text)
    except (yaml.YAMLError, ValueError, configparser.Error) as exc:
        return f"does not parse as {block.lang}: {exc}"
    return None


def promql_expressions(text: str) -> list[str]:
    """The expressions of a block: a line that starts a new one begins outside any bracket."""
    exprs: list[str] = []
    depth = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        if depth == 0 and not line[0].isspace() and line[0] not in ")]}":
            exprs.append(line)
        else:
            exprs[-1] += "\n" + line
        depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
    return exprs


def check_promql(block: Block, clone: Path) -> str | None:
    rules = {
        "groups": [
            {
                "name": "docs",
                "rules": [
                    {"record": f"docs:expr_{i}", "expr": expr}
                    for i, expr in enumerate(promql_expressions(block.text))
                ],
            }
        ]
    }
    path = clone / f".docs-promql-{block.line}.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return None if done.returncode == 0 else f"promtool: {done.stdout}{done.stderr}"


WRITES = re.compile(r"(?:^|\s)(?:-o|--out|>>?)(?:\s+|=)?(?P<target>[^\s&|;]+)")
"""Where a shell line writes: an `-o`/`--out` argument, a `>`/`>>` redirection."""
ELSEWHERE = re.compile(r"results(/|$)|/tmp/|/dev/null$|\$|\"\$|&")
"""What a block may write to: results/, a temporary directory, a variable's (a mktemp's)."""


def test_no_block_writes_outside_results() -> None:
    """A reader runs the blocks in their clone: what they write goes under results/ (which
    git ignores) or a temporary directory, never among the clone's own files."""
    found = []
    for block in ALL:
        if block.not_run is not None or block.lang not in SHELL:
            continue
        for command in commands_of(block.text)[0]:
            for line in command.splitlines():
                code = line.split(" #")[0]  # a comment says what it writes, in words
                for match in WRITES.finditer(code):
                    if not ELSEWHERE.match(match["target"]):
                        found.append(f"{block.where}: {line.strip()[:100]}")
    assert not found, "write under results/ or a temporary directory:\n" + "\n".join(found)


def files_of(root: Path) -> set[str]:
    """Every path under `root`, relative, links not followed, without Python's caches and
    the test's own `.docs-*` files."""
    found = set()
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in [*dirs, *names]:
            path = (Path(top) / name).relative_to(root).as_posix()
            if not path.startswith(".docs-"):
                found.add(path)
    return found


def run_page(page: Path, blocks: list[Block], tmp_path: Path) -> None:
    """Run `blocks` of `page` in order in one fresh copy; fail with every block that did
    not do what the page says (not only the first), and if they left anything outside
    results/ in the copy."""
    clone = fresh_copy(tmp_path / "clone")
    env = environment(clone)
    before = files_of(clone)
    failures, skipped, took = [], [], []
    for block in blocks:
        absent = missing_tool(block)
        if absent is not None:
            if os.environ.get("CI"):
                failures.append(f"{block.where}: needs {absent}: .ci/run installs it")
            else:
                skipped.append(f"{block.where}: needs {absent}")
            continue
        start = time.monotonic()
        why = run_block(block, clone, env)
        took.append(f"{block.where} {time.monotonic() - start:.1f} s")
        if why is not None:
            failures.append(f"{block.where} ({block.lang or 'shell'}): {why}")
    print("\n".join(["time per block:", *took, *skipped]))
    left = sorted(p for p in files_of(clone) - before if not p.startswith("results"))
    if left:
        failures.append(f"{page.name}: written outside results/: {', '.join(left[:10])}")
    assert not failures, "\n\n".join(failures)
    if skipped:
        pytest.skip("; ".join(skipped))


RUN_PAGES = [p for p in PAGES if any(b.not_run is None for b in BLOCKS[p])]


@pytest.mark.integration
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    run_page(page, [b for b in BLOCKS[page] if b.not_run is None], tmp_path)


GPU_PAGES = [p for p in PAGES if any(b.not_run == "needs a GPU" for b in BLOCKS[p])]


@pytest.mark.gpu
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", GPU_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_gpu_blocks_run_where_there_is_a_gpu(page: Path, tmp_path: Path) -> None:
    run_page(page, [b for b in BLOCKS[page] if b.not_run == "needs a GPU"], tmp_path)
