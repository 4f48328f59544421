"""Stored files are validated as strictly as arguments (issue 24, B).

`compare`, `report`, `plot` and `model --from` read results.json, run.json and suite.json
that someone may have edited; `import nccl-tests` writes what later commands read. A value
commbench does not know (an op, dtype, strategy, reduce op or check), a text that would
inject lines into a report, a number out of the bounds the command line takes, or a field a
reader needs that is missing or null, is refused by every reader: exit 2, one line naming the
file, the field and the value, no traceback. The valid runs are written by the library's own
writers (a version-1 fixture loaded and stored again), so each case differs from a good file
by the one corruption it names.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from commbench.cli import app
from commbench.results.record import Entry, RunStatus, SuiteRecord
from commbench.results.runs import load_run
from commbench.results.store import RunDir, SuiteDir

FIX = Path(__file__).parent / "fixtures"
V1_COLLECTIVES = FIX / "runs" / "cpu-gloo-a"
V1_BASELINE = FIX / "runs" / "cpu-gloo-b"
V2_TWO_NODE = FIX / "runs" / "two-node-gloo-pcie8"
V1_P2P = FIX / "runs" / "p2p-v1"
NCCL_JSON = FIX / "nccl_tests" / "h100x16_2nodes_all_reduce.json"

Doc = dict[str, Any]
Change = Callable[[Doc], Any]


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_refused(result: Result, *fragments: str) -> None:
    """Exit 2, exactly one `commbench: error:` line naming every fragment, no traceback."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert len(lines) == 1 and lines[0].startswith("commbench: error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _stored_again(source: Path, dest: Path, op: str | None = None) -> Path:
    """`source` (any version) read and written again by this commbench's writers; with `op`,
    that op's rows alone."""
    run = load_run(source)
    target = RunDir(dest)
    dest.mkdir(parents=True)
    target.write_record(run.record)
    rows = [r for r in run.rows if op is None or r.op == op]
    target.write_rows(rows, p2p=rows[0].p2p is not None if rows else False)
    return dest


def _set(path: str, value: Any) -> Change:
    """A change setting `path` (dotted; `[i]` indexes a list) to `value`; `DELETE` drops it."""

    def change(doc: Doc) -> None:
        parts = path.replace("[", ".[").split(".")
        node: Any = doc
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        last = parts[-1]
        key: Any = int(last[1:-1]) if last.startswith("[") else last
        if value is DELETE:
            del node[key]
        else:
            node[key] = value

    return change


DELETE = object()
HUGE = 1e30
INJECTED = "all_reduce\n\n# injected heading"

# (id, file, change, what the message names: the field, then the value)
COLLECTIVES_CASES: list[tuple[str, str, Change, tuple[str, ...]]] = [
    # -- results.json: names from registries
    ("op unknown", "results.json", _set("rows[0].op", "all_maybe"), ("rows[0].op", "all_maybe")),
    ("op with a newline", "results.json", _set("rows[0].op", INJECTED), ("rows[0].op", "\\n")),
    ("op empty", "results.json", _set("rows[0].op", ""), ("rows[0].op", "''")),
    (
        "dtype unknown",
        "results.json",
        _set("rows[0].dtype", "float33"),
        ("rows[0].dtype", "float33"),
    ),
    (
        "strategy unknown",
        "results.json",
        _set("rows[0].strategy", "fastest"),
        ("rows[0].strategy", "fastest"),
    ),
    (
        "reduce_op unknown",
        "results.json",
        _set("rows[0].reduce_op", "median"),
        ("rows[0].reduce_op", "median"),
    ),
    ("check maybe", "results.json", _set("rows[0].check", "maybe"), ("rows[0].check", "maybe")),
    (
        "note with a newline",
        "results.json",
        _set("rows[0].note", "x\n# y"),
        ("rows[0].note", "\\n"),
    ),
    # -- results.json: bounds
    ("size_bytes 0", "results.json", _set("rows[0].size_bytes", 0), ("rows[0].size_bytes", "0")),
    (
        "size_bytes negative",
        "results.json",
        _set("rows[0].size_bytes", -4),
        ("rows[0].size_bytes", "-4"),
    ),
    (
        "size_bytes 1e30",
        "results.json",
        _set("rows[0].size_bytes", HUGE),
        ("rows[0].size_bytes", "1e+30"),
    ),
    (
        "requested_bytes negative",
        "results.json",
        _set("rows[0].requested_bytes", -1),
        ("rows[0].requested_bytes", "-1"),
    ),
    ("count negative", "results.json", _set("rows[0].count", -1), ("rows[0].count", "-1")),
    (
        "world_size 1e30",
        "results.json",
        _set("rows[0].world_size", HUGE),
        ("rows[0].world_size", "1e+30"),
    ),
    ("warmup 1e30", "results.json", _set("rows[0].warmup", HUGE), ("rows[0].warmup", "1e+30")),
    (
        "warmup past the CLI's bound",
        "results.json",
        _set("rows[0].warmup", 10**9),
        ("rows[0].warmup", "1000000000"),
    ),
    (
        "in_place a string",
        "results.json",
        _set("rows[0].in_place", "yes"),
        ("rows[0].in_place", "'yes'"),
    ),
    ("stats n negative", "results.json", _set("rows[0].stats.n", -1), ("rows[0].stats.n", "-1")),
    (
        "stats median negative",
        "results.json",
        _set("rows[0].stats.median", -1.0),
        ("rows[0].stats.median", "-1"),
    ),
    ("stats missing", "results.json", _set("rows[0].stats", DELETE), ("rows[0].stats", "missing")),
    ("op missing", "results.json", _set("rows[0].op", DELETE), ("rows[0].op", "missing")),
    ("schema_version -1", "results.json", _set("schema_version", -1), ("schema_version", "-1")),
    ("schema_version 0", "results.json", _set("schema_version", 0), ("schema_version", "0")),
    # -- run.json: the record
    ("status deleted", "run.json", _set("status", DELETE), ("status", "missing")),
    ("status null", "run.json", _set("status", None), ("status", "missing")),
    ("status maybe", "run.json", _set("status", "maybe"), ("status", "maybe")),
    ("schema_version -1", "run.json", _set("schema_version", -1), ("schema_version", "-1")),
    ("context null", "run.json", _set("context", None), ("context", "missing")),
    ("context deleted", "run.json", _set("context", DELETE), ("context", "missing")),
    ("run_id with a newline", "run.json", _set("run_id", "a\n# b"), ("run_id", "\\n")),
    ("failed rank 1e30", "run.json", _set("failed_ranks", [HUGE]), ("failed_ranks[0]", "1e+30")),
    (
        "failed rank past the world",
        "run.json",
        _set("failed_ranks", [99]),
        ("failed_ranks[0]", "99"),
    ),
    ("points_done negative", "run.json", _set("points_done", -1), ("points_done", "-1")),
    (
        "points_done past points_total",
        "run.json",
        _set("points_done", 10**6),
        ("points_done", "1000000"),
    ),
    ("duration 1e30", "run.json", _set("duration_s", HUGE), ("duration_s", "1e+30")),
    ("finished_at with a newline", "run.json", _set("finished_at", "x\ny"), ("finished_at", "\\n")),
    # -- run.json: settings, as the command line takes them
    (
        "settings sizes 1e30",
        "run.json",
        _set("settings.sizes", [HUGE]),
        ("settings.sizes[0]", "1e+30"),
    ),
    ("settings sizes 0", "run.json", _set("settings.sizes", [0]), ("settings.sizes[0]", "0")),
    ("settings sizes a number", "run.json", _set("settings.sizes", 5), ("settings.sizes", "5")),
    ("settings ops a number", "run.json", _set("settings.ops", 5), ("settings.ops", "5")),
    (
        "settings ops unknown",
        "run.json",
        _set("settings.ops", ["all_maybe"]),
        ("settings.ops[0]", "all_maybe"),
    ),
    (
        "settings strategies unknown",
        "run.json",
        _set("settings.strategies", ["best"]),
        ("settings.strategies[0]", "best"),
    ),
    (
        "settings dtype unknown",
        "run.json",
        _set("settings.dtype", "float33"),
        ("settings.dtype", "float33"),
    ),
    (
        "settings reduce_op unknown",
        "run.json",
        _set("settings.reduce_op", "median"),
        ("settings.reduce_op", "median"),
    ),
    ("settings nproc 1e30", "run.json", _set("settings.nproc", HUGE), ("settings.nproc", "1e+30")),
    ("settings nproc 0", "run.json", _set("settings.nproc", 0), ("settings.nproc", "0")),
    (
        "settings backend unknown",
        "run.json",
        _set("settings.backend", "mpi"),
        ("settings.backend", "mpi"),
    ),
    (
        "settings device unknown",
        "run.json",
        _set("settings.device", "tpu"),
        ("settings.device", "tpu"),
    ),
    ("settings iters negative", "run.json", _set("settings.iters", -3), ("settings.iters", "-3")),
    (
        "settings min_time negative",
        "run.json",
        _set("settings.min_time", -1),
        ("settings.min_time", "-1"),
    ),
    (
        "settings timeout a string",
        "run.json",
        _set("settings.timeout", "300"),
        ("settings.timeout", "'300'"),
    ),
    (
        "settings check a string",
        "run.json",
        _set("settings.check", "maybe"),
        ("settings.check", "maybe"),
    ),
    (
        "settings ranks 1e30",
        "run.json",
        _set("settings.ranks", [HUGE]),
        ("settings.ranks[0]", "1e+30"),
    ),
    ("launch nnodes 0", "run.json", _set("launch.nnodes", 0), ("launch.nnodes", "0")),
    (
        "launch node_rank 1e30",
        "run.json",
        _set("launch.node_rank", HUGE),
        ("launch.node_rank", "1e+30"),
    ),
    # -- run.json: context
    (
        "context rank 1e30",
        "run.json",
        _set("context.ranks[0].rank", HUGE),
        ("context.ranks[0].rank", "1e+30"),
    ),
    (
        "context rank past the world",
        "run.json",
        _set("context.ranks[0].rank", 64),
        ("context.ranks[0].rank", "64"),
    ),
    (
        "context rank host with a newline",
        "run.json",
        _set("context.ranks[0].host", "vm\n# x"),
        ("context.ranks[0].host", "\\n"),
    ),
    (
        "context rank pid negative",
        "run.json",
        _set("context.ranks[0].pid", -1),
        ("context.ranks[0].pid", "-1"),
    ),
    (
        "context world_size 1e30",
        "run.json",
        _set("context.world_size", HUGE),
        ("context.world_size", "1e+30"),
    ),
    (
        "context group_size past the world",
        "run.json",
        _set("context.group_size", 3),
        ("context.group_size", "3"),
    ),
    (
        "context nnodes past the world",
        "run.json",
        _set("context.nnodes", 3),
        ("context.nnodes", "3"),
    ),
    (
        "context host with a newline",
        "run.json",
        _set("context.host", "vm\n# x"),
        ("context.host", "\\n"),
    ),
    ("context hosts a number", "run.json", _set("context.hosts", [5]), ("context.hosts[0]", "5")),
    (
        "context device_names with a newline",
        "run.json",
        _set("context.device_names", ["a\nb"]),
        ("context.device_names[0]", "\\n"),
    ),
    (
        "context backend unknown",
        "run.json",
        _set("context.backend", "carrier-pigeon"),
        ("context.backend", "carrier-pigeon"),
    ),
    (
        "context torch with a newline",
        "run.json",
        _set("context.torch", "2.13\n# x"),
        ("context.torch", "\\n"),
    ),
    (
        "context env value with a newline",
        "run.json",
        _set("context.env", {"NCCL_X": "a\nb"}),
        ("context.env.NCCL_X", "\\n"),
    ),
    (
        "context env name not a name",
        "run.json",
        _set("context.env", {"a b\n": "1"}),
        ("context.env", "a b"),
    ),
    (
        "context probe ok a string",
        "run.json",
        _set("context.probe.ok", "yes"),
        ("context.probe.ok", "'yes'"),
    ),
    (
        "context probe device_count 1e30",
        "run.json",
        _set("context.probe.device_count", HUGE),
        ("context.probe.device_count", "1e+30"),
    ),
]

# p2p rows (built from the version-1 p2p fixture, stored again as version 2)
P2P_CASES: list[tuple[str, str, Change, tuple[str, ...]]] = [
    (
        "p2p mode unknown",
        "results.json",
        _set("rows[0].p2p.mode", "maybe"),
        ("rows[0].p2p.mode", "maybe"),
    ),
    (
        "p2p test unknown",
        "results.json",
        _set("rows[0].p2p.test", "x"),
        ("rows[0].p2p.test", "'x'"),
    ),
    (
        "p2p direction unknown",
        "results.json",
        _set("rows[0].p2p.direction", "up"),
        ("rows[0].p2p.direction", "up"),
    ),
    (
        "p2p copy unknown",
        "results.json",
        _set("rows[0].p2p.copy", "teleport"),
        ("rows[0].p2p.copy", "teleport"),
    ),
    (
        "p2p path unknown",
        "results.json",
        _set("rows[0].p2p.path", "wifi"),
        ("rows[0].p2p.path", "wifi"),
    ),
    (
        "p2p pair with a newline",
        "results.json",
        _set("rows[0].p2p.pair", "0->1\n# x"),
        ("rows[0].p2p.pair", "\\n"),
    ),
    (
        "p2p link with a newline",
        "results.json",
        _set("rows[0].p2p.link", "NV4\n# x"),
        ("rows[0].p2p.link", "\\n"),
    ),
    (
        "p2p strategy another copy's",
        "results.json",
        _set("rows[0].strategy", "9->9 p2p uni sequential"),
        ("rows[0].strategy", "9->9"),
    ),
    ("p2p src 1e30", "results.json", _set("rows[0].p2p.src", HUGE), ("rows[0].p2p.src", "1e+30")),
    (
        "p2p row without its copy",
        "results.json",
        _set("rows[0].p2p", DELETE),
        ("rows[0].p2p", "missing"),
    ),
    (
        "p2p settings modes unknown",
        "run.json",
        _set("settings.modes", ["maybe"]),
        ("settings.modes[0]", "maybe"),
    ),
    (
        "p2p settings dsts 1e30",
        "run.json",
        _set("settings.dsts", [HUGE]),
        ("settings.dsts[0]", "1e+30"),
    ),
    (
        "p2p settings latency_sizes 0",
        "run.json",
        _set("settings.latency_sizes", [0]),
        ("settings.latency_sizes[0]", "0"),
    ),
    (
        "p2p context device_count 1e30",
        "run.json",
        _set("context.device_count", HUGE),
        ("context.device_count", "1e+30"),
    ),
]

# a version-2 run with per-rank times (two nodes of two ranks)
RANKS_CASES: list[tuple[str, str, Change, tuple[str, ...]]] = [
    (
        "ranks past the world",
        "results.json",
        _set("rows[0].ranks.ranks", [0, 1, 2, 9]),
        ("rows[0].ranks.ranks", "9"),
    ),
    (
        "more ranks than the row's world",
        "results.json",
        _set("rows[0].world_size", 2),
        ("rows[0].ranks.ranks", "4 ranks"),
    ),
    (
        "context rank node 1e30",
        "run.json",
        _set("context.ranks[0].node", HUGE),
        ("context.ranks[0].node", "1e+30"),
    ),
    ("holds_results a string", "run.json", _set("holds_results", "no"), ("holds_results", "'no'")),
    (
        "launch rdzv_endpoint with a newline",
        "run.json",
        _set("launch.rdzv_endpoint", "h:1\n# x"),
        ("launch.rdzv_endpoint", "\\n"),
    ),
]

# the same corruptions in files that version 1 wrote: read, migrated, and refused alike
V1_CASES: list[tuple[str, str, Change, tuple[str, ...]]] = [
    ("v1 op unknown", "results.json", _set("rows[0].op", "all_maybe"), ("rows[0].op", "all_maybe")),
    ("v1 check maybe", "results.json", _set("rows[0].check", "maybe"), ("rows[0].check", "maybe")),
    ("v1 size_bytes 0", "results.json", _set("rows[0].size_bytes", 0), ("rows[0].size_bytes", "0")),
    ("v1 status deleted", "run.json", _set("status", DELETE), ("status", "missing")),
    ("v1 context null", "run.json", _set("context", None), ("context", "missing")),
    ("v1 settings ops a number", "run.json", _set("settings.ops", 5), ("settings.ops", "5")),
]


def _case_params(
    cases: list[tuple[str, str, Change, tuple[str, ...]]],
) -> list[Any]:
    return [pytest.param(name, change, expected, id=i) for i, name, change, expected in cases]


READERS: dict[str, Callable[[Path, Path], list[str | Path]]] = {
    "report": lambda run, tmp: ["report", run, "--images", "none"],
    "compare (new)": lambda run, tmp: ["compare", V1_BASELINE, run, "--allow-mismatch"],
    "compare (baseline)": lambda run, tmp: ["compare", run, V1_BASELINE, "--allow-mismatch"],
    "compare -f json": lambda run, tmp: ["compare", V1_BASELINE, run, "-f", "json"],
    "plot": lambda run, tmp: ["plot", run, "--out", tmp / "plots", "--formats", "png"],
    "model --from": lambda run, tmp: ["model", "--from", run],
}


def _corrupt(run: Path, name: str, change: Change) -> None:
    path = run / name
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _check(
    tmp_path: Path, base: Path, reader: str, name: str, change: Change, expected: tuple[str, ...]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(base, run)
    _corrupt(run, name, change)
    assert_refused(cli(*READERS[reader](run, tmp_path)), name, *expected)


@pytest.fixture(scope="module")
def collectives_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The v1 collectives run's all_reduce rows (every case corrupts the first): each case
    has each reader load it (a third of the rows to read), and plot draws one figure."""
    dest = tmp_path_factory.mktemp("valid") / "collectives"
    return _stored_again(V1_COLLECTIVES, dest, op="all_reduce")


@pytest.fixture(scope="module")
def p2p_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _stored_again(V1_P2P, tmp_path_factory.mktemp("valid") / "p2p")


def test_the_valid_runs_read_in_every_reader(
    collectives_run: Path, p2p_run: Path, tmp_path: Path
) -> None:
    """The base every case corrupts is itself good: each reader takes it."""
    for reader in ("report", "compare (new)", "plot"):
        result = cli(*READERS[reader](collectives_run, tmp_path))
        assert result.exit_code in (0, 1), (reader, result.output)
        assert "error" not in result.stderr, result.stderr
    for run in (p2p_run, V2_TWO_NODE, V1_COLLECTIVES, V1_P2P):
        result = cli("report", run, "--images", "none")
        assert result.exit_code == 0, (run, result.output)


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(("name", "change", "expected"), _case_params(COLLECTIVES_CASES))
def test_a_corrupt_collectives_run_is_refused(
    tmp_path: Path,
    collectives_run: Path,
    reader: str,
    name: str,
    change: Change,
    expected: tuple[str, ...],
) -> None:
    _check(tmp_path, collectives_run, reader, name, change, expected)


@pytest.mark.parametrize("reader", ["report", "plot"])
@pytest.mark.parametrize(("name", "change", "expected"), _case_params(P2P_CASES))
def test_a_corrupt_p2p_run_is_refused(
    tmp_path: Path, p2p_run: Path, reader: str, name: str, change: Change, expected: tuple[str, ...]
) -> None:
    _check(tmp_path, p2p_run, reader, name, change, expected)


@pytest.mark.parametrize("reader", ["report", "compare (new)", "plot"])
@pytest.mark.parametrize(("name", "change", "expected"), _case_params(RANKS_CASES))
def test_a_corrupt_two_node_run_is_refused(
    tmp_path: Path, reader: str, name: str, change: Change, expected: tuple[str, ...]
) -> None:
    _check(tmp_path, V2_TWO_NODE, reader, name, change, expected)


@pytest.mark.parametrize("reader", ["report", "compare (new)", "plot"])
@pytest.mark.parametrize(("name", "change", "expected"), _case_params(V1_CASES))
def test_a_corrupt_version_1_run_is_refused(
    tmp_path: Path, reader: str, name: str, change: Change, expected: tuple[str, ...]
) -> None:
    _check(tmp_path, V1_COLLECTIVES, reader, name, change, expected)


# -- suite.json ----------------------------------------------------------------------------


def _suite(tmp_path: Path, collectives_run: Path) -> Path:
    """A suite of one collectives entry, written by the library's writer."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copytree(collectives_run, suite / "r1")
    entry = Entry(name="collectives-float32", section="collectives", path="r1")
    entry.status = RunStatus.COMPLETE
    SuiteDir(suite).write_record(
        SuiteRecord(name="demo", status=RunStatus.COMPLETE, entries=[entry])
    )
    return suite


SUITE_CASES: list[tuple[str, Change, tuple[str, ...]]] = [
    ("status deleted", _set("status", DELETE), ("status", "missing")),
    ("status maybe", _set("status", "maybe"), ("status", "maybe")),
    ("schema_version -1", _set("schema_version", -1), ("schema_version", "-1")),
    ("name with a newline", _set("name", "demo\n# x"), ("name", "\\n")),
    ("entry name with a newline", _set("entries[0].name", "c\n# x"), ("entries[0].name", "\\n")),
    ("entry section unknown", _set("entries[0].section", "maybe"), ("entries[0].section", "maybe")),
    ("entry status maybe", _set("entries[0].status", "maybe"), ("entries[0].status", "maybe")),
    (
        "entry path outside the suite",
        _set("entries[0].path", "../../elsewhere"),
        ("entries[0].path", "../../elsewhere"),
    ),
    ("entry path absolute", _set("entries[0].path", "/etc"), ("entries[0].path", "/etc")),
    (
        "gate tolerance negative",
        _set("config", {"gate": {"tolerance": -1}}),
        ("config.gate.tolerance", "-1"),
    ),
    (
        "gate tolerance a string",
        _set("config", {"gate": {"tolerance": "5%"}}),
        ("config.gate.tolerance", "5%"),
    ),
    ("gate alpha 1e30", _set("config", {"gate": {"alpha": HUGE}}), ("config.gate.alpha", "1e+30")),
    ("gate noisy_cv 0", _set("config", {"gate": {"noisy_cv": 0}}), ("config.gate.noisy_cv", "0")),
    ("exit_code 1e30", _set("exit_code", HUGE), ("exit_code", "1e+30")),
]

SUITE_READERS: dict[str, Callable[[Path, Path], list[str | Path]]] = {
    "report": lambda suite, tmp: ["report", suite, "--images", "none"],
    "compare (new)": lambda suite, tmp: ["compare", V1_BASELINE, suite, "--allow-mismatch"],
    "compare (baseline)": lambda suite, tmp: ["compare", suite, suite],
    "plot": lambda suite, tmp: ["plot", suite, "--out", tmp / "plots", "--formats", "png"],
}


def test_the_valid_suite_reads(tmp_path: Path, collectives_run: Path) -> None:
    suite = _suite(tmp_path, collectives_run)
    for reader in SUITE_READERS:
        result = cli(*SUITE_READERS[reader](suite, tmp_path))
        assert result.exit_code in (0, 1), (reader, result.output)
        assert "error" not in result.stderr, result.stderr


@pytest.mark.parametrize("reader", list(SUITE_READERS))
@pytest.mark.parametrize(
    ("change", "expected"), [pytest.param(c, e, id=i) for i, c, e in SUITE_CASES]
)
def test_a_corrupt_suite_is_refused(
    tmp_path: Path, collectives_run: Path, reader: str, change: Change, expected: tuple[str, ...]
) -> None:
    suite = _suite(tmp_path, collectives_run)
    _corrupt(suite, "suite.json", change)
    assert_refused(cli(*SUITE_READERS[reader](suite, tmp_path)), "suite.json", *expected)


# -- import: what it would store is checked against the same registries ---------------------


def _nccl_result(**changes: Any) -> str:
    data = json.loads(NCCL_JSON.read_text())
    data["results"][0].update(changes)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"type": "float33"}, ("results[0].type", "float33"), id="type unknown"),
        pytest.param({"type": "float\n# x"}, ("results[0].type", "\\n"), id="type newline"),
        pytest.param({"redop": "median"}, ("results[0].redop", "median"), id="redop unknown"),
    ],
)
def test_import_refuses_what_no_reader_would_take(
    tmp_path: Path, changes: dict[str, Any], expected: tuple[str, ...]
) -> None:
    log = tmp_path / "all_reduce.json"
    log.write_text(_nccl_result(**changes))
    result = cli("import", "nccl-tests", log, "--out", tmp_path / "imported")
    assert_refused(result, "all_reduce.json", *expected)
    assert not (tmp_path / "imported").exists() or not any((tmp_path / "imported").iterdir())


def test_an_imported_run_reads_back(tmp_path: Path) -> None:
    """What import stores, every reader takes (its ops and dtypes are in the registries)."""
    result = cli("import", "nccl-tests", NCCL_JSON, "--out", tmp_path / "imported")
    assert result.exit_code == 0, result.output
    run = Path(result.stdout.strip().splitlines()[-1])
    for reader in ("report", "plot"):
        out = cli(*READERS[reader](run, tmp_path))
        assert out.exit_code == 0, (reader, out.output)


def test_the_names_readers_check_are_the_registries_the_command_line_uses() -> None:
    """`results.names` is declared below the registries; they must say the same."""
    from commbench.collectives.specs import OPS, STRATEGIES
    from commbench.results.names import OP_NAMES, STRATEGY_NAMES
    from commbench.results.schema import MOVES_NOTHING

    assert tuple(OPS) == OP_NAMES and tuple(STRATEGIES) == STRATEGY_NAMES
    assert {name for name, spec in OPS.items() if spec.latency_only} == set(MOVES_NOTHING)
