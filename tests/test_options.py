"""One declaration per option (issue 25, item 1): each command's options are the fields of one
request record, and the command line, the API verb, the suite schema and docs/cli.md all
read them from there. These tests hold every command to it."""

from __future__ import annotations

import dataclasses
import enum
import inspect
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import commbench
from commbench.arguments import Request
from commbench.cli import app
from commbench.cli.reference import _commands, reference
from commbench.collectives.placement import Placement
from commbench.collectives.settings import CollectivesRequest
from commbench.errors import UserError
from commbench.options import cli, command, declared, option, paths, suite_keys, verb

ROOT = Path(__file__).parent.parent

CLI_ONLY = {
    # how the result is shown or where the shown text also goes: the API returns data
    "collectives": {"fmt"},
    "p2p": {"fmt"},
    "diagnose": {"fmt"},
    "replay": set(),
    "run": {"fmt"},
    "model": {"fmt"},
    "compare": {"fmt", "out"},
    "topo": {"fmt", "out"},
    "plot": set(),
    "report": set(),
    "export": set(),
    "settle": set(),
    "import nccl-tests": set(),
    "slurm-script": set(),
    "k8s-manifest": set(),
    "record": set(),
    "history add": set(),
    "history list": {"fmt"},
    "history show": {"fmt"},
    "history changes": {"fmt"},
    "history plot": set(),
}
"""The parameters a command has beyond its request record: each is a way of printing."""


def commands() -> list[tuple[str, Any]]:
    return _commands(typer.main.get_group(app), "")


def verbs() -> dict[type, Any]:
    """Each API verb by the record its keywords are."""
    found = {}
    for name in commbench.__all__:
        fn = getattr(commbench, name)
        record = getattr(fn, "options", None)
        if record is not None:
            found[record] = fn
    return found


def plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def test_every_command_is_listed() -> None:
    assert sorted(name for name, _ in commands()) == sorted(CLI_ONLY)


@pytest.mark.parametrize("name", sorted(CLI_ONLY))
def test_a_command_is_its_record_and_nothing_else(name: str) -> None:
    """Every parameter of the command is a declared field (same flags, default and help)
    or one of its few ways of printing."""
    cmd = dict(commands())[name]
    record = cmd.callback.options
    options = {o.name: o for o in declared(record)}
    params = {p.name: p for p in cmd.params}
    assert set(params) - set(options) == CLI_ONLY[name]
    assert set(options) <= set(params)
    for o in options.values():
        p = params[o.name]
        assert p.help == o.declared.help, o.name
        if o.declared.argument:
            assert p.required == (o.default is dataclasses.MISSING), o.name
            continue
        assert [*p.opts, *p.secondary_opts] == [
            part for spelling in o.flags for part in spelling.split("/")
        ], o.name
        if o.default is dataclasses.MISSING:  # a required flag (k8s-manifest --image)
            assert p.required, o.name
            continue
        assert plain(p.default) == plain(o.default), o.name


@pytest.mark.parametrize("name", sorted(CLI_ONLY))
def test_the_api_verb_takes_the_same_options_with_the_same_defaults(name: str) -> None:
    record = dict(commands())[name].callback.options
    fn = verbs().get(record)
    assert fn is not None, f"no verb in commbench.__all__ takes {record.__name__}"
    assert fn.__doc__, f"{fn.__name__} has no docstring"
    signature = inspect.signature(fn)
    for o in declared(record):
        parameter = signature.parameters[o.name]
        expected = inspect.Parameter.empty if o.default is dataclasses.MISSING else o.default
        assert parameter.default == expected, f"{fn.__name__}({o.name}=...)"


def test_the_api_refuses_an_unknown_keyword() -> None:
    with pytest.raises(TypeError, match="siezs"):
        commbench.run_collectives(siezs="1K")  # type: ignore[call-arg]


def test_docs_cli_md_is_generated_from_the_declarations() -> None:
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == reference(), "docs/cli.md is stale: run `make docs`"


def test_the_reference_names_every_option_with_its_default() -> None:
    page = reference()
    assert "| `--timeout` | `300.0` |" in page
    assert "| `--check`, `--no-check` | --check |" in page
    assert "| `--nodes`, `-N` | `2` |" in page


def test_a_suite_entry_without_keys_measures_what_the_bare_command_measures() -> None:
    """The suite's collectives keys take the declared defaults, so `collectives: true` and
    `commbench collectives` (no flags) are the same sweep."""
    from commbench.suites.config import parse_suite
    from commbench.suites.runner import _collectives_settings

    place = Placement(device="cpu", nproc=2, backend="gloo")
    bare = CollectivesRequest().settings(place)
    section = parse_suite({"collectives": True}).collectives
    assert section is not None
    suite = _collectives_settings(
        place,  # type: ignore[arg-type]  # a Machine has the same three fields
        section.timing,
        ops=section.ops,
        strategies=[],
        sizes=section.sizes.for_device("cpu"),
        dtype=section.dtypes[0],
        reduce_op=section.reduce_op,
        in_place=section.in_place,
        check=section.check,
    )
    assert suite.to_dict() == bare.to_dict()


def test_every_suite_key_is_a_declared_option_and_accepted() -> None:
    from commbench.suites.config import parse_suite

    keys = suite_keys(CollectivesRequest)
    assert {"ops", "sizes", "reduce_op", "check", "in_place", "timeout"} <= set(keys)
    for key in keys:
        with pytest.raises(commbench.errors.UserError, match=f"collectives.{key}"):
            parse_suite({"collectives": {key: {"not": "a value"}}})


def test_help_defaults_are_the_constants_the_code_uses() -> None:
    from commbench.collectives.settings import DEFAULT_MIN_TIME
    from commbench.diagnose.settings import DEFAULT_ITERS
    from commbench.diagnose.settings import DEFAULT_TOLERANCE as DIAG_TOLERANCE
    from commbench.results.names import (
        DEFAULT_ALPHA,
        DEFAULT_LATENCY_TOLERANCE,
        DEFAULT_NOISY_CV,
        DEFAULT_TOLERANCE,
    )

    helps = {name: {p.name: p.help for p in cmd.params} for name, cmd in commands()}
    assert f"Default {DEFAULT_TOLERANCE:.0%}" in helps["compare"]["tolerance"]
    assert f"Default {DEFAULT_LATENCY_TOLERANCE:.0%}" in helps["compare"]["latency_tolerance"]
    assert f"Default {DEFAULT_ALPHA}" in helps["compare"]["alpha"]
    assert f"Default {DEFAULT_NOISY_CV}" in helps["compare"]["noisy_cv"]
    assert f"Default {DEFAULT_MIN_TIME}" in helps["collectives"]["min_time"]
    assert f"Default {DIAG_TOLERANCE:.0%}" in helps["diagnose"]["tolerance"]
    assert f"Default {DEFAULT_ITERS}" in helps["diagnose"]["iters"]


# The machinery itself, on a record of its own


@dataclasses.dataclass(kw_only=True)
class Toy(Request):
    path: Path = dataclasses.field(kw_only=False, metadata={})  # API-only positional
    count: int = dataclasses.field(default=3, metadata=cli("--count", "-c", help="How many."))
    name: str | None = dataclasses.field(default=None, metadata=cli(type=str, help="A name."))
    loud: bool = dataclasses.field(default=False, metadata=cli(help="Shout."))


def test_a_verb_builds_the_record_from_its_keywords() -> None:
    @verb(Toy)
    def toy(request: Toy) -> Toy:
        """Return the request."""
        return request

    got = toy(Path("x"), count=5)
    assert got == Toy(path=Path("x"), count=5)
    assert list(inspect.signature(toy).parameters) == ["path", "count", "name", "loud"]
    assert toy.__doc__ == "Return the request."
    with pytest.raises(TypeError):
        toy(Path("x"), colour="red")  # type: ignore[call-arg]


def test_the_short_forms_declare_the_fields_they_stand_for() -> None:
    """`option(...)`: a keyword-only flag whose default is None unless given (`late=True`
    lists it after the record's own); `cli(...)` in a bare `field`: a required flag;
    `paths(...)`: a positional argument of one path or several, each word a `Path`."""

    @dataclasses.dataclass(kw_only=True)
    class Short:
        runs: list[Path] = dataclasses.field(kw_only=False, metadata=paths("DIR", help="Dirs."))
        debug: bool = option(default=False, late=True, help="Debug logs.")
        image: str = dataclasses.field(metadata=cli(metavar="IMAGE", help="An image."))
        name: str | None = option("--name", "-n", metavar="NAME", help="A name.")

    found = {o.name: o for o in declared(Short)}
    assert list(found) == ["runs", "image", "name", "debug"]
    assert found["name"].default is None and found["name"].flags == ("--name", "-n")
    assert found["image"].default is dataclasses.MISSING and found["debug"].default is False
    assert found["runs"].declared.argument and found["runs"].cli_type == list[Path]
    assert [f.name for f in dataclasses.fields(Short) if not f.kw_only] == ["runs"]

    seen: list[Short] = []
    toy_app = typer.Typer()

    @toy_app.command("toy")
    @command(Short)
    def toy(request: Short) -> None:
        seen.append(request)

    @toy_app.command("other")
    def other() -> None:
        pass

    result = CliRunner().invoke(toy_app, ["toy", "a", "b", "--image", "i", "-n", "x"])
    assert result.exit_code == 0, result.output
    assert seen == [Short([Path("a"), Path("b")], image="i", name="x")]
    assert CliRunner().invoke(toy_app, ["toy", "a"]).exit_code == 2  # --image is required
    help_text = CliRunner().invoke(toy_app, ["toy", "--help"]).output
    assert help_text.index("--image") < help_text.index("--name") < help_text.index("--debug")


def test_a_command_parses_into_the_record() -> None:
    @dataclasses.dataclass(kw_only=True)
    class Flags:
        count: int = dataclasses.field(default=3, metadata=cli("--count", "-c", help="How many."))
        name: str | None = dataclasses.field(default=None, metadata=cli(type=str, help="A name."))
        loud: bool = dataclasses.field(default=False, metadata=cli(help="Shout."))

    seen: list[tuple[Flags, str]] = []
    toy_app = typer.Typer()

    @toy_app.command("toy")
    @command(Flags)
    def toy(request: Flags, extra: str = typer.Option("e", "--extra")) -> None:
        seen.append((request, extra))

    @toy_app.command("other")
    def other() -> None:
        pass

    result = CliRunner().invoke(toy_app, ["toy", "-c", "7", "--loud", "--extra", "x"])
    assert result.exit_code == 0, result.output
    assert seen == [(Flags(count=7, name=None, loud=True), "x")]
    result = CliRunner().invoke(toy_app, ["toy", "--count", "many"])
    # commbench's own number parser: its UserError (commbench's group says it in one line)
    assert isinstance(result.exception, UserError) and "--count" in str(result.exception)
    help_text = CliRunner().invoke(toy_app, ["toy", "--help"]).output
    assert "How many." in help_text and "--name" in help_text and "--extra" in help_text


def test_a_suite_stores_its_defaults_in_its_own_words() -> None:
    """`in_place` left out is stored as the suite file spells it (false), not as the flag
    does ("no"): suite.json's config must read back as a suite entry."""
    from commbench.suites.config import parse_suite

    stored = parse_suite({"collectives": True}).to_dict()["collectives"]
    assert stored["in_place"] is False
    again = parse_suite({"collectives": {"in_place": stored["in_place"]}})
    assert again.collectives is not None and again.collectives.in_place is False


def test_the_first_bad_timing_key_in_the_file_is_the_one_named() -> None:
    from commbench.suites.config import parse_suite

    with pytest.raises(commbench.errors.UserError, match=r"collectives\.warmup"):
        parse_suite({"collectives": {"warmup": "x", "min_time": "y"}})


def test_a_wrong_call_is_worded_for_the_verb() -> None:
    with pytest.raises(TypeError, match=r"^plot_run\(\): too many positional arguments"):
        commbench.plot_run("a", "b")  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"^compare_runs\(\): missing a required argument"):
        commbench.compare_runs("a")  # type: ignore[call-arg]
