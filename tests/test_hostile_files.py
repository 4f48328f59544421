"""Hostile files fed to every reader through the real commands that read them (issue 11).

Each class (deep nesting, 5000-digit integers, wrong types and values, special files and
long names, non-finite numbers, unbounded work) is a table of files generated in tmp_path;
every one must end in one `commbench: error:` line and exit 2, never a traceback or a hang,
and every JSON file written must be strict (no NaN, no Infinity).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from commbench.cli import app
from commbench.errors import UserError

FIX = Path(__file__).parent / "fixtures"
RUN_A = FIX / "runs" / "cpu-gloo-a"
RUN_B = FIX / "runs" / "cpu-gloo-b"
LOG = FIX / "nccl_tests" / "h100x16_2nodes_all_reduce.log"
LOG_JSON = FIX / "nccl_tests" / "h100x16_2nodes_all_reduce.json"
SMI = FIX / "topology" / "smi_5gpu_sys_phb_node.txt"
SNAPSHOT = FIX / "p2p" / "snapshot_puzzle8.json"

DEEP = 20_000
BIG = "9" * 5000


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_refused(result: Result, *fragments: str) -> None:
    """Exit 2 with exactly one `commbench: error:` line on stderr, no traceback."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert len(lines) == 1 and lines[0].startswith("commbench: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-strict JSON constant {name}")


def strict_json(path: Path) -> Any:
    """Parse as a strict JSON reader would: NaN and Infinity are errors."""
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)


def all_json_strict(root: Path) -> int:
    files = list(root.rglob("*.json"))
    for path in files:
        strict_json(path)
    return len(files)


# -- readers: (name, file role, how to build the command from the hostile file) ---------------


def _run_dir(tmp_path: Path, name: str, content: str | None) -> Path:
    run = tmp_path / "runs" / "bad"
    shutil.copytree(RUN_A, run)
    if content is not None:
        target = run / name
        target.unlink()
        target.write_text(content, encoding="utf-8")
    return run


Reader = Callable[[Path, Path], list[str | Path]]
# The command each reader is reached through; `bad` is the hostile file, `tmp` a scratch dir.
FILE_READERS: dict[str, Reader] = {
    "topo --from": lambda bad, tmp: ["topo", "--from", bad],
    "topo --from-smi": lambda bad, tmp: ["topo", "--from-smi", bad],
    "import nccl-tests": lambda bad, tmp: [
        "import",
        "nccl-tests",
        bad,
        "--op",
        "all_reduce",
        "--out",
        tmp / "imported",
    ],
    "run SUITE": lambda bad, tmp: ["run", bad, "--out", tmp / "suites"],
}


def _in_run_dir(file_name: str, command: str) -> Reader:
    """A reader reached through a run directory whose `file_name` is the hostile file."""

    def build(bad: Path, tmp: Path) -> list[str | Path]:
        run = tmp / "runs" / f"bad-{file_name}"
        if not run.exists():
            shutil.copytree(RUN_A, run)
        target = run / file_name
        target.unlink()
        os.replace(bad, target)  # a FIFO moves as a FIFO
        if command == "compare":
            return ["compare", RUN_B, run]
        if command == "plot":
            return ["plot", run, "--out", tmp / "plots"]
        return [command, run]

    return build


RUN_READERS: dict[str, Reader] = {
    f"{command} ({name})": _in_run_dir(name, command)
    for name in ("run.json", "results.json")
    for command in ("report", "compare", "plot")
}


# -- (e) special files and long names ------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("reader", [*FILE_READERS, *RUN_READERS])
def test_a_fifo_is_refused_not_read(tmp_path: Path, reader: str) -> None:
    """A FIFO would block the open (or read as empty): refused before it is opened."""
    fifo = tmp_path / "named.pipe"
    os.mkfifo(fifo)
    build = FILE_READERS.get(reader) or RUN_READERS[reader]
    assert_refused(cli(*build(fifo, tmp_path)), "FIFO")


@pytest.mark.parametrize("reader", list(FILE_READERS))
def test_a_character_device_is_refused(tmp_path: Path, reader: str) -> None:
    """/dev/zero never ends: reading it would fill memory."""
    assert_refused(cli(*FILE_READERS[reader](Path("/dev/zero"), tmp_path)), "character device")


@pytest.mark.parametrize("reader", list(FILE_READERS))
def test_a_directory_where_a_file_is_wanted(tmp_path: Path, reader: str) -> None:
    assert_refused(cli(*FILE_READERS[reader](tmp_path, tmp_path)), "is a directory")


LONG = "x" * 300


@pytest.mark.parametrize(
    "args",
    [
        ["topo", "--from", LONG],
        ["topo", "--from-smi", LONG],
        ["import", "nccl-tests", LONG],
        ["run", LONG],
        ["report", LONG],
        ["plot", LONG],
        ["compare", str(RUN_A), LONG],
        ["compare", LONG, str(RUN_A)],
        ["report", f"{LONG}/run.json"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_name_over_255_bytes_is_one_line(args: list[str]) -> None:
    assert_refused(cli(*args), "file name too long")


def test_a_loop_of_links_is_one_line(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert_refused(cli("topo", "--from", loop), str(loop))
    assert_refused(cli("report", loop), str(loop))


def test_results_json_that_is_a_directory(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, "results.json", None)
    (run / "results.json").unlink()
    (run / "results.json").mkdir()
    assert_refused(cli("report", run), "results.json", "is a directory")


# -- (a) deep nesting and (c) integers over 4300 digits -------------------------------------


def _snapshot_text() -> str:
    return SNAPSHOT.read_text()


def _with_big_int(text: str, field: str) -> str:
    """`text` (JSON) with the first integer value of `field` replaced by 5000 digits."""
    new, n = re.subn(rf'("{field}": ?)-?\d+', rf"\g<1>{BIG}", text, count=1)
    assert n == 1, field
    return new


NESTED_JSON = "[" * DEEP + "]" * DEEP
NESTED_OBJ = '{"a": ' * DEEP + "1" + "}" * DEEP
NESTED_YAML = "collectives: " + "[" * DEEP + "]" * DEEP + "\n"
NESTED_BLOCK_YAML = "".join(" " * i + "a:\n" for i in range(2000))

HOSTILE_CONTENT: list[tuple[str, str, str, str]] = [
    # (id, reader, content, fragment of the expected message)
    ("snapshot deep list", "topo --from", NESTED_JSON, "nested deeper"),
    ("snapshot deep object", "topo --from", NESTED_OBJ, "nested deeper"),
    ("snapshot 65 levels", "topo --from", "[" * 65 + "]" * 65, "nested deeper"),
    ("snapshot big int", "topo --from", "BIG_SNAPSHOT", "5000 digits"),
    ("nccl json deep", "import nccl-tests", "{" + '"a": {' * DEEP + "}" * (DEEP + 1), "nested"),
    ("nccl json big int", "import nccl-tests", "BIG_NCCL_JSON", "5000 digits"),
    ("nccl log big size", "import nccl-tests", "BIG_LOG_SIZE", "size and count must be integers"),
    ("nccl log big header", "import nccl-tests", "BIG_LOG_HEADER", "is not an integer"),
    ("nccl log big rank", "import nccl-tests", "BIG_LOG_RANK", "is not an integer"),
    ("nccl log big time", "import nccl-tests", "BIG_LOG_TIME", "malformed value"),
    ("suite deep flow", "run SUITE", NESTED_YAML, "nested deeper than"),
    ("suite deep block", "run SUITE", NESTED_BLOCK_YAML, "nested deeper than"),
    ("suite big int", "run SUITE", f"schema_version: {BIG}\n", "5000 characters"),
    ("suite big world", "run SUITE", f"schema_version: 1\nworld_size: {BIG}\n", "5000 char"),
    ("suite big hex", "run SUITE", f"schema_version: 0x{BIG}\n", "integer of 5002"),
    ("suite self alias", "run SUITE", "schema_version: 1\na: &x [*x]\n", "contains itself"),
    ("matrix big NV", "topo --from-smi", "SMI_NV_BIG", "more NVLinks than a GPU pair has"),
    ("matrix big NUMA", "topo --from-smi", "SMI_NUMA_BIG", "is not a NUMA node"),
    ("matrix big CPU list", "topo --from-smi", "SMI_CPUS_BIG", "is not a CPU list"),
]


def _content(key: str) -> str:
    log = LOG.read_text()
    smi = SMI.read_text()
    special = {
        "BIG_SNAPSHOT": lambda: _with_big_int(_snapshot_text(), "schema_version"),
        "BIG_NCCL_JSON": lambda: _with_big_int(LOG_JSON.read_text(), "version"),
        "BIG_LOG_SIZE": lambda: log.replace("     1048576        262144", f"{BIG}   262144", 1),
        "BIG_LOG_HEADER": lambda: log.replace("maxBytes 8589934592", f"maxBytes {BIG}", 1),
        "BIG_LOG_RANK": lambda: log.replace("Pid   6899", f"Pid   {BIG}", 1),
        "BIG_LOG_TIME": lambda: log.replace("135.8    0.00", f"{BIG}.0    0.00", 1),
        "SMI_NV_BIG": lambda: smi.replace(
            "SYS     PHB      X", "SYS     NV99999999999999999999      X", 1
        ),
        "SMI_NUMA_BIG": lambda: re.sub(r"(8-15,24-31\s+)1", rf"\g<1>{BIG}", smi, count=1),
        "SMI_CPUS_BIG": lambda: smi.replace("8-15,24-31", f"8-{BIG}", 1),
    }
    if key in special:
        text = special[key]()
        assert text not in (log, smi), key
        return text
    return key


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("reader", "content", "fragment"),
    [pytest.param(r, c, f, id=i) for i, r, c, f in HOSTILE_CONTENT],
)
def test_hostile_content_is_one_line(
    tmp_path: Path, reader: str, content: str, fragment: str
) -> None:
    suffix = {"topo --from-smi": ".txt", "run SUITE": ".yaml"}.get(reader, ".json")
    if "log" in content.lower() or content.startswith("BIG_LOG"):
        suffix = ".log"
    bad = tmp_path / f"hostile{suffix}"
    bad.write_text(_content(content), encoding="utf-8")
    result = cli(*FILE_READERS[reader](bad, tmp_path))
    assert_refused(result, fragment)
    assert not (tmp_path / "imported").exists() or not any((tmp_path / "imported").iterdir())


RUN_CONTENT: list[tuple[str, str, Callable[[], str], str]] = [
    ("run.json deep", "run.json", lambda: NESTED_JSON, "nested deeper"),
    (
        "run.json deep in a field",
        "run.json",
        lambda: _meta_with(extra=json.loads("[" * 70 + "]" * 70)),
        "nested deeper",
    ),
    (
        "run.json big int",
        "run.json",
        lambda: _with_big_int(RUN_A.joinpath("run.json").read_text(), "nproc"),
        "5000 digits",
    ),
    ("results.json deep", "results.json", lambda: NESTED_OBJ, "nested deeper"),
    (
        "results.json big int",
        "results.json",
        lambda: _with_big_int(RUN_A.joinpath("results.json").read_text(), "size_bytes"),
        "5000 digits",
    ),
]


def _meta(**changes: Any) -> dict[str, Any]:
    meta = json.loads(RUN_A.joinpath("run.json").read_text())
    meta.update(changes)
    return meta


def _meta_with(**changes: Any) -> str:
    return json.dumps(_meta(**changes))


def _context_with(**changes: Any) -> str:
    meta = _meta()
    meta["context"] = {**meta["context"], **changes}
    return json.dumps(meta)


def _row_with(**changes: Any) -> str:
    data = json.loads(RUN_A.joinpath("results.json").read_text())
    data["rows"][0].update(changes)
    return json.dumps(data)


@pytest.mark.parametrize("command", ["report", "compare", "plot"])
@pytest.mark.parametrize(
    ("name", "make", "fragment"),
    [pytest.param(n, m, f, id=i) for i, n, m, f in RUN_CONTENT],
)
def test_hostile_run_files_are_one_line(
    tmp_path: Path, command: str, name: str, make: Callable[[], str], fragment: str
) -> None:
    bad = tmp_path / "content.json"
    bad.write_text(make())
    assert_refused(cli(*_in_run_dir(name, command)(bad, tmp_path)), name, fragment)


# -- (d) wrong types and values in stored files ---------------------------------------------

WRONG_RUN_FILES: list[tuple[str, str, Callable[[], str], str]] = [
    (
        "context is a list",
        "run.json",
        lambda: _meta_with(context=[]),
        "context: expected an object, got a list",
    ),
    (
        "world_size is an object",
        "run.json",
        lambda: _context_with(world_size={}),
        "context.world_size: expected an integer, got an object",
    ),
    (
        "world_size is a string",
        "run.json",
        lambda: _context_with(world_size="8"),
        "context.world_size: expected an integer",
    ),
    (
        "world_size is 0",
        "run.json",
        lambda: _context_with(world_size=0),
        "context.world_size: 0 is outside",
    ),
    ("nnodes is a string", "run.json", lambda: _context_with(nnodes="2"), "context.nnodes"),
    (
        "device_names is a number",
        "run.json",
        lambda: _context_with(device_names=5),
        "context.device_names",
    ),
    ("env is a list", "run.json", lambda: _context_with(env=[1]), "context.env"),
    (
        "env value is a list",
        "run.json",
        lambda: _context_with(env={"NCCL_X": [1]}),
        "context.env.NCCL_X",
    ),
    ("topology is a string", "run.json", lambda: _context_with(topology="x"), "context.topology"),
    (
        "topology pairs a string",
        "run.json",
        lambda: _context_with(topology={"pairs": "x"}),
        "context.topology.pairs",
    ),
    (
        "topology pair src a string",
        "run.json",
        lambda: _context_with(topology={"pairs": [{"src": "a"}]}),
        "pairs[0].src",
    ),
    ("status is a list", "run.json", lambda: _meta_with(status=[]), "status: expected a string"),
    (
        "settings is a list",
        "run.json",
        lambda: _meta_with(settings=[]),
        "settings: expected an object",
    ),
    ("duration is a string", "run.json", lambda: _meta_with(duration_s="x"), "duration_s"),
    ("points_done is a string", "run.json", lambda: _meta_with(points_done="x"), "points_done"),
    (
        "schema_version is a boolean",
        "run.json",
        lambda: _meta_with(schema_version=True),
        "schema_version",
    ),
    (
        "size_bytes 10**30",
        "results.json",
        lambda: _row_with(size_bytes=10**30),
        "rows[0].size_bytes: a number of 31 digits is outside",
    ),
    (
        "size_bytes negative",
        "results.json",
        lambda: _row_with(size_bytes=-5),
        "rows[0].size_bytes: -5 is outside",
    ),
    ("world_size 0", "results.json", lambda: _row_with(world_size=0), "rows[0].world_size"),
    ("busbw negative", "results.json", lambda: _row_with(busbw_gbps=-1), "rows[0].busbw_gbps"),
    (
        "time a string",
        "results.json",
        lambda: _row_with(time_us="12"),
        "rows[0].time_us: expected a number",
    ),
    (
        "samples nested",
        "results.json",
        lambda: _row_with(samples_us=[[1]]),
        "rows[0].samples_us[0]",
    ),
    (
        "a row is a list",
        "results.json",
        lambda: json.dumps({"schema_version": 1, "rows": [[1]]}),
        "rows[0]: expected an object",
    ),
    (
        "rows an object",
        "results.json",
        lambda: json.dumps({"schema_version": 1, "rows": {}}),
        "'rows' must be a list",
    ),
]


@pytest.mark.parametrize("command", ["report", "compare", "plot"])
@pytest.mark.parametrize(
    ("name", "make", "fragment"),
    [pytest.param(n, m, f, id=i) for i, n, m, f in WRONG_RUN_FILES],
)
def test_wrong_types_in_run_files_name_file_and_field(
    tmp_path: Path, command: str, name: str, make: Callable[[], str], fragment: str
) -> None:
    bad = tmp_path / "content.json"
    bad.write_text(make())
    assert_refused(cli(*_in_run_dir(name, command)(bad, tmp_path)), name, fragment)


def _nccl_json(**changes: Any) -> dict[str, Any]:
    data = json.loads(LOG_JSON.read_text())
    data.update(changes)
    return data


def _nccl_result(**changes: Any) -> str:
    data = _nccl_json()
    data["results"][0].update(changes)
    return json.dumps(data)


def _nccl_body(**changes: Any) -> str:
    data = _nccl_json()
    data["results"][0]["out_of_place"].update(changes)
    return json.dumps(data)


WRONG_NCCL_JSON: list[tuple[str, Callable[[], str], str]] = [
    (
        "config a list",
        lambda: json.dumps(_nccl_json(config=[])),
        "config: expected an object, got a list",
    ),
    (
        "devices an object",
        lambda: json.dumps(_nccl_json(config={"devices": {"a": 1}})),
        "config.devices: expected a list",
    ),
    (
        "a device a list",
        lambda: json.dumps(_nccl_json(config={"devices": [[]]})),
        "config.devices[0]: expected an object",
    ),
    (
        "nthreads a string",
        lambda: json.dumps(_nccl_json(config={"nthreads": "x"})),
        "config.nthreads: expected an integer",
    ),
    (
        "nthreads huge",
        lambda: json.dumps(_nccl_json(config={"nthreads": 10**12})),
        "config.nthreads",
    ),
    ("args an object", lambda: json.dumps(_nccl_json(args={"a": 1})), "args: expected a list"),
    ("results an object", lambda: json.dumps(_nccl_json(results={})), "results: expected a list"),
    (
        "a result a list",
        lambda: json.dumps(_nccl_json(results=[[1]])),
        "results[0]: expected an object",
    ),
    (
        "out_of_place a list",
        lambda: _nccl_result(out_of_place=[1]),
        "results[0].out_of_place: expected an object",
    ),
    ("size a string", lambda: _nccl_result(size="1024"), "results[0].size: expected an integer"),
    (
        "size 10**30",
        lambda: _nccl_result(size=10**30),
        "results[0].size: a number of 31 digits is outside",
    ),
    ("type a number", lambda: _nccl_result(type=5), "results[0].type: expected a string"),
    (
        "time a string",
        lambda: _nccl_body(time="12"),
        "results[0].out_of_place.time: expected a number",
    ),
    (
        "alg_bw a list",
        lambda: _nccl_body(alg_bw=[1]),
        "results[0].out_of_place.alg_bw: expected a number",
    ),
    (
        "bus_bw missing",
        lambda: json.dumps(
            {
                **_nccl_json(),
                "results": [
                    {**_nccl_json()["results"][0], "out_of_place": {"time": 1, "alg_bw": 1}}
                ],
            }
        ),
        "out_of_place.bus_bw: missing",
    ),
    ("nwrong a list", lambda: _nccl_body(nwrong=[1]), "out_of_place.nwrong: expected a number"),
    (
        "times_us strings",
        lambda: _nccl_result(out_of_place_per_iter={"times_us": ["a"]}),
        "out_of_place_per_iter.times_us[0]",
    ),
    (
        "per_iter a list",
        lambda: _nccl_result(out_of_place_per_iter=[1]),
        "out_of_place_per_iter: expected an object",
    ),
    (
        "nccl_version a string",
        lambda: json.dumps(_nccl_json(nccl_version="2.18")),
        "nccl_version: expected an integer",
    ),
]


@pytest.mark.parametrize(
    ("make", "fragment"), [pytest.param(m, f, id=i) for i, m, f in WRONG_NCCL_JSON]
)
def test_wrong_types_in_nccl_tests_json_name_the_field(
    tmp_path: Path, make: Callable[[], str], fragment: str
) -> None:
    bad = tmp_path / "all_reduce.json"
    bad.write_text(make())
    assert_refused(cli("import", "nccl-tests", bad, "--out", tmp_path / "out"), fragment)
    assert not (tmp_path / "out").exists()


WRONG_SNAPSHOTS: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    ("gpus an object", lambda s: {**s, "gpus": {}}, "snapshot.gpus: expected a list"),
    ("129 gpus", lambda s: {**s, "gpus": [s["gpus"][0]] * 129}, "129 items, more than 128"),
    (
        "nvlinks huge",
        lambda s: {**s, "pairs": [{**s["pairs"][0], "nvlinks": 10**20}, *s["pairs"][1:]]},
        "pairs[0].nvlinks",
    ),
    (
        "peak 2.5e21",
        lambda s: {**s, "pairs": [{**s["pairs"][0], "peak_gbps": 2.5e21}, *s["pairs"][1:]]},
        "pairs[0].peak_gbps",
    ),
    (
        "memory a string",
        lambda s: {**s, "gpus": [{**s["gpus"][0], "memory_bytes": "80G"}, *s["gpus"][1:]]},
        "gpus[0].memory_bytes",
    ),
]


@pytest.mark.parametrize(
    ("change", "fragment"), [pytest.param(c, f, id=i) for i, c, f in WRONG_SNAPSHOTS]
)
def test_wrong_types_in_snapshots_name_the_field(
    tmp_path: Path, change: Callable[[dict[str, Any]], Any], fragment: str
) -> None:
    bad = tmp_path / "snap.json"
    bad.write_text(json.dumps(change(json.loads(SNAPSHOT.read_text()))))
    assert_refused(cli("topo", "--from", bad), str(bad), fragment)


def _suite_dir(tmp_path: Path, entries: Any, **meta: Any) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copytree(RUN_A, suite / "r1")
    payload = {"schema_version": 1, "kind": "suite", "name": "x", "entries": entries, **meta}
    (suite / "suite.json").write_text(json.dumps(payload))
    return suite


@pytest.mark.parametrize(
    ("entries", "meta", "fragment"),
    [
        (
            [{"name": "collectives-float32", "section": "collectives", "path": 5}],
            {},
            "entries[0].path: expected a string",
        ),
        ([[1]], {}, "entries[0]: expected an object"),
        ({}, {}, "entries: expected a list"),
        ([], {"config": []}, "config: expected an object"),
        ([], {"config": {"gate": []}}, "config.gate: expected an object"),
        ([], {"warnings": "x"}, "warnings: expected a list"),
    ],
)
def test_wrong_types_in_suite_json_name_the_field(
    tmp_path: Path, entries: Any, meta: dict[str, Any], fragment: str
) -> None:
    suite = _suite_dir(tmp_path, entries, **meta)
    assert_refused(cli("report", suite), "suite.json", fragment)
    assert_refused(cli("compare", RUN_A, suite), "suite.json", fragment)


# -- YAML: duplicate keys, safe_load semantics kept -----------------------------------------


def test_a_duplicate_suite_key_is_refused_naming_its_line(tmp_path: Path) -> None:
    suite = tmp_path / "dup.yaml"
    suite.write_text("schema_version: 1\nname: x\ntopo: true\ncollectives: true\ntopo: false\n")
    assert_refused(cli("run", suite), "dup.yaml", "line 5", "duplicate key 'topo'")
    nested = tmp_path / "nested.yaml"
    nested.write_text("schema_version: 1\ncollectives:\n  ops: [all_reduce]\n  ops: [broadcast]\n")
    assert_refused(cli("run", nested), "line 4", "duplicate key 'ops'")


def test_yaml_reads_like_safe_load() -> None:
    """Merge keys may override what they merge (that is what they are for); anchors, tags and
    types read as safe_load reads them; a billion laughs is shared, not expanded."""
    import yaml

    from commbench.files import MAX_DEPTH, parse_yaml

    text = (
        "base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  x: 3\nwhen: 2024-01-01\n"
        "f: 1.5\nn: ~\nflag: yes\noct: 0o17\n"
    )
    assert parse_yaml(text, "t.yaml") == yaml.safe_load(text)
    laughs = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
    )
    data = parse_yaml(laughs, "t.yaml")
    assert data["i"][0] is data["i"][1]  # shared, checked once: no 9**9 walk
    with pytest.raises(UserError, match="python/object"):
        parse_yaml("a: !!python/object/apply:os.system ['true']\n", "t.yaml")
    with pytest.raises(UserError, match=f"nested deeper than {MAX_DEPTH}"):
        parse_yaml(
            "".join(f"a{i}: &a{i} [{f'*a{i - 1}' if i else 1}]\n" for i in range(100)), "t.yaml"
        )


def test_control_characters_in_a_suite_are_one_line(tmp_path: Path) -> None:
    suite = tmp_path / "ctrl.yaml"
    suite.write_text("schema_version: 1\nname: \x00x\n")
    assert_refused(cli("run", suite), "ctrl.yaml", "special characters are not allowed")


# -- (f) what is written is strict JSON; peaks stay plausible ------------------------------


@pytest.mark.parametrize(
    ("old", "new", "note"),
    [
        (
            "135.8    0.00    0.00",
            "135.8     inf     inf",
            "nccl-tests printed algbw inf, busbw inf",
        ),
        ("135.8    0.00    0.00", "  nan    0.00    0.00", "nccl-tests printed time nan"),
        ("135.8    0.00    0.00", " -nan    0.00    0.00", "nccl-tests printed time -nan"),
    ],
)
def test_imported_inf_and_nan_are_written_as_null(
    tmp_path: Path, old: str, new: str, note: str
) -> None:
    log = tmp_path / "all_reduce_perf.log"
    text = LOG.read_text()
    assert old in text
    log.write_text(text.replace(old, new, 1))
    result = cli("import", "nccl-tests", log, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    assert all_json_strict(tmp_path / "out") == 2
    (run,) = (tmp_path / "out").iterdir()
    row = strict_json(run / "results.json")["rows"][0]
    assert note in row["note"]
    nulls = [k for k in ("algbw_gbps", "busbw_gbps") if row[k] is None]
    nulls += ["time_us"] * (row["stats"]["median"] is None)
    assert nulls, row
    csv_first = (run / "results.csv").read_text().splitlines()[1].split(",")
    assert "inf" not in csv_first and "nan" not in csv_first
    assert cli("report", run).exit_code == 0


def test_infinity_in_an_nccl_tests_json_reads_as_no_value(tmp_path: Path) -> None:
    text = LOG_JSON.read_text().replace('"alg_bw": ', '"alg_bw": Infinity, "was": ', 1)
    bad = tmp_path / "all_reduce.json"
    bad.write_text(text)
    result = cli("import", "nccl-tests", bad, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    assert all_json_strict(tmp_path / "out") == 2


def test_topo_json_output_is_strict_and_peaks_plausible(tmp_path: Path) -> None:
    snap = json.loads(SNAPSHOT.read_text())
    text = json.dumps(snap).replace('"peak_gbps": ', '"peak_gbps": NaN, "was": ', 1)
    src = tmp_path / "nan.json"
    src.write_text(text)
    out = tmp_path / "out.json"
    result = cli("topo", "--from", src, "--format", "json", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "nan" not in result.stdout.lower()
    data = strict_json(out)
    assert data["pairs"][0]["peak_gbps"] is None
    assert all(p["peak_gbps"] is None or p["peak_gbps"] <= 10_000 for p in data["pairs"])


def test_an_nvlink_count_no_gpu_has_is_refused(tmp_path: Path) -> None:
    smi = tmp_path / "topo.txt"
    smi.write_text(_content("SMI_NV_BIG"))
    assert_refused(cli("topo", "--from-smi", smi), "NV99999999999999999999", "at most 64")
    eighteen = tmp_path / "nv18.txt"
    eighteen.write_text(SMI.read_text().replace("SYS     PHB      X", "SYS     NV18      X", 1))
    result = cli("topo", "--from-smi", eighteen, "--format", "json")
    assert result.exit_code == 0, result.stderr
    peaks = [p["peak_gbps"] for p in json.loads(result.stdout)["pairs"] if p["nvlinks"] == 18]
    assert peaks and all(0 < p <= 1000 for p in peaks)


def test_the_writer_writes_no_constant() -> None:
    from commbench.files import dump_json

    text = dump_json({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": (1,)})
    assert json.loads(text, parse_constant=_no_constant) == {
        "a": None,
        "b": [None, None, 1.5],
        "c": [1],
    }


# -- (g) bounds on work: what no real node or log has, refused before the work ---------------


def _matrix(n: int) -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
    rows = [
        f"GPU{i}\t" + "\t".join("X" if i == j else "SYS" for j in range(n)) + "\t0-7\t0\n"
        for i in range(n)
    ]
    return head + "".join(rows)


@pytest.mark.timeout(60)
def test_more_gpus_than_a_node_has_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text(_matrix(300))
    assert_refused(cli("topo", "--from-smi", big), "300 GPUs", "at most 128")
    most = tmp_path / "most.txt"
    most.write_text(_matrix(128))
    result = cli("topo", "--from-smi", most)  # the bound itself: rendered, and fast
    assert result.exit_code == 0, result.stderr


def test_more_rows_than_a_log_has_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from commbench.importers.nccl_tests import parse

    monkeypatch.setattr(parse, "MAX_ROWS", 10)
    result = cli("import", "nccl-tests", LOG, "--out", tmp_path / "out")
    assert_refused(result, "more than 10 result rows")
    assert not (tmp_path / "out").exists()
    text = LOG_JSON.read_text()
    bad = tmp_path / "all_reduce.json"
    bad.write_text(text)
    assert_refused(cli("import", "nccl-tests", bad, "--out", tmp_path / "out"), "more than 5")


def test_a_file_over_the_size_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import commbench.files as files

    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1000)
    assert_refused(cli("topo", "--from-smi", LOG), str(LOG), "larger than")
    assert_refused(cli("import", "nccl-tests", LOG), str(LOG), "larger than")


# -- (b) a corrupt probe cache never stops the tool ------------------------------------------


def _cache_variants(path: Path, variant: str) -> None:
    if variant == "fifo":
        os.mkfifo(path)
    elif variant == "directory":
        path.mkdir()
    else:
        path.write_text(variant)


CACHE_VARIANTS = [
    "[]",
    '"x"',
    "[" * DEEP + "]" * DEEP,
    '{"k": ' * DEEP + "1" + "}" * DEEP,
    "{",
    "1" * 5000,
    '{"KEY": {"ok": true, "device_count": "x"}}',
    '{"KEY": {"ok": true, "device_count": 0, "memory": {"0": [1, 2]}}}',
    '{"KEY": {"ok": true, "device_count": 0, "memory": {"0": "x"}}}',
    '{"KEY": []}',
    "fifo",
    "directory",
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("variant", CACHE_VARIANTS, ids=lambda v: v[:20])
def test_a_corrupt_probe_cache_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    from commbench.launch import preflight
    from tests.factories import collectives_settings

    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(tmp_path))
    settings = collectives_settings(
        ops=["all_reduce"], sizes=[1024], device="cpu", backend="gloo", nproc=2
    )
    key = preflight._probe_cache_key(settings)
    cache = tmp_path / "probe-v1.json"
    _cache_variants(cache, variant.replace("KEY", key.replace('"', "")))
    probes: list[Any] = []

    def fake_probe(s: Any) -> dict[str, Any]:  # the throw-away torch process, counted
        probes.append(s)
        return {"ok": True, "torch": "x", "device_count": 0}

    monkeypatch.setattr(preflight, "_run_probe", fake_probe)
    assert preflight.probe(settings)["ok"] is True
    assert len(probes) == 1
    if variant != "directory":
        assert key in strict_json(cache)  # rebuilt, strict
        assert preflight.probe(settings)["ok"] is True
        assert len(probes) == 1  # and used


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_collectives_runs_with_a_corrupt_probe_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real command, a real probe process and real workers, after a cache nested 20,000
    levels deep (RecursionError before). A point that cannot run (sendrecv at one rank) has no
    time: every file, the journal's lines too, holds null there, never NaN."""
    import subprocess
    import sys

    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "probe-v1.json").write_text("[" * DEEP + "]" * DEEP)
    env = dict(os.environ, COMMBENCH_CACHE_DIR=str(cache_dir))
    args = ["collectives", "--device", "cpu", "--backend", "gloo", "--nproc", "1"]
    args += [
        "--ops",
        "sendrecv,all_reduce",
        "--sizes",
        "1K",
        "--no-plot",
        "--out",
        str(tmp_path / "out"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "commbench", *args],
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert isinstance(strict_json(cache_dir / "probe-v1.json"), dict)
    assert all_json_strict(tmp_path / "out") >= 3
    (run,) = (tmp_path / "out").iterdir()
    rows = strict_json(run / "results.json")["rows"]
    assert [r["stats"]["median"] is None for r in rows] == [True, False]
    for line in (run / "events.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=_no_constant)


# -- found by hostile testing of the change itself --------------------------------------------


@pytest.mark.timeout(30)
def test_a_link_to_a_fifo_or_a_device_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "to-fifo.json").symlink_to(fifo)
    (tmp_path / "to-zero.log").symlink_to("/dev/zero")
    assert_refused(cli("topo", "--from", tmp_path / "to-fifo.json"), "FIFO")
    assert_refused(cli("import", "nccl-tests", tmp_path / "to-zero.log"), "character device")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "args",
    [
        ["topo", "--from", str(SNAPSHOT), "--out"],
        ["report", str(RUN_A), "--images", "none", "--out"],
        ["compare", str(RUN_A), str(RUN_A), "--out"],
    ],
    ids=lambda a: a[0],
)
def test_out_at_a_fifo_nobody_reads_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """Writing there would block forever; a FIFO with a reader, or /dev/stdout, still works.
    (The report without figures: the FIFO is refused where the document is written, after
    the figures would be drawn.)"""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert_refused(cli(*args, fifo), "FIFO that no process is reading")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ("\t" + "\t".join(f"GPU{i}" for i in range(200_000)), "200000 GPUs: no node"),
        ("GPU0 GPU1 " + " ".join(f"mlx5_{i}" for i in range(200_000)), "200002 devices: no node"),
        ("\tGPU0\tGPU1\tGPU٢", "'GPU٢' is not a GPU column"),
    ],
    ids=["200k GPUs", "200k NICs", "non-ASCII GPU index"],
)
def test_matrix_headers_no_node_has_are_refused_at_once(
    tmp_path: Path, header: str, fragment: str
) -> None:
    """A header of 200k columns took quadratic time to split before any bound was checked."""
    smi = tmp_path / "wide.txt"
    smi.write_text(header + "\nGPU0\tX\n")
    assert_refused(cli("topo", "--from-smi", smi), fragment)


def test_a_matrix_row_with_many_extra_fields_is_one_short_line(tmp_path: Path) -> None:
    smi = tmp_path / "extras.txt"
    smi.write_text(SMI.read_text().replace("8-15,24-31", "8-15,24-31" + " x" * 100_000, 1))
    result = cli("topo", "--from-smi", smi)
    assert_refused(result, "more field(s) than the header names")
    assert len(result.stderr) < 1000


@pytest.mark.parametrize("opening", ["[", '{"a": '])
def test_json_nests_to_max_depth_and_no_deeper(opening: str) -> None:
    """parse_json walks a document's depth only when it holds more than MAX_DEPTH objects
    and arrays (fewer cannot nest deeper): the limit holds at its edge either way."""
    from commbench.files import MAX_DEPTH, parse_json

    closing = "]" if opening == "[" else "}"

    def nested(depth: int) -> str:
        inner = "[]" if opening != "[" else ""
        return opening * depth + inner + closing * depth

    depth = MAX_DEPTH - (opening != "[")  # an object's innermost value is an array
    assert parse_json(nested(depth), "t.json") is not None
    with pytest.raises(UserError, match=f"nested deeper than {MAX_DEPTH}"):
        parse_json(nested(depth + 1), "t.json")


@pytest.mark.parametrize("damaged", ["manifest.json", "rank-1.jsonl", "run.json"])
def test_a_document_that_is_no_object_is_named_once(tmp_path: Path, damaged: str) -> None:
    """`manifest.json:: expected an object` (a file's top level is a path ending in ':',
    which the message added its own ':' to), and `line 2.issued_ns` for a trace line's field:
    the place is the file, its line, then the field, each said once."""
    from tests.factories import ddp_trace

    if damaged == "run.json":
        target = tmp_path / "run"
        shutil.copytree(Path(__file__).parent / "fixtures" / "runs" / "cpu-gloo-a", target)
        (target / damaged).write_text('{"schema_version": 1, "kind": []}')
        result = cli("report", target)
    else:
        target = ddp_trace(tmp_path / "trace", world=2, steps=1)
        if damaged == "manifest.json":
            (target / damaged).write_text("[]")
        else:
            lines = (target / damaged).read_text().splitlines(keepends=True)
            lines[1] = lines[1].replace('"issued_ns": 0', '"issued_ns": -5')
            (target / damaged).write_text("".join(lines))
        result = cli("replay", target, "--dry-run")
    assert result.exit_code == 2
    line = result.output.strip()
    assert "::" not in line and "\n" not in line, line
    expected = {
        "manifest.json": "expected an object",
        "rank-1.jsonl": "line 2: issued_ns: -5",
        "run.json": "kind: expected a string",
    }[damaged]
    assert f"{damaged}: {expected}" in line, line
