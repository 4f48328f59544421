"""benchmarks/behaviour_snapshot.py's diff: it names every invocation whose exit code, output
or files changed, and none when nothing did. Hand-made snapshots: no process is started (the
snapshot itself runs commbench several hundred times, which is the harness's job, not a
test's)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "behaviour_snapshot", ROOT / "benchmarks" / "behaviour_snapshot.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["behaviour_snapshot"] = module
    spec.loader.exec_module(module)
    return module


snap = _harness()


def _result(argv: list[str], **fields: Any) -> dict[str, Any]:
    return {
        "key": json.dumps(argv),
        "argv": argv,
        "env": {},
        "machine": None,
        "exit_code": 0,
        "stdout": "size  busbw\n  1K   0.10\n",
        "stderr": "",
        "files": {"out/report.md": "# report\n", "plots/a.png": {"kind": "png", "sha256": "ab"}},
        "seconds": 0.5,
        **fields,
    }


BEFORE = {
    "schema": 1,
    "results": [
        _result(["compare", "a", "b"]),
        _result(["model", "--bw", "x"], exit_code=2, stdout="", stderr="error: --bw\n", files={}),
    ],
}


def _write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_identical_snapshots_have_no_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    after = copy.deepcopy(BEFORE)
    for result in after["results"]:
        result["seconds"] = 9.9  # timings are not behaviour
    code = snap.diff_files(_write(tmp_path, "a.json", BEFORE), _write(tmp_path, "b.json", after))
    assert code == 0
    assert capsys.readouterr().out == "0 of 2 invocations differ\n"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"exit_code": 1}, ["-0", "+1"]),
        ({"stdout": "size  busbw\n  1K   0.11\n"}, ["-  1K   0.10", "+  1K   0.11"]),
        ({"stderr": "commbench: warning: noisy\n"}, ["+commbench: warning: noisy"]),
        (
            {
                "files": {
                    "out/report.md": "# Report\n",
                    "plots/a.png": {"kind": "png", "sha256": "ab"},
                }
            },
            ["+++ after file out/report.md", "-# report", "+# Report"],
        ),
        (
            {
                "files": {
                    "out/report.md": "# report\n",
                    "plots/a.png": {"kind": "png", "sha256": "cd"},
                }
            },
            ['-  "sha256": "ab"', '+  "sha256": "cd"'],
        ),
        (
            {"files": {"out/report.md": "# report\n"}},
            ["file plots/a.png: written before, not after"],
        ),
    ],
)
def test_a_changed_field_is_reported_with_its_diff(
    change: dict[str, Any], said: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    after = copy.deepcopy(BEFORE)
    after["results"][0].update(change)
    code = snap.diff_files(_write(tmp_path, "a.json", BEFORE), _write(tmp_path, "b.json", after))
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith('=== ["compare", "a", "b"]\n')
    assert out.endswith("1 of 2 invocations differ\n")
    assert '"model"' not in out  # the unchanged one is not listed
    for line in said:
        assert line in out.splitlines(), out


def test_an_invocation_in_one_snapshot_only_is_a_difference(tmp_path: Path) -> None:
    after = copy.deepcopy(BEFORE)
    after["results"].append(_result(["plot", "run"]))
    found = snap.differences(BEFORE, after)
    assert found == ['=== ["plot", "run"]\nonly in the after snapshot\n']
    assert snap.differences(after, BEFORE) == ['=== ["plot", "run"]\nonly in the before snapshot\n']


def test_the_list_is_several_hundred_distinct_invocations() -> None:
    items = snap.invocations()
    assert len(items) >= 300
    assert len({i.key for i in items}) == len(items)
    commands = {i.argv[0] for i in items if i.argv and not i.argv[0].startswith("-")}
    assert commands == {c.split()[0] for c in snap.COMMANDS}


def test_what_differs_between_runs_is_normalised(tmp_path: Path) -> None:
    normalise = snap.Normaliser(repo=ROOT, host="node-7")
    today = normalise.today
    stamp = today.strftime("%Y%m%d")
    text = (
        f"{tmp_path}/results/{stamp}-214245-nccl-tests on node-7 at {today}T21:42:45+0000; "
        "recorded 2020-01-02T03:04:05+0000 on node-70"
    )
    assert normalise.text(text, tmp_path) == (
        "<TMP>/results/<STAMP>-nccl-tests on <HOST> at <TIME>; "
        "recorded 2020-01-02T03:04:05+0000 on node-70"
    )


def test_every_command_of_the_app_is_in_the_list() -> None:
    """A new command gets its `--help` (and more) in the snapshot: the list is written out,
    so that both checkouts run the same one, and this keeps it complete."""
    import typer

    from commbench.cli import app

    def walk(group: Any, prefix: str) -> list[str]:
        found = []
        for name, command in sorted(group.commands.items()):
            found.append(prefix + name)
            if hasattr(command, "commands"):
                found += walk(command, f"{prefix}{name} ")
        return found

    assert sorted(snap.COMMANDS) == walk(typer.main.get_group(app), "")


def test_only_compares_the_invocations_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A snapshot of a few invocations (`--only`) diffed against a whole one: the others are
    left out, not reported as missing."""
    part = copy.deepcopy(BEFORE)
    part["results"] = [r for r in part["results"] if '"model"' in r["key"]]
    part["results"][0]["stderr"] = "error: --bw!\n"
    whole, few = _write(tmp_path, "a.json", BEFORE), _write(tmp_path, "b.json", part)
    assert snap.diff_files(whole, few, only='"model"') == 1
    out = capsys.readouterr().out
    assert out.startswith('=== ["model", "--bw", "x"]\n') and "compare" not in out
    assert out.endswith("1 of 1 invocations differ\n")
