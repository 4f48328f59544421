"""benchmarks/code_metrics.py counts what it says on a package built here: a circle, an import
that only type checkers see, untyped reads and environment lookups, a function's length."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _metrics() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "code_metrics", ROOT / "benchmarks" / "code_metrics.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["code_metrics"] = module
    spec.loader.exec_module(module)
    return module


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "toy"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "a.py").write_text(
        "from toy.inner import b\n\n\ndef f():\n    from toy.inner.c import g\n    return g\n"
    )
    (pkg / "inner" / "b.py").write_text("def h():\n    from . import a\n    return a\n")
    (pkg / "inner" / "c.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from toy.inner import a\n"
        "\n\ndef g(data, os):\n    x = data.get('x')\n    y = os.environ.get('Y')\n"
        "    z = env.get('Z')\n    return x, y, z\n"
    )
    (pkg / "other.py").write_text("from toy.inner import a\n")
    return pkg


def test_a_circle_counts_and_so_does_a_type_checking_import(tmp_path: Path) -> None:
    """A type-only import that closes a loop is still a loop a reader must hold in mind
    (issue 44); leaving it out is asked for by name."""
    metrics = _metrics()
    toy = _package(tmp_path)
    graph = metrics.import_graph(toy)
    assert graph["toy.inner.a"] == {"toy.inner.b", "toy.inner.c", "toy.inner"}
    assert "toy.inner.a" in graph["toy.inner.c"]  # under TYPE_CHECKING
    found = metrics.circles(graph, "toy")
    assert found["inside_packages"] == [["toy.inner.a", "toy.inner.b", "toy.inner.c"]]
    assert found["between_packages"] == []
    runtime = metrics.import_graph(toy, type_checking=False)
    assert "toy.inner.a" not in runtime["toy.inner.c"]
    assert metrics.circles(runtime, "toy")["inside_packages"] == [["toy.inner.a", "toy.inner.b"]]


def test_get_reads_leave_environment_lookups_out(tmp_path: Path) -> None:
    metrics = _metrics()
    assert metrics.get_reads(_package(tmp_path) / "inner" / "c.py") == 1


def test_function_lengths_and_declared_names(tmp_path: Path) -> None:
    metrics = _metrics()
    c = _package(tmp_path) / "inner" / "c.py"
    assert dict(metrics.functions(c)) == {"g": 5}
    source = tmp_path / "decl.py"
    source.write_text(
        "class S:\n    sizes: str = '1K'\n\n\ndef run(out, *, iters=None, warmup):\n"
        "    return section.get('timeout')\n"
    )
    assert metrics.declared_names(source) == {"sizes", "iters", "timeout"}


def test_commbench_has_no_import_circles() -> None:
    """The rooms of every package import one way, and so do the packages: an import at the
    top, inside a function or under `if TYPE_CHECKING:` counts. A new circle names its
    modules here."""
    metrics = _metrics()
    found = metrics.circles(metrics.import_graph(ROOT / "commbench"), "commbench")
    assert found == {"inside_packages": [], "between_packages": []}


def test_flag_declarations_count_each_spelling_where_it_is_declared(tmp_path: Path) -> None:
    """An `option(...)` or `cli(...)` field declares its names (or its field's, in kebab
    case), a shared `flag(...)` declares its own and its uses (`field_of(...)`,
    `FLAG.option(...)`) declare nothing, a `typer.Option(...)` in a body declares its flags;
    a short alias goes with its long name."""
    metrics = _metrics()
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "WARMUP = flag('--warmup', type=int)\n\n\nclass A:\n"
        "    min_time: float = field(metadata=cli(help='x'))\n"
        "    out: str = field(metadata=cli('--out', '-o', help='x'))\n"
        "    warmup: int = field_of(WARMUP, help='x')\n"
        "    job_name: str = option(default='j', help='x')\n"
        "    fmt: str = FORMAT.option('table', help='x')\n"
    )
    (pkg / "b.py").write_text(
        "class B:\n    warmup: int = field_of(WARMUP, help='y')\n"
        "    check: bool = field(metadata=cli('--check/--no-check', help='y'))\n\n\n"
        "def body(fmt=typer.Option('table', '--format', '-f')):\n    pass\n"
        "def other(out=typer.Option(None, '--out', '-o')):\n    pass\n"
    )
    found = metrics.flag_declarations(pkg)
    assert found["flags"] == 6  # --warmup, --min-time, --out, --job-name, --check, --format
    assert found["declarations"] == 7
    assert found["flags_declared_more_than_once"] == 1
    assert found["declared_more_than_once"] == ["--out: toy/a.py:6, toy/b.py:8"]


def test_commbench_declares_each_flag_once() -> None:
    """Issue 36, item 2: a flag that several commands take is one shared declaration
    (`commbench.flags`, `launch/job.py`), so renaming it or changing its type is one edit;
    each record says with `field_of(FLAG, help=...)` what it means for its command."""
    metrics = _metrics()
    found = metrics.flag_declarations(ROOT / "commbench")
    assert found["declared_more_than_once"] == []
    assert found["flags_declared_more_than_once"] == 0
    assert found["flags"] == found["declarations"]


def test_duplicate_pairs_are_skipped_without_the_tool(tmp_path: Path, monkeypatch) -> None:
    """CI may not have the `duplicates` tool: the figure is then None, not an error."""
    metrics = _metrics()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert metrics.duplicate_pairs(ROOT / "commbench") is None
