"""`commbench export`: a run's metrics in the OpenMetrics and Prometheus text formats.

The text is read back by a small parser of the two formats (below), and checked against
the rows it came from; promtool (Debian's `prometheus` package, `make metrics-deps`) lints
both formats in the integration lane."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import commbench
from commbench.cli import app
from commbench.diagnose.verdict import DEGRADED, Diagnosis, NodeVerdict
from commbench.errors import UserError
from commbench.files import dump_json
from commbench.formats import Writes, writer
from commbench.health.record import GpuHealth, HealthSnapshot, RdmaPortHealth, RunHealth
from commbench.report.options import ExportFormat
from commbench.results import openmetrics as om
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus
from commbench.results.runs import load_run
from commbench.results.store import RunDir
from tests.factories import (
    UNWRITABLE,
    hostile_families,
    hostile_texts,
    make_row,
    rescaled,
    write_run,
)

RUNS = Path(__file__).parent / "fixtures" / "runs"
FORMATS = ["openmetrics", "prometheus"]
HOSTILE = 'a"b\\c\nd'
"""A value holding the three characters a label value escapes."""

# -- a parser of both formats, strict enough to catch what a scraper would refuse -------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(rf"^({NAME})(?:\{{(.*)\}})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
SUFFIXES = {"gauge": ("",), "summary": ("", "_sum", "_count")}


@dataclasses.dataclass
class Parsed:
    types: dict[str, str]
    units: dict[str, str]
    helps: dict[str, str]
    samples: list[tuple[str, dict[str, str], float]]

    def get(self, name: str, **labels: str) -> list[float]:
        """The values of `name`'s samples whose labels include `labels`."""
        return [
            v
            for n, got, v in self.samples
            if n == name and all(got.get(k) == want for k, want in labels.items())
        ]

    def one(self, name: str, **labels: str) -> float:
        (value,) = self.get(name, **labels)
        return value


def unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], value)


def parse(text: str, fmt: str) -> Parsed:
    """Every line is a HELP, TYPE, UNIT (OpenMetrics only), EOF (last, OpenMetrics only) or a
    sample of the family its TYPE line named last; no two samples share name and labels."""
    assert text.endswith("\n")
    lines = text[:-1].split("\n")
    if fmt == "openmetrics":
        assert lines.pop() == "# EOF"
    assert "# EOF" not in lines
    out = Parsed({}, {}, {}, [])
    family = None
    seen = set()
    for line in lines:
        if line.startswith("#"):
            keyword, name, rest = line[2:].split(" ", 2)
            if keyword == "TYPE":
                assert name not in out.types, f"second TYPE of {name}"
                out.types[name] = rest
                family = name
            elif keyword == "HELP":
                out.helps[name] = rest
            else:
                assert keyword == "UNIT" and fmt == "openmetrics", line
                assert name == family and name.endswith("_" + rest), line
                out.units[name] = rest
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample: {line!r}"
        name, body, value = match.groups()
        assert family is not None
        assert name in [family + s for s in SUFFIXES[out.types[family]]], line
        labels: dict[str, str] = {}
        pos = 0
        while body and pos < len(body):
            label = LABEL.match(body, pos)
            assert label, f"bad labels: {body!r}"
            labels[label.group(1)] = unescape(label.group(2))
            pos = label.end()
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen, f"two samples of {key}"
        seen.add(key)
        out.samples.append((name, labels, float(value)))
    assert set(out.helps) == set(out.types)
    return out


def export(*args: str) -> str:
    result = CliRunner().invoke(app, ["export", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


# -- runs to export ----------------------------------------------------------------------------


def snapshot(host: str, replay: int, crc: int, symbol: int) -> HealthSnapshot:
    gpu = GpuHealth(index=0, pcie_replay=replay, nvlink_errors={"2": {"crc_flit": crc}})
    port = RdmaPortHealth(
        device="mlx5_0", port=1, counters={"symbol_error": symbol, "port_xmit_data": 10**9}
    )
    return HealthSnapshot(host=host, gpus=[gpu], ports=[port])


def hostile_run(tmp_path: Path) -> Path:
    """The two-node fixture with a run id and hosts that hold a quote and a backslash (run.json
    takes no line break in them) and link health whose host holds a line break too."""
    run_dir = tmp_path / "hostile"
    shutil.copytree(RUNS / "two-node-gloo-pcie8", run_dir)
    record = RunDir(run_dir).read_record()
    health = RunHealth(
        before=snapshot(HOSTILE, replay=3, crc=1, symbol=0),
        after=snapshot(HOSTILE, replay=5, crc=1, symbol=4),
    )
    context = dataclasses.replace(record.context, hosts=['n"0\\', "n1"], health=health)
    record = dataclasses.replace(record, run_id='run "x" \\ 1', context=context)
    RunDir(run_dir).write_record(record)
    return run_dir


def diagnose_run(tmp_path: Path) -> Path:
    run_dir = write_run(
        tmp_path / "diagnose",
        [make_row(1 << 20)],
        RunRecord(
            kind=RunKind.DIAGNOSE,
            status=RunStatus.COMPLETE,
            run_id="diag-1",
            context=RunContext(host="n0", hosts=["n0", "n1"], world_size=2, nnodes=2),
        ),
    )
    diagnosis = Diagnosis(
        path=run_dir,
        status=RunStatus.COMPLETE,
        nodes=[NodeVerdict(host="n0", node=0), NodeVerdict(host="n1", node=1, verdict=DEGRADED)],
        stages=[],
    )
    (run_dir / "diagnosis.json").write_text(dump_json(diagnosis.to_dict()))
    return run_dir


def slower_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A baseline and a run whose large all_reduce is half as fast."""
    samples = [100.0 + i for i in range(20)]
    base_rows = [make_row(size, samples) for size in (1 << 20, 1 << 24)]
    new_rows = [base_rows[0], rescaled(base_rows[1], 0.5)]
    meta = {"kind": "collectives", "status": "complete", "context": {"world_size": 2}}
    base = write_run(tmp_path / "base", base_rows, {**meta, "run_id": "base-1"})
    new = write_run(tmp_path / "new", new_rows, {**meta, "run_id": "new-1"})
    return base, new


# -- the tests ---------------------------------------------------------------------------------


def test_every_format_has_an_exporter() -> None:
    assert [f.value for f in ExportFormat] == ["openmetrics", "prometheus", "nccl-tests-json"]
    for fmt in ExportFormat:
        assert callable(writer(Writes.EXPORT, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fixture", ["h100x8-golden", "cpu-gloo-a", "p2p-v1"])
def test_one_sample_per_point_and_metric_in_base_units(fixture: str, fmt: str) -> None:
    run = load_run(RUNS / fixture)
    got = parse(export(RUNS / fixture, "--format", fmt), fmt)
    measured = [r for r in run.rows if r.stats.n > 0]
    assert len({r.key for r in measured}) == len(measured)  # no two rows of one point here
    assert len(got.get("commbench_time_seconds_count")) == len(measured)
    assert len(got.get("commbench_busbw_bytes_per_second")) == sum(
        r.busbw_gbps is not None for r in measured
    )
    run_labels = {"kind": run.kind.value, "backend": run.context.backend or ""}
    for row in measured:
        point = {
            **run_labels,
            "op": row.op,
            "strategy": row.strategy,
            "dtype": row.dtype,
            "reduce_op": row.reduce_op,
            "in_place": str(row.in_place).lower(),
            "world_size": str(row.world_size),
            "size_bytes": str(row.size_bytes),
        }
        if row.busbw_gbps is not None:
            assert got.one("commbench_busbw_bytes_per_second", **point) == row.busbw_gbps * 1e9
        if row.algbw_gbps is not None:
            assert got.one("commbench_algbw_bytes_per_second", **point) == row.algbw_gbps * 1e9
        time = "commbench_time_seconds"
        assert got.one(time, **point, quantile="0.5") == row.stats.median * 1e-6
        assert got.one(time, **point, quantile="0") == row.stats.min * 1e-6
        assert got.one(time, **point, quantile="1") == row.stats.max * 1e-6
        assert got.one(time + "_count", **point) == row.stats.n
        assert got.one(time + "_sum", **point) == pytest.approx(sum(row.samples_us) * 1e-6)
    assert got.types["commbench_time_seconds"] == "summary"
    assert got.types["commbench_busbw_bytes_per_second"] == "gauge"


def test_openmetrics_names_its_units_and_ends_with_eof() -> None:
    om = export(RUNS / "cpu-gloo-a")  # the default format
    assert om.endswith("\n# EOF\n")
    got = parse(om, "openmetrics")
    assert got.units == {
        "commbench_algbw_bytes_per_second": "bytes_per_second",
        "commbench_busbw_bytes_per_second": "bytes_per_second",
        "commbench_time_seconds": "seconds",
        "commbench_run_timestamp_seconds": "seconds",
    }
    prom = export(RUNS / "cpu-gloo-a", "-f", "prometheus")
    assert "# EOF" not in prom and "# UNIT" not in prom
    assert [line for line in om.splitlines() if not line.startswith("# UNIT")][:-1] == (
        prom.splitlines()
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_label_values_are_escaped(tmp_path: Path, fmt: str) -> None:
    text = export(hostile_run(tmp_path), "-f", fmt)
    assert '\\"' in text and "\\\\" in text and "\\n" in text
    got = parse(text, fmt)  # every line is one whole line: no raw line break got through
    run_id = 'run "x" \\ 1'
    hosts = 'n"0\\,n1'
    assert got.one("commbench_run_info", run_id=run_id, hosts=hosts) == 1
    before = {"device": "GPU0", "counter": "pcie_replay", "snapshot": "before"}
    assert got.one("commbench_health_errors", host=HOSTILE, **before) == 3
    for name, _, _ in got.samples:
        assert name.startswith("commbench_")


def unescape_help(text: str, fmt: str) -> str:
    """HELP text as read back: Prometheus 0.0.4 escapes backslash and line feed (any other
    backslash is itself), OpenMetrics the double quote too."""
    escapes = {"n": "\n", "\\": "\\"} | ({'"': '"'} if fmt == "openmetrics" else {})
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), text)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_string_that_is_written_reads_back_as_it_was(fmt: str) -> None:
    texts = hostile_texts()
    got = parse(om.render(hostile_families(texts), om.Dialect(fmt)), fmt)
    read = {int(tags["case"]): tags["value"] for _, tags, _ in got.samples if "case" in tags}
    assert read == dict(enumerate(texts))
    for i, text in enumerate(texts):
        assert unescape_help(got.helps[f"commbench_hostile_help_{i}"], fmt) == text


@pytest.mark.parametrize("where", ["label", "help"])
@pytest.mark.parametrize("char", UNWRITABLE)
def test_a_character_the_formats_cannot_hold_is_refused(where: str, char: str) -> None:
    text = f"gpu{char}0"
    family = om.Family("commbench_x", "gauge", text if where == "help" else "help")
    family.add({"host": text if where == "label" else "n0"}, 1)
    for dialect in om.Dialect:
        with pytest.raises(UserError) as refused:
            om.render([family], dialect)
        said = str(refused.value)
        assert f"U+{ord(char):04X}" in said and "\n" not in said
        assert ("label host of commbench_x" if where == "label" else "HELP of commbench_x") in said


@pytest.mark.parametrize(
    ("field", "value"), [("host", "n0\u2028n1"), ("host", "n0\rn1"), ("run_id", "\ud800")]
)
def test_a_run_holding_such_a_character_is_one_line_and_no_file(
    tmp_path: Path, field: str, value: str
) -> None:
    """The health snapshot's host and run.json's run id are read as any string: the export is
    the writer that refuses them."""
    run_dir = hostile_run(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    if field == "host":
        record["context"]["health"]["after"]["host"] = value
    else:
        record["run_id"] = value
    (run_dir / "run.json").write_text(json.dumps(record))  # ASCII: a surrogate as \ud800
    out = tmp_path / "m.prom"
    line = bad([str(run_dir), "--out", str(out)])
    assert f"U+{ord(value[2] if field == 'host' else value):04X}" in line
    assert not out.exists()


BOUNDED = {
    *("kind", "backend", "op", "strategy", "dtype", "reduce_op", "in_place", "world_size"),
    *("size_bytes", "step", "quantile", "status", "finding", "verdict"),
    *("host", "node", "device", "link", "counter", "snapshot"),
}
"""Every label name of a measure: each takes a bounded set of values (an op, a size, a GPU, a
node of the cluster), so the next run's export gives the same series new values."""


def test_only_the_info_series_tell_one_run_from_another(tmp_path: Path) -> None:
    base, new = slower_pair(tmp_path)
    exports = [[RUNS / name] for name in ("h100x8-golden", "p2p-v1", "two-node-gloo-pcie8")]
    exports += [[hostile_run(tmp_path)], [diagnose_run(tmp_path)], [new, "--baseline", base]]
    for args in exports:
        run = load_run(args[0])
        got = parse(export(*args, "-f", "prometheus"), "prometheus")
        identity = om.run_identity(run)
        assert got.one("commbench_run_info", **identity) == 1
        for name, labels, _ in got.samples:
            assert labels["kind"] == run.kind.value, (name, labels)  # none overwrote it
            if name.endswith("_info"):
                continue
            assert set(labels) <= BOUNDED, (name, set(labels) - BOUNDED)
    assert "baseline_run_id" not in BOUNDED and "run_id" not in BOUNDED
    assert got.one("commbench_compare_baseline_info", baseline_run_id="base-1") == 1


def test_the_next_run_gives_the_same_series_new_values() -> None:
    """Two runs of one sweep, as two hourly exports: every series but the run's info is the
    same one, with new values."""
    a, b = (
        parse(export(RUNS / n, "-f", "prometheus"), "prometheus")
        for n in ("cpu-gloo-a", "cpu-gloo-b")
    )

    def series(got: Parsed) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (name, tuple(sorted(labels.items()))): value
            for name, labels, value in got.samples
            if name != "commbench_run_info"
        }

    assert series(a).keys() == series(b).keys()
    busbw = [k for k in series(a) if k[0] == "commbench_busbw_bytes_per_second"]
    assert len(busbw) == 27 and all(series(a)[k] != series(b)[k] for k in busbw)
    assert [s[1]["run_id"] for s in a.samples if s[0] == "commbench_run_info"] == ["cpu-gloo-a"]
    assert [s[1]["run_id"] for s in b.samples if s[0] == "commbench_run_info"] == ["cpu-gloo-b"]


def test_link_health_counters_and_their_increase(tmp_path: Path) -> None:
    got = parse(export(hostile_run(tmp_path), "-f", "prometheus"), "prometheus")
    counter = "commbench_health_errors"
    assert got.one(counter, device="GPU0", counter="pcie_replay", snapshot="after") == 5
    assert got.one(counter + "_increase", device="GPU0", counter="pcie_replay") == 2
    assert got.one(counter + "_increase", device="GPU0", link="2", counter="nvlink_crc_flit") == 0
    assert got.one(counter + "_increase", device="mlx5_0/1", counter="symbol_error") == 4
    assert not got.get(counter, counter="port_xmit_data")  # a data counter, not an error one
    assert got.one("commbench_health_findings", finding="counter_moved") >= 1
    assert got.one("commbench_health_findings", finding="downtrained") == 0


def test_a_run_without_health_has_no_health_metrics() -> None:
    got = parse(export(RUNS / "cpu-gloo-a", "-f", "prometheus"), "prometheus")
    assert not [s for s in got.samples if s[0].startswith("commbench_health")]


def test_both_in_place_forms_are_two_series(tmp_path: Path) -> None:
    rows = [make_row(4096, in_place=False), make_row(4096, [20.0, 21.0, 22.0], in_place=True)]
    run_dir = write_run(
        tmp_path / "both", rows, {"kind": "collectives", "status": "complete", "context": {}}
    )
    got = parse(export(run_dir), "openmetrics")
    busbw = "commbench_busbw_bytes_per_second"
    assert got.one(busbw, in_place="false") == rows[0].busbw_gbps * 1e9  # type: ignore[operator]
    assert got.one(busbw, in_place="true") == rows[1].busbw_gbps * 1e9  # type: ignore[operator]


def test_diagnose_run_exports_each_nodes_verdict(tmp_path: Path) -> None:
    got = parse(export(diagnose_run(tmp_path)), "openmetrics")
    node = "commbench_diagnose_node_verdict"
    assert got.one(node, host="n1", node="1", verdict="degraded") == 1
    assert got.one(node, host="n1", node="1", verdict="healthy") == 0
    assert got.one(node, host="n0", node="0", verdict="healthy") == 1
    assert got.one("commbench_diagnose_verdict", kind="diagnose", verdict="degraded") == 1
    assert got.one("commbench_run_status", kind="diagnose", status="complete") == 1
    assert got.one("commbench_run_info", kind="diagnose", run_id="diag-1", hosts="n0,n1") == 1


def test_baseline_adds_the_gates_verdict_and_ratio(tmp_path: Path) -> None:
    base, new = slower_pair(tmp_path)
    gate = commbench.compare_runs(base, new)
    got = parse(export(new, "--baseline", base), "openmetrics")
    assert got.one("commbench_compare_passed", kind="collectives") == 0
    assert got.one("commbench_compare_baseline_info", baseline_run_id="base-1") == 1
    assert got.one("commbench_run_info", run_id="new-1") == 1
    verdict, ratio = "commbench_compare_point_verdict", "commbench_compare_speed_ratio"
    ((_, comparison),) = gate
    for point in comparison.points:
        where = {"size_bytes": str(point.size_bytes)}
        assert got.one(verdict, **where, verdict=point.mark.value) == 1
        assert sum(got.get(verdict, **where)) == 1
        assert got.one(ratio, **where) == point.ratio
    assert got.one(verdict, size_bytes=str(1 << 24), verdict="worse") == 1
    assert got.one(ratio, size_bytes=str(1 << 24)) == pytest.approx(0.5, rel=0.01)


def test_api_returns_what_the_command_prints(tmp_path: Path) -> None:
    out = tmp_path / "m.prom"
    text = commbench.export_run(RUNS / "cpu-gloo-b", fmt="prometheus", out=out)
    assert text == export(RUNS / "cpu-gloo-b", "-f", "prometheus") == out.read_text()


def test_out_replaces_the_file_whole_through_a_temporary_file_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "textfile" / "commbench.prom"
    out.parent.mkdir()
    out.write_text("old\n")
    renames = []
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        # at the rename, the whole new text is in the temporary file and FILE is still the old
        renames.append((Path(src), Path(dst), Path(src).read_text(), Path(dst).read_text()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    result = CliRunner().invoke(app, ["export", str(RUNS / "cpu-gloo-a"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    ((src, dst, new, old),) = renames
    assert dst == out and src.parent == out.parent and not src.name.endswith(".prom")
    assert old == "old\n"
    assert new == out.read_text() == export(RUNS / "cpu-gloo-a")
    assert sorted(p.name for p in out.parent.iterdir()) == ["commbench.prom"]


def test_out_through_a_symlink_replaces_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real.prom"
    target.write_text("old\n")
    link = tmp_path / "link.prom"
    link.symlink_to(target)
    export(RUNS / "cpu-gloo-a", "--out", link)
    assert link.is_symlink() and target.read_text().endswith("# EOF\n")


def bad(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["export", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("commbench: error: ")
    return line


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "m.prom"
    assert "nope" in bad([str(tmp_path / "nope"), "--out", str(out)])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run.json").write_text("{not json")
    bad([str(broken), "--out", str(out)])
    unknown = CliRunner().invoke(app, ["export", str(RUNS / "cpu-gloo-a"), "--format", "csv"])
    assert unknown.exit_code == 2 and unknown.stdout == ""  # typer's parse error
    bad([str(RUNS / "cpu-gloo-a"), "--baseline", str(tmp_path / "nope")])
    assert not out.exists()
    run_dir = tmp_path / "run"
    shutil.copytree(RUNS / "cpu-gloo-a", run_dir)
    before = (run_dir / "results.json").read_bytes()
    bad([str(RUNS / "cpu-gloo-b"), "--out", str(run_dir / "results.json")])
    bad([str(run_dir), "--out", str(run_dir / "run.json")])
    assert (run_dir / "results.json").read_bytes() == before
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "regular file" in bad([str(run_dir), "--out", str(fifo)])


# -- promtool ----------------------------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        reason = "needs promtool (Debian's prometheus package: `make metrics-deps`)"
        if os.environ.get("CI"):
            pytest.fail(reason + ": .ci/run installs it")
        pytest.skip(reason)
    return found


@pytest.mark.integration
@pytest.mark.parametrize("fmt", FORMATS)
def test_promtool_accepts_both_formats_without_a_lint(tmp_path: Path, fmt: str) -> None:
    tool = promtool()
    base, new = slower_pair(tmp_path)
    exports = [
        [RUNS / name] for name in ("h100x8-golden", "cpu-gloo-a", "p2p-v1", "two-node-gloo-pcie8")
    ]
    exports += [[hostile_run(tmp_path)], [diagnose_run(tmp_path)], [new, "--baseline", base]]
    texts = [export(*map(str, args), "--format", fmt) for args in exports]
    # every hostile string, but a blank one (the lint wants HELP text; it reads none there)
    # and in OpenMetrics one with a quote: promtool reads Prometheus' format, where a quote in
    # HELP is not escaped and OpenMetrics' escape of it (\\") is an invalid escape sequence
    helps = [t for t in hostile_texts() if t.lstrip(" ")]
    if fmt == "openmetrics":
        helps = [t for t in helps if '"' not in t]
    texts.append(om.render(hostile_families(hostile_texts(), helps), om.Dialect(fmt)))
    for args, text in zip([*exports, ["hostile strings"]], texts):
        done = subprocess.run(
            [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), args


def test_a_node_that_holds_no_rows_exports_nothing(tmp_path: Path) -> None:
    """A node of a multi-node run that did not run global rank 0: in the textfile setup it
    would publish an empty run, complete, from every such node. One line, exit 2, as report."""
    run = tmp_path / "node1"
    shutil.copytree(Path(__file__).parent / "fixtures" / "runs" / "cpu-gloo-a", run)
    record = json.loads((run / "run.json").read_text())
    record["holds_results"] = False
    record["note"] = "the rows are on node0 in results/x"
    (run / "run.json").write_text(json.dumps(record))
    for name in ("results.json", "results.csv"):
        (run / name).unlink(missing_ok=True)
    out = tmp_path / "node1.prom"
    result = CliRunner().invoke(app, ["export", str(run), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "holds no rows: the rows are on node0" in result.stderr
    assert not out.exists() and result.stdout == ""


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--format", "nccl-tests-json", "--op", ""], "--op is empty"),
        (["--format", "nccl-tests-json", "--baseline", "BASE"], "nccl-tests' JSON has no place"),
    ],
)
def test_export_refuses_what_it_would_ignore(tmp_path: Path, extra: list[str], said: str) -> None:
    fixture = str(Path(__file__).parent / "fixtures" / "runs" / "cpu-gloo-a")
    args = [a.replace("BASE", fixture) for a in extra]
    result = CliRunner().invoke(app, ["export", fixture, *args])
    assert result.exit_code == 2, result.output
    assert said in result.stderr and result.stdout == ""


def test_a_long_file_name_is_written_through_a_temporary_name_that_fits(tmp_path: Path) -> None:
    fixture = str(Path(__file__).parent / "fixtures" / "runs" / "cpu-gloo-a")
    out = tmp_path / ("m" * 250 + ".prom")  # 255 bytes: the longest a file name may be
    result = CliRunner().invoke(app, ["export", fixture, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("# HELP") and [p.name for p in tmp_path.iterdir()] == [
        out.name
    ]
