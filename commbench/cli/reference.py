"""docs/cli.md, the reference of every command and option, made from the declarations; and
the `--format` lists of the synopses in docs/, from the format registry.

The page is generated (`make docs`, or `python -m commbench.cli.reference > docs/cli.md`;
`--synopses docs` rewrites the synopses)
and a test compares the committed page with a fresh one, so the documented defaults and
help cannot drift from what `--help` prints and what the API takes: all three are read from
the same request records (`commbench.options`).
"""

from __future__ import annotations

import enum
import re
import sys
from pathlib import Path
from typing import Any

import typer

from commbench.cli import app

HEADER = """# Command reference

Generated from the declarations of each command's options (`commbench/options.py`) by
`make docs`; do not edit by hand. Each option is also the keyword of the command's Python
verb (`docs/api.md`), with the same default.
"""


# Typer vendors click since 0.28, so its classes are not importable by a public name: the
# parameters are told apart by click's own attribute for it (`param_type_name`).


def _default(param: Any) -> str:
    value: Any = param.default
    if param.required:
        return "required"
    if param.is_flag and not param.secondary_opts:
        return "off" if not value else "on"
    if value is None or value == [] or value == ():
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    if param.secondary_opts:
        return param.opts[0] if value else param.secondary_opts[0]
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    """Every command below `group`, by its full name (`import nccl-tests`)."""
    found: list[tuple[str, Any]] = []
    for name in sorted(group.commands):
        command = group.commands[name]
        if hasattr(command, "commands"):  # a group of its own
            found += _commands(command, f"{prefix}{name} ")
        else:
            found.append((f"{prefix}{name}", command))
    return found


def reference() -> str:
    """The page, as markdown."""
    group = typer.main.get_group(app)
    lines = [HEADER]
    for name, command in _commands(group, ""):
        lines.append(f"## commbench {name}\n")
        lines.append(_cell(command.help or "") + "\n")
        rows = []
        for param in command.params:
            if param.param_type_name == "argument":
                meta = param.metavar or (param.name or "").upper()
                what = f"`{meta}`" + (" ..." if param.nargs == -1 else "")
                help_text = getattr(param, "help", "") or ""
                rows.append(f"| {what} | | {_cell(help_text)} |")
                continue
            if param.param_type_name != "option" or param.hidden:
                continue
            flags = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            rows.append(f"| {flags} | {_default(param)} | {_cell(param.help or '')} |")
        if rows:
            lines.append("| option | default | what |\n|---|---|---|")
            lines.append("\n".join(rows) + "\n")
    return "\n".join(lines)


_COMMAND_LINE = re.compile(r"^(?:\$ )?commbench ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")
_FORMAT_LIST = re.compile(r"(--format )([a-z-]+(?:\|[a-z-]+)+)")


def format_choices() -> dict[str, list[str]]:
    """Every command's `--format` choices, by its full name: the format registry's formats
    that write what it prints (`flags.Output`)."""
    group = typer.main.get_group(app)
    found = {}
    for name, command in _commands(group, ""):
        for param in command.params:
            if param.name == "fmt":
                annotation = param.type_descriptor.annotation
                found[name] = [member.value for member in annotation]
    return found


def with_synopses(page: str, choices: dict[str, list[str]] | None = None) -> str:
    """`page` (a markdown page of docs/) with every `--format a|b|c` in its code blocks
    written as the choices of the command the block runs (the last `commbench NAME` line
    above it), so a synopsis lists the formats the registry gives the command."""
    choices = format_choices() if choices is None else choices
    out, fenced, command = [], False, None
    for line in page.split("\n"):
        if line.startswith("```"):
            fenced, command = not fenced, None
        elif fenced:
            match = _COMMAND_LINE.match(line)
            if match:
                two = f"{match.group(1)} {match.group(2)}"
                command = two if two in choices else match.group(1)
            if command in choices:
                line = _FORMAT_LIST.sub(r"\g<1>" + "|".join(choices[command]), line)
        out.append(line)
    return "\n".join(out)


def write_synopses(docs: Path) -> None:
    """`make docs`: every page of `docs` but this reference, its synopses rewritten."""
    choices = format_choices()
    for page in sorted(docs.glob("*.md")):
        text = page.read_text()
        fresh = with_synopses(text, choices)
        if fresh != text:
            page.write_text(fresh)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--synopses"]:
        write_synopses(Path(sys.argv[2]))
    else:
        print(reference(), end="")
