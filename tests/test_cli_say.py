"""The command line's lines for the user on stderr (`cli._common.say`): the `commbench: `
prefix is written in one place, so no command words a line of its own differently."""

from __future__ import annotations

import ast

import pytest

from commbench.cli._common import say
from tests.package_source import ROOT, parsed


def test_say_prefixes_the_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    say("warning: one")
    say(3)
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "commbench: warning: one\ncommbench: 3\n"


def _starts_with_prefix(node: ast.expr) -> bool:
    if isinstance(node, ast.JoinedStr) and node.values:
        node = node.values[0]
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("commbench: ")
    )


def test_no_command_echoes_the_prefix_itself() -> None:
    """A `typer.echo("commbench: ...", err=True)` in a command module is what `say` is for."""
    echoed = []
    for path, tree in parsed():
        if path.parent != ROOT / "cli":
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "echo"
                and node.args
                and _starts_with_prefix(node.args[0])
            ):
                echoed.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(echoed) == 1, echoed  # say's own
    assert echoed[0].startswith("cli/_common.py:"), echoed
