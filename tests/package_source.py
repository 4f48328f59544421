"""commbench's own source, parsed once per session for the checks that read it (the import
map, docs/architecture.md's arrows, the private modules of libraries): each parsed every
module again."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import commbench

ROOT = Path(commbench.__file__).parent


@functools.cache
def parsed() -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of the package, in path order, with its syntax tree."""
    return tuple((p, ast.parse(p.read_text(), str(p))) for p in sorted(ROOT.rglob("*.py")))
