"""The import map: every import between commbench's parts (at module top or inside a function,
which still runs) goes down the house, never up, so the map has no circles.

A part is a subpackage or a top-level module. Each sits on a floor; a part imports only parts
on lower floors. A newcomer reads the design bottom up: plain values and files, the hardware
(topology), what a run is (results), what is measured (collectives and strategies), how it is
launched, the other run kinds, then reading, comparing and reporting runs, suites, the Python
API and the CLI over it.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.package_source import ROOT, parsed

FLOORS: list[set[str]] = [
    {"errors", "stats", "timing", "version", "completion", "ops"},
    {"numbers", "files", "torch_version", "drawing", "lists", "escape"},
    {"fields", "sizes", "skew", "processes", "heatmap", "tables", "options", "formats"},
    {"gpu_memory", "flags"},
    {"topology"},
    {"health"},
    {"context"},
    {"results"},
    {"arguments"},
    {"collectives"},
    {"strategies", "traces"},
    {"launch"},
    {"p2p", "record"},
    {"importers"},
    {"history"},
    {"compare"},
    {"diagnose"},
    {"replay"},
    {"report"},
    {"suites"},
    {"api"},
    {"cli"},
    {"__main__", "__init__"},
]
FLOOR = {part: i for i, parts in enumerate(FLOORS) for part in parts}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@functools.cache
def imports() -> tuple[tuple[str, str, str], ...]:
    """(importing module, imported module, the name) for every commbench import (found once:
    this file's checks and test_architecture_doc's read them)."""
    found = []
    for path, tree in parsed():
        module = _module(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(module, alias.name, "") for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found += [(module, target, alias.name) for alias in node.names]
    return tuple(f for f in found if f[1] == "commbench" or f[1].startswith("commbench."))


def test_every_part_has_a_floor() -> None:
    parts = {_part(_module(p)) for p in ROOT.rglob("*.py")}
    assert parts <= set(FLOOR), f"give these a floor: {sorted(parts - set(FLOOR))}"


def test_every_import_goes_down_the_house() -> None:
    upward = []
    for importer, target, name in imports():
        a, b = _part(importer), _part(target)
        if a == b:
            continue
        if FLOOR.get(b, -1) >= FLOOR.get(a, -1):
            upward.append(f"{importer} -> {target}{'.' + name if name else ''}")
    assert not upward, "imports that run up the house or sideways:\n" + "\n".join(upward)


def test_no_module_imports_the_package_root() -> None:
    """`commbench/__init__.py` is the top of the house (it re-exports the API's verbs), so
    `from commbench import __version__` ran back up from whatever stamped the version (issue
    36, item 9). Every import names the module it reads: the version is `commbench.version`'s,
    a foundation."""
    upward = [f"{a} -> {b}.{name}" for a, b, name in imports() if b == "commbench"]
    assert not upward, "imports of the package root:\n" + "\n".join(upward)


# -- what a usage error imports (issue 43, item 12) --------------------------------------------

MACHINERY = (
    "torch",
    "pydantic",  # Typer's conversion of every value (commbench.cli._values does it instead)
    "rich",
    "commbench.compare",
    "commbench.launch.launcher",
    "commbench.launch.plane",
    "commbench.launch.store_link",
    "commbench.launch.protocol",
    "commbench.results.lifecycle",
    "commbench.topology",
    "commbench.p2p.run",
    "commbench.replay.run",
)
"""What a verb needs to measure, and what the command line needs to say that a value is
wrong does not: a usage error that imports one of them is as slow again as `--help`."""


@pytest.mark.integration
@pytest.mark.parametrize(
    "args",
    [
        ["collectives", "--ops", "allreduce"],
        ["collectives", "--sizes", "1Q"],
        ["collectives", "--graph", "--device", "cpu"],
        ["collectives", "--format", "yaml"],
        ["p2p", "--src", "x"],
        ["p2p", "--matrix", "--src", "1"],
        ["diagnose", "--sizes", "1Q"],
        ["replay", "TRACE", "--bw", "5"],
    ],
    ids=" ".join,
)
def test_a_wrong_value_is_said_before_the_verbs_machinery_is_imported(
    args: list[str], tmp_path: Path
) -> None:
    """Each value that needs no measurement is checked as the command's request is built
    (`CollectivesRun`, `P2PRun`, `DiagnoseRun`, `ReplayRun`), before the command's body
    imports what measures: one line, exit 2, and none of MACHINERY in the process."""
    code = (
        "import json, sys\n"
        "from commbench.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exc:\n"
        "    print(json.dumps([exc.code, sorted(sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    code_, modules = json.loads(done.stdout)
    assert code_ == 2 and done.stderr.startswith("commbench: error: "), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    loaded = [m for m in MACHINERY if any(n == m or n.startswith(m + ".") for n in modules)]
    assert loaded == [], (args, done.stderr)
