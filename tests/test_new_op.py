"""Adding a collective is one `OpSpec` and the `Collective` class beside it (issue 44): no test
file and no doc file to edit. docs/architecture.md's "Where to add things" lists the files; the
first test holds the list to where the parts live, the second adds an op through those files
alone, in a copy of the tree, and runs the op tests, `make docs` and the CLI there (its
`--ops` choices, an export that refuses it)."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commbench import ops
from commbench.collectives.registry import collective
from commbench.ops import OPS
from tests.package_source import ROOT

REPO = ROOT.parent
ARCHITECTURE = REPO / "docs" / "architecture.md"


def unit_files() -> list[str]:
    """The files docs/architecture.md's "A collective" says adding one touches, in order."""
    text = ARCHITECTURE.read_text()
    bullet = text[text.index("- **A collective**") :]
    bullet = bullet[: bullet.index("\n- **", 1)]
    return re.findall(r"^  \d+\. `([^`]+)`", bullet, re.M)


def test_the_docs_list_the_files_where_an_ops_parts_live() -> None:
    """The declarations' file first, then the one of every op's entry class."""
    entries = {inspect.getsourcefile(type(collective(name))) for name in OPS}
    assert unit_files() == [
        Path(inspect.getsourcefile(ops) or "").relative_to(REPO).as_posix(),
        *sorted(Path(f or "").relative_to(REPO).as_posix() for f in entries),
    ]


# -- the proof: a new op in a copy ------------------------------------------------------------

NEW_SPEC = """
        OpSpec(
            op="all_gather_list",
            factor=_split,
            split=True,
            reduces=False,
            in_place="never",
            shard="in",
            steps=_ring_steps,
            network=_ring_bound,
            entry="AllGatherList",
            call="`all_gather` into a list of n tensors",
            formula="(n-1)/n",
        ),
"""

NEW_CLASS = '''

class AllGatherList(Collective):
    """all_gather into a list of n views of the output: torch's older form of all_gather."""

    def operation(
        self, bufs: Buffers, group: Group, root: int, reduce_op: str, splits: Splits | None
    ) -> Operation:
        pieces = _pieces(bufs.out, group.size)
        return dist.all_gather, (pieces, bufs.inp), {"group": group.handle}

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(piece, 0, s) for s, piece in enumerate(_pieces(bufs.out, group.size))]

    def reference(
        self, inputs: Sequence[torch.Tensor], rank: int, reduce_op: str
    ) -> torch.Tensor | None:
        return torch.cat(list(inputs))
'''

OP_TESTS = [
    "tests/test_ops_declaration.py",
    "tests/test_registry.py",
    "tests/test_ops_check.py",
    "tests/test_specs.py",
    "tests/test_options.py",
    "tests/test_new_op.py::test_the_docs_list_the_files_where_an_ops_parts_live",
]


def _copy(into: Path) -> Path:
    """The package, its tests, its docs and its build files, without caches."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in ("commbench", "tests", "docs"):
        shutil.copytree(REPO / name, into / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "Makefile"):
        shutil.copy2(REPO / name, into / name)
    return into


def _add_op(tree: Path) -> list[str]:
    """all_gather_list, through the files docs/architecture.md lists and no others: its
    `OpSpec` last in `OPS`, its class at the end of the entries' module."""
    declarations, entries = (tree / f for f in unit_files())
    text = declarations.read_text()
    end = '    )\n}\n"""Every op, in display order'
    assert text.count(end) == 1
    declarations.write_text(text.replace(end, NEW_SPEC.lstrip("\n") + end))
    entries.write_text(entries.read_text() + NEW_CLASS)
    return unit_files()


def _run(tree: Path, *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        args, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.integration  # runs pytest, make and the CLI in a copy
def test_a_new_op_is_one_declaration_and_one_class(tmp_path: Path) -> None:
    tree = _copy(tmp_path / "tree")
    _add_op(tree)
    python = sys.executable
    where = _run(tree, python, "-c", "import commbench; print(commbench.__file__)")
    assert where.stdout.strip() == str(tree / "commbench" / "__init__.py"), where
    docs = _run(tree, "make", "-s", "docs", f"PYTHON={python}")
    assert docs.returncode == 0, docs.stderr
    assert (
        "| all_gather_list | `all_gather` into a list of n tensors | (n-1)/n |"
        in (tree / "docs" / "collectives.md").read_text()
    )
    offered = _run(tree, python, "-m", "commbench", "collectives", "--ops", "allgatherlist")
    assert offered.returncode == 2 and "all_gather_list" in offered.stderr, offered  # a choice

    # the op tests, but the ones that start processes; the new op's own cases among them
    lane = ("-p", "no:cacheprovider", "-m", "not integration and not netns and not slurm")
    tests = _run(tree, python, "-m", "pytest", "-q", *lane, *OP_TESTS)
    assert tests.returncode == 0, tests.stdout[-4000:]
    ids = _run(tree, python, "-m", "pytest", "-q", "--co", *lane, *OP_TESTS).stdout.splitlines()
    for module in ("test_ops_declaration", "test_registry", "test_ops_check"):
        assert any(module in i and "all_gather_list" in i for i in ids), module

    # an export that has no meaning for it: refused in one line, exit 2
    run = _run(tree, python, "-c", _WRITE_RUN.format(out=tmp_path / "run"))
    assert run.returncode == 0, run.stderr
    export = _run(
        tree,
        python,
        "-m",
        "commbench",
        "export",
        str(tmp_path / "run"),
        "--format",
        "nccl-tests-json",
    )
    assert export.returncode == 2 and export.stdout == "", export
    assert export.stderr.count("\n") == 1 and "no program for all_gather_list" in export.stderr


_WRITE_RUN = """
from pathlib import Path
from tests.factories import make_row, write_run
rows = [make_row(1 << 20, op="all_gather_list", reduce_op="", world_size=2)]
record = {{"kind": "collectives", "status": "complete", "context": {{"world_size": 2}}}}
write_run(Path("{out}"), rows, record)
"""
