"""A usage error answers at once: it imports no torch, pandas, matplotlib or numpy, whichever
command it is and whatever is wrong (an unknown option, a value of the wrong type, a missing
argument, a value the command refuses), and says so in one line with exit 2 (issue 33, G3).

The cost of what is imported is measured, not asserted (timings are no test here): the issue's
report and benchmarks hold the figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from commbench.cli import app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "matplotlib", "numpy")

# Per command: a value of the wrong type for one of its options, and a value it refuses after
# parsing. Paths named here do not exist: the parse fails, or the value is refused, first.
WRONG = {
    "topo": [["--format", "yaml"], ["--from", "no-such.json"]],
    "p2p": [["--src", "first"], ["--dst", "1,,2"]],
    "collectives": [["--iters", "many"], ["--sizes", "1X"]],
    "diagnose": [["--warmup", "1.5"], ["--stages", "everything"]],
    "record": [["--out"], []],  # --out without its value; no job after --
    "replay": [["trace", "--world", "two"], ["no-such-trace", "--dry-run"]],
    "model": [["--bw", "fast"], ["--sizes", "1M,,2M"]],
    "slurm-script": [["--nodes", "two"], ["--time", "1:60:00", "--", "collectives"]],
    "k8s-manifest": [["--image", "i", "--nodes", "2.5"], ["--image", "i", "--name", "Bad_Name"]],
    "run": [["suite.yaml", "--nproc", "x"], ["no-such-suite.yaml"]],
    "compare": [["a", "b", "--alpha", "small"], ["no-such-run", "no-such-run"]],
    "plot": [["run", "--peak", "high"], ["no-such-run"]],
    "report": [["run", "--format", "pdf"], ["no-such-run"]],
    "export": [["run", "--format", "csv"], ["no-such-run"]],
    "import nccl-tests": [["log", "--world-size", "x"], ["no-such.log"]],
    "settle": [["run", "--format", "json"], ["no-such-run"]],
    "history add": [["run", "--db"], ["no-such-run", "--db", "h.db"]],
    "history list": [["--format", "yaml"], ["--db", "no-such.db"]],
    "history show": [["x", "--format", "yaml"], ["x", "--db", "no-such.db"]],
    "history changes": [["--sizes", "1X"], ["--db", "no-such.db"]],
    "history plot": [["--format", "gif"], ["--db", "no-such.db"]],
}

PROBE = r"""
import json, sys
cases, out = json.loads(sys.argv[1]), sys.argv[2]
from commbench.cli import main
found = []
for args in cases:
    sys.argv = ["commbench", *args]
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
    found.append({"args": args, "code": code, "heavy": heavy})
with open(out, "w") as f:
    json.dump(found, f)
""".replace("set(HEAVY)", repr(set(HEAVY)))


def _commands() -> list[tuple[str, bool]]:
    """Every command as typed, and whether it takes a required argument."""
    group = typer.main.get_group(app)
    found = []
    for name, command in sorted(group.commands.items()):
        for sub_name, sub in sorted(getattr(command, "commands", {None: command}).items()):
            required = any(p.param_type_name == "argument" and p.required for p in sub.params)
            found.append((f"{name} {sub_name}" if sub_name else name, required))
    return found


def test_every_command_has_its_wrong_values() -> None:
    assert {name for name, _ in _commands()} == set(WRONG)


@pytest.mark.parametrize(("name", "required"), _commands())
def test_a_usage_error_imports_nothing_heavy(name: str, required: bool, tmp_path: Path) -> None:
    command = name.split()
    cases = [[*command, "--no-such-option"]] + [[*command, *args] for args in WRONG[name]]
    if required:
        cases.append(command)  # its argument missing
    out = tmp_path / "found.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(cases), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == len(cases), proc.stderr  # one line each
    for case, line in zip(json.loads(out.read_text()), lines, strict=True):
        assert case["code"] == 2, (case, line)
        assert line.startswith("commbench: error: "), (case, line)
        assert case["heavy"] == [], (case, line)  # imported by the first case that shows it
