"""docs/architecture.md's import rules are the code's (issue 36, item 8): the foundations
import only one another, and each arrow `**`part`** → a, b` names every part above the
foundations that `part` imports, no more and no fewer."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from tests.test_import_map import _part, imports

DOC = Path(__file__).parents[1] / "docs" / "architecture.md"
ARROW = re.compile(r"\*\*`([a-z0-9_]+)/?`\*\* → ([a-z0-9_, ]+?)(?: only)?:")


def _section() -> str:
    text = DOC.read_text()
    return text[text.index("The core, from the bottom up") : text.index("Inside a package")]


def _foundations() -> set[str]:
    bullet = _section().split("- **Foundations**", 1)[1].split("\n- ", 1)[0]
    return set(re.findall(r"`([a-z0-9_]+)`", bullet))


def _arrows() -> dict[str, set[str]]:
    out = {}
    for part, listed in ARROW.findall(_section().replace("\n  ", " ")):
        names = {n.strip() for n in listed.split(",")}
        out[part] = names - {"foundations"}
    return out


def _imported() -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for importer, imported, _ in imports():
        a, b = _part(importer), _part(imported)
        if a != b:
            out[a].add(b)
    return out


def test_the_foundations_import_only_one_another() -> None:
    foundations = _foundations()
    assert {"errors", "version", "completion", "sizes", "heatmap"} <= foundations
    imported = _imported()
    for part in foundations:
        assert imported[part] <= foundations, (part, imported[part] - foundations)


def test_each_arrow_names_exactly_what_its_part_imports() -> None:
    arrows, foundations, imported = _arrows(), _foundations(), _imported()
    assert len(arrows) >= 15, sorted(arrows)
    for part, listed in arrows.items():
        assert imported[part] - foundations == listed, (
            f"{part}: the doc says → {sorted(listed)}; the code imports "
            f"{sorted(imported[part] - foundations)}"
        )
    # every part of the core has its arrow (the front, api and cli, has none)
    core = set(imported) - foundations - {"api", "cli", "__init__", "__main__"}
    assert core <= set(arrows), sorted(core - set(arrows))
