"""Every command has help text and is documented in the README (sqlite-utils' test_docs); every
command and option the README and docs/ name exists; their links resolve."""

import re
from pathlib import Path
from typing import Any

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


ROOT = Path(__file__).parent.parent
PAGES = {"README.md": README} | {
    f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))
}
MENTION = re.compile(r"commbench((?:[ \t]+(?:\\\n)?[^\s`|;&)]+)+)")
"""`commbench` followed by its words, up to the end of the line, of inline code or a pipe."""


def _commands() -> dict[str, Any]:
    """Every command by its name as typed (`import nccl-tests` too). Typer's command classes
    are its vendored click's, which no public name exports: Any."""
    group = typer.main.get_group(app)
    out: dict[str, Any] = {}
    for name, command in group.commands.items():
        out[name] = command
        for sub, inner in getattr(command, "commands", {}).items():  # import nccl-tests
            out[f"{name} {sub}"] = inner
    return out


def code_of(text: str) -> str:
    """The code of a markdown page: its fenced blocks and inline code spans, one per line
    (prose says "commbench reads ..."; code is what a reader types)."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    inline = re.findall(r"`([^`\n]+)`", prose)
    return "\n".join([*fenced, *inline])


def mentions(text: str) -> list[tuple[str, list[str]]]:
    """(command, the flags given to it) of every `commbench CMD ... --flag` in the text's
    code."""
    found = []
    for match in MENTION.finditer(code_of(text)):
        words = match.group(1).replace("\\\n", " ").split()
        if not words or not re.fullmatch(r"[a-z][a-z0-9-]*", words[0]):
            continue
        name = words[0]
        if len(words) > 1 and f"{name} {words[1]}" in _commands():
            name = f"{name} {words[1]}"
        flags = []
        for word in words[1:]:
            if word == "--":  # slurm-script: the wrapped command follows
                break
            flag = re.match(r"^\[?(--?[a-zA-Z][a-zA-Z0-9-]*)", word)
            if flag:
                flags.append(flag.group(1))
        found.append((name, flags))
    return found


def test_the_readme_is_a_front_page() -> None:
    assert len(README) <= 15_000, f"README.md is {len(README)} characters (at most 15,000)"
    assert len(PAGES) >= 6 and "docs/architecture.md" in PAGES


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_command_and_option_named_exists(page: str) -> None:
    commands = _commands()
    known_words = {"--help", "-h", "--version"}
    wrong = []
    for name, flags in mentions(PAGES[page]):
        command = commands.get(name)
        if command is None:
            wrong.append(f"commbench {name}: no such command")
            continue
        opts = {opt for p in command.params for opt in [*p.opts, *p.secondary_opts]}
        wrong += [
            f"commbench {name} {f}: no such option" for f in flags if f not in opts | known_words
        ]
    assert not wrong, f"{page}: " + "; ".join(sorted(set(wrong)))


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_link_to_a_file_resolves(page: str) -> None:
    base = ROOT / Path(page).parent
    broken = []
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", PAGES[page], flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"(https?:|mailto:|#)", target):
            continue
        path = target.split("#", 1)[0]
        if path and not (base / path).exists():
            broken.append(target)
    assert not broken, f"{page}: links to nothing: {broken}"


def test_the_check_catches_a_wrong_option() -> None:
    """The test above could fail: a mistyped flag and a made-up command are caught."""
    assert mentions("commbench reads; run `commbench collectives --sizez 1K` now") == [
        ("collectives", ["--sizez"])
    ]
    commands = _commands()
    opts = {o for p in commands["collectives"].params for o in p.opts}
    assert "--sizez" not in opts and "--sizes" in opts
    assert mentions("then `commbench import nccl-tests --op all_reduce x.log`") == [
        ("import nccl-tests", ["--op"])
    ]
