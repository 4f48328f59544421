"""commbench's own source, parsed once per session for the checks that read it (the import
map, docs/architecture.md's arrows, the private modules of libraries, the op lists): each
parsed every module again."""

from __future__ import annotations

import ast
import functools
import gc
from pathlib import Path

import commbench

ROOT = Path(commbench.__file__).parent


@functools.cache
def parsed() -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of the package, in path order, with its syntax tree.

    The trees, most of a million objects, are kept for the session, out of the cyclic
    garbage collector's sight (`gc.freeze`, as tests/conftest.py does with what collection
    made): otherwise each full collection after this walked every node of them again, and
    made each about half a second, seconds over the suite."""
    trees = tuple((p, ast.parse(p.read_text(), str(p))) for p in sorted(ROOT.rglob("*.py")))
    gc.collect()  # what is garbage now is freed, not kept with the trees
    gc.freeze()
    return trees
