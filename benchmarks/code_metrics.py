"""How easy is commbench to change? The figures issue 25 asks for, measured the same way
before and after each step, from the code's own syntax trees (stdlib only):

* lines: of commbench/**/*.py, with the number of modules and packages;
* the longest functions (def to its last line, nested bodies included);
* circles: import cycles between the modules of one package, and between packages. An
  import anywhere in a module counts (at the top or inside a function: both make the two
  modules need each other), and so does one under `if TYPE_CHECKING:` (issue 44: it never
  runs, but a reader must hold the loop in mind all the same);
* `.get("...")` reads: `X.get(<string literal>, ...)` calls, the untyped reads of parsed
  JSON, leaving out environment lookups (a receiver named `environ` or `*env*`);
* declarations per option: for every option of every command (the real Typer app), the
  number of files that declare its Python name (a def parameter with a default, an annotated
  class field, a schema's `.get("name")`): its command's module, the Python API, the
  settings records and a suite's schema (see `declarations`);
* flag declarations: every flag spelled in the package's syntax tree, as a `cli(...)` field
  of a request record (its names, else the field's name in kebab case) or a
  `typer.Option(...)` typed into a command's body; "flags declared more than once" names the
  flags spelled in more than one place (a shared record or option declares its flag once,
  wherever it is composed);
* duplicate-code pairs: what the `duplicates` tool finds in the package, when it is on PATH
  (skipped, as null, when it is not);
* import time: the median of fresh `python -c "import commbench"` and `commbench --help`.

    python benchmarks/code_metrics.py            # a table
    python benchmarks/code_metrics.py --json     # strict JSON, for a before/after diff
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the package directory."""
    base = package_dir.parent
    out: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_runtime(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, except the bodies of `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imports_of(name: str, path: Path, known: set[str], *, type_checking: bool = True) -> set[str]:
    """The modules of `known` that module `name` imports: at run time, and under `if
    TYPE_CHECKING:` too unless `type_checking` is False."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree) if type_checking else _walk_runtime(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                stem = parts[: len(parts) - node.level + 1]
                base = ".".join(stem + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            for alias in node.names:  # `from pkg import submodule`
                found.add(f"{base}.{alias.name}")
    return {m for m in found if m in known and m != name}


def import_graph(package_dir: Path, *, type_checking: bool = True) -> dict[str, set[str]]:
    """Each module's imports of the package's modules (`imports_of`)."""
    mods = modules(package_dir)
    known = set(mods)
    return {
        name: imports_of(name, path, known, type_checking=type_checking)
        for name, path in mods.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _package_of(module: str, packages: set[str]) -> str:
    while module not in packages and "." in module:
        module = module.rpartition(".")[0]
    return module


def circles(graph: dict[str, set[str]], root: str) -> dict[str, list[list[str]]]:
    """Cycles inside each package (between its direct modules: a subpackage counts as the
    module it is) and between the top-level packages of `root`."""
    packages = {m for m in graph if m == root or _is_package(m, graph)}
    inside: list[list[str]] = []
    by_package: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for src, targets in graph.items():
        for dst in targets:
            parent = _common_parent(src, dst)
            if parent is None:
                continue
            a, b = _child_of(parent, src), _child_of(parent, dst)
            if a != b and a != parent and b != parent:
                by_package[parent][a].add(b)
    for sub in by_package.values():
        inside.extend(_cycles({k: set(v) for k, v in sub.items()}))
    top = {m for m in packages if m.count(".") == 1} | {m for m in graph if m.count(".") == 1}
    between: dict[str, set[str]] = defaultdict(set)
    for src, targets in graph.items():
        for dst in targets:
            a, b = _top(src, top), _top(dst, top)
            if a and b and a != b and _is_package(a, graph) and _is_package(b, graph):
                between[a].add(b)
    return {"inside_packages": sorted(inside), "between_packages": _cycles(dict(between))}


def _is_package(module: str, graph: dict[str, set[str]]) -> bool:
    return any(m.startswith(module + ".") for m in graph)


def _common_parent(a: str, b: str) -> str | None:
    pa, pb = a.split("."), b.split(".")
    common = []
    for x, y in zip(pa, pb):
        if x != y:
            break
        common.append(x)
    return ".".join(common) if common else None


def _child_of(parent: str, module: str) -> str:
    rest = module[len(parent) + 1 :].split(".")[0] if module != parent else ""
    return f"{parent}.{rest}" if rest else parent


def _top(module: str, top: set[str]) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None


def functions(path: Path) -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of every def in the file."""
    tree = ast.parse(path.read_text(), str(path))

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                yield name, (child.end_lineno or child.lineno) - start + 1
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _is_environment(receiver: ast.expr) -> bool:
    name = ""
    if isinstance(receiver, ast.Name):
        name = receiver.id
    elif isinstance(receiver, ast.Attribute):
        name = receiver.attr
    elif isinstance(receiver, ast.Call):  # os.environ.copy().get(...)
        return _is_environment(receiver.func)
    return "env" in name.lower()


def get_reads(path: Path) -> int:
    """`X.get("literal", ...)` calls that are not environment lookups."""
    tree = ast.parse(path.read_text(), str(path))
    count = 0
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not _is_environment(node.func.value)
        ):
            count += 1
    return count


def declared_names(path: Path) -> set[str]:
    """The names the file declares as options would be: a def parameter with a default, an
    annotated class field, or a string key read with `.get("name", ...)` (a schema)."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            names.update(a.arg for a in positional[len(positional) - len(args.defaults) :])
            names.update(a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


DECLARING = ("api.py", "settings.py", "options.py", "config.py")
"""The files where an option can be declared besides its command's own module: the Python
API, the settings records, an options module, a suite's schema."""


def command_options() -> list[tuple[str, str, str]]:
    """(command, python name, module of its callback) of every option of every command."""
    import typer

    from commbench.cli import app

    group: Any = typer.main.get_command(app)
    out = []
    for name, command in sorted(group.commands.items()):
        module = getattr(command.callback, "__module__", "")
        for param in command.params:
            if param.name and param.name not in ("help", "ctx"):
                out.append((name, param.name, module))
    return out


def declarations(package_dir: Path) -> dict[str, Any]:
    """Per option: the files that declare its name, counting its own command's module and
    every file of DECLARING (shared option groups declared once in a common module count
    once, where they are)."""
    base = package_dir.parent
    layers = [p for p in package_dir.rglob("*.py") if p.name in DECLARING]
    declared = {p: declared_names(p) for p in layers}
    per_option: dict[str, int] = {}
    for cmd, name, module in command_options():
        own = base / Path(*module.split(".")).with_suffix(".py")
        count = sum(1 for p in layers if name in declared[p] and p != own)
        if own.is_file() and name in declared_names(own):
            count += 1
        per_option[f"{cmd} --{name}"] = count
    values = list(per_option.values())
    worst = sorted(per_option.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
    return {
        "options": len(values),
        "mean": round(statistics.mean(values), 2) if values else 0.0,
        "max": max(values, default=0),
        "worst": [f"{k}: {v}" for k, v in worst],
    }


def _flag_names(call: ast.Call) -> list[str]:
    """The flags a `cli(...)` / `typer.Option(...)` call spells out: string arguments that
    start with a dash, a `--check/--no-check` pair as both."""
    names: list[str] = []
    for a in call.args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
            names += [n for n in a.value.split("/") if n]
    return names


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def flag_declarations(package_dir: Path) -> dict[str, Any]:
    """Every flag declaration in the package's syntax tree: an `option(...)` or `cli(...)`
    call (a record's field; without names the flag is the field's name, `--min-time` of
    `min_time`), a shared `flag(...)` (`commbench.flags`: its uses, `field_of(WARMUP,
    ...)`, declare nothing) or a `typer.Option(...)` call with its flag spelled out. A flag spelled in
    more than one place is declared more than once: a newcomer who changes it must find the
    others."""
    where: dict[str, list[str]] = defaultdict(list)

    def declare(call: ast.Call, rel: str, field_name: str | None) -> None:
        names = _flag_names(call)
        longs = [n for n in names if n.startswith("--")]
        if longs:  # a declaration counts once, under its long name (`-o` goes with `--out`)
            where[longs[0]].append(f"{rel}:{call.lineno}")
        elif names:
            where[names[0]].append(f"{rel}:{call.lineno}")
        elif field_name is not None:
            where["--" + field_name.replace("_", "-")].append(f"{rel}:{call.lineno}")

    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        rel = str(path.relative_to(package_dir.parent))
        in_field: dict[ast.Call, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                for call in ast.walk(node):
                    if isinstance(call, ast.Call):
                        in_field[call] = node.target.id
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = _callee(node)
            if callee == "cli" or (callee == "option" and isinstance(node.func, ast.Name)):
                # a record's field: its names, else the field's name (`FORMAT.option(...)` is
                # a shared flag's use in a body, declared by its `flag(...)`)
                declare(node, rel, in_field.get(node))
            elif callee in ("flag", "Option"):  # a shared flag, or one typed into a body
                declare(node, rel, None)
    twice = {k: v for k, v in sorted(where.items()) if len(v) > 1}
    return {
        "declarations": sum(len(v) for v in where.values()),
        "flags": len(where),
        "flags_declared_more_than_once": len(twice),
        "declared_more_than_once": [f"{k}: {', '.join(v)}" for k, v in twice.items()],
    }


DUPLICATES_SECONDS = 120


def duplicate_pairs(package_dir: Path) -> int | None:
    """The duplicate-code pairs the `duplicates` tool finds in the package (its first line
    says `N pairs of places ...`); None when the tool is not on PATH or says nothing we can
    read."""
    import re
    import shutil

    tool = shutil.which("duplicates")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, "--most", "200", "--seconds", str(DUPLICATES_SECONDS)],
            cwd=package_dir,
            capture_output=True,
            text=True,
            timeout=DUPLICATES_SECONDS + 60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"^(\d+) pairs? of places", done.stdout, re.MULTILINE)
    return int(found.group(1)) if found else None


def _median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def import_times(runs: int) -> dict[str, float]:
    return {
        "import_commbench_s": _median_seconds([sys.executable, "-c", "import commbench"], runs),
        "help_s": _median_seconds([sys.executable, "-m", "commbench", "--help"], runs),
    }


def record_declared() -> dict[str, Any]:
    """The options whose one declaration is a field of their command's request record
    (`commbench.options`), read from the real Typer app; the others are listed (a command
    without a record counts all of its parameters there). A parameter of the command's own
    body (`--format`, a way of printing) is not an option of the verb and is listed apart.
    Where the app has no records (a checkout before them), every option is outside."""
    import dataclasses

    import typer

    from commbench.cli import app

    def walk(group: Any, prefix: str) -> list[tuple[str, Any]]:
        found = []
        for name, command in sorted(group.commands.items()):
            if hasattr(command, "commands"):
                found += walk(command, f"{prefix}{name} ")
            else:
                found.append((f"{prefix}{name}", command))
        return found

    declared = outside = 0
    printing: list[str] = []
    missing: list[str] = []
    for name, command in walk(typer.main.get_command(app), ""):
        record = getattr(command.callback, "options", None)
        fields = set()
        if record is not None:
            fields = {f.name for f in dataclasses.fields(record) if f.metadata}
        for param in command.params:
            if param.name in ("help", "ctx"):
                continue
            if param.name in fields:
                declared += 1
            elif record is not None:
                printing.append(f"{name} --{param.name}")
            else:
                outside += 1
                missing.append(f"{name} --{param.name}")
    return {
        "in_a_record": declared,
        "not_in_a_record": outside,
        "ways_of_printing": printing,
        "examples_not_in_a_record": missing[:8],
    }


def measure(
    package_dir: Path, *, runs: int = 7, timings: bool = True, duplicates: bool = True
) -> dict[str, Any]:
    mods = modules(package_dir)
    lines = sum(len(p.read_text().splitlines()) for p in mods.values())
    funcs = sorted(
        (
            (n, str(p.relative_to(package_dir.parent)), k)
            for p in mods.values()
            for n, k in functions(p)
        ),
        key=lambda t: -t[2],
    )
    reads = {str(p.relative_to(package_dir.parent)): get_reads(p) for p in mods.values()}
    graph = import_graph(package_dir)
    found = circles(graph, package_dir.name)
    out: dict[str, Any] = {
        "lines": lines,
        "modules": len(mods),
        "packages": sum(1 for p in mods.values() if p.name == "__init__.py"),
        "longest_functions": [f"{n} ({f}): {k}" for n, f, k in funcs[:5]],
        "circles_inside_packages": [" <-> ".join(c) for c in found["inside_packages"]],
        "circles_between_packages": [" <-> ".join(c) for c in found["between_packages"]],
        "get_reads": sum(reads.values()),
        "get_reads_by_file": {k: v for k, v in sorted(reads.items(), key=lambda kv: -kv[1]) if v},
        "declarations_per_option": declarations(package_dir),
        "options_declared_by_a_record": record_declared(),
        "flag_declarations": flag_declarations(package_dir),
    }
    if duplicates:
        out["duplicate_pairs"] = duplicate_pairs(package_dir)
    if timings:
        out.update(import_times(runs))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="strict JSON on stdout")
    parser.add_argument("--runs", type=int, default=7, help="runs per import timing")
    parser.add_argument("--no-timings", action="store_true", help="skip the import timings")
    parser.add_argument("--no-duplicates", action="store_true", help="skip the duplicate-code scan")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    args = parser.parse_args()
    result = measure(
        args.root / "commbench",
        runs=args.runs,
        timings=not args.no_timings,
        duplicates=not args.no_duplicates,
    )
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
        return
    for key, value in result.items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"    {item}")
        elif isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"    {k}: {v}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
