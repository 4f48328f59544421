"""Every command has help text and is documented in the README (sqlite-utils' test_docs)."""

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from commbench.cli import app

README = (Path(__file__).parent.parent / "README.md").read_text()


def command_names() -> list[str]:
    group = typer.main.get_group(app)
    return sorted(group.commands)


@pytest.mark.parametrize("name", command_names())
def test_command_has_help_and_is_in_the_readme(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"])
    assert result.exit_code == 0
    group = typer.main.get_group(app)
    assert (group.commands[name].help or "").strip(), f"{name} has no help text"
    assert f"commbench {name}" in README, f"`commbench {name}` is not documented in README.md"


def test_readme_states_the_two_setup_commands() -> None:
    assert "make demo" in README and "make test" in README
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text()
    assert "make test" in ci
