"""The rooms of commbench.diagnose import one way, in the layers its docstring names: every
import counts (at module top or inside a function), none under `if TYPE_CHECKING:`."""

from __future__ import annotations

import ast
from pathlib import Path

import commbench.diagnose

PACKAGE = Path(commbench.diagnose.__file__).parent
LAYERS = [
    {"plan", "journal", "verdict", "muster"},
    {"expectations"},
    {"settings"},
    {"stages"},
    {"heatmap"},
    {"run", "worker"},
    {"render"},
]
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _rooms_imported(tree: ast.AST) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # for the type checker only: never runs
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            for name in names:
                if name.startswith("commbench.diagnose."):
                    found.add(name.split(".")[2])
            visit(child)

    visit(tree)
    return found & set(LAYER)


def test_every_room_has_a_layer() -> None:
    rooms = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert rooms == set(LAYER)


def test_every_room_imports_only_rooms_below_it() -> None:
    upward = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.stem == "__init__":
            continue
        for room in _rooms_imported(ast.parse(path.read_text())):
            if room != path.stem and LAYER[room] >= LAYER[path.stem]:
                upward.append(f"{path.stem} -> {room}")
    assert not upward, "imports that run up or sideways:\n" + "\n".join(upward)
