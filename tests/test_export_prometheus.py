"""`commbench export` read by the real thing: Debian's node_exporter, its textfile collector
reading the exported file, scraped by Debian's Prometheus, queried over Prometheus' HTTP API
as a dashboard would (`make metrics-deps` installs both).

Each test starts both daemons on free ports with their state in a temporary directory, and
stops them and removes it whatever happens. Without the binaries the tests are skipped, except
under CI=true where they fail, as the promtool test does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.results import openmetrics as om
from commbench.results.runs import load_run
from commbench.results.store import atomic_write
from tests.factories import hostile_families, hostile_texts

pytestmark = pytest.mark.integration

RUNS = Path(__file__).parent / "fixtures" / "runs"
DOCS = Path(__file__).parents[1] / "docs" / "metrics.md"
SCRAPE_INTERVAL = "500ms"
DEADLINE = 60.0
"""Seconds a test waits for Prometheus to see what it waits for: a scrape every half second,
so anything near this is a daemon that is not working."""

Result = list[dict[str, Any]]


def binary(*names: str, package: str) -> str:
    """The first of `names` on PATH; a skip without it (a failure under CI)."""
    for name in names:
        found = shutil.which(name)
        if found is not None:
            return found
    reason = f"needs {names[0]} (Debian's {package} package: `make metrics-deps`)"
    if os.environ.get("CI"):
        pytest.fail(reason + ": .ci/run installs it")
    pytest.skip(reason)


@dataclass
class Prometheus:
    """A Prometheus scraping a node_exporter whose textfile collector reads `textfile`."""

    url: str
    textfile: Path
    logs: list[Path]
    procs: list[subprocess.Popen[bytes]]

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> Result:
        data = self.api("query", query=promql)
        assert data["resultType"] == "vector", data
        result: Result = data["result"]
        return result

    def wait(self, promql: str, until: Callable[[Result], bool] = bool) -> Result:
        """The query's result once `until` holds for it, polled up to `DEADLINE` seconds."""
        deadline = time.monotonic() + DEADLINE
        while True:
            for proc in self.procs:
                assert proc.poll() is None, f"{proc.args[0]} exited\n{self.log_tails()}"
            try:
                result = self.query(promql)
            except OSError:  # not listening yet
                result = []
            if until(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{promql}: {result} after {DEADLINE}s\n{self.log_tails()}")
            time.sleep(0.1)

    def log_tails(self) -> str:
        return "\n".join(
            f"{log.name}:\n{log.read_text(errors='replace')[-2000:]}" for log in self.logs
        )

    def export(self, run: Path, name: str = "commbench.prom") -> Path:
        out = self.textfile / name
        result = CliRunner().invoke(app, ["export", str(run), "-f", "prometheus", "-o", str(out)])
        assert result.exit_code == 0, result.output
        return out


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def prometheus(hold_port: Callable[[], AbstractContextManager[int]]) -> Iterator[Prometheus]:
    node_exporter = binary(
        "prometheus-node-exporter", "node_exporter", package="prometheus-node-exporter"
    )
    server = binary("prometheus", package="prometheus")
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="commbench-prom-")))
        # held until the block ends: a bound, never listening socket that Go's listener
        # (SO_REUSEADDR, as torch's) binds beside, and nothing else takes meanwhile
        exporter_port = stack.enter_context(hold_port())
        server_port = stack.enter_context(hold_port())
        textfile = tmp / "textfile"
        textfile.mkdir()
        config = tmp / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  scrape_timeout: {SCRAPE_INTERVAL}\n"
            "scrape_configs:\n  - job_name: node\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exporter_port}']\n"
        )
        logs = [tmp / "node_exporter.log", tmp / "prometheus.log"]
        procs: list[subprocess.Popen[bytes]] = []
        stack.callback(lambda: [stop(p) for p in procs])  # before the directory goes
        procs.append(
            start(
                [
                    node_exporter,
                    f"--web.listen-address=127.0.0.1:{exporter_port}",
                    "--web.disable-exporter-metrics",
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={textfile}",
                ],
                logs[0],
            )
        )
        procs.append(
            start(
                [
                    server,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp / 'data'}",
                    f"--web.listen-address=127.0.0.1:{server_port}",
                ],
                logs[1],
            )
        )
        prom = Prometheus(f"http://127.0.0.1:{server_port}", textfile, logs, procs)
        prom.wait('up{job="node"} == 1')
        yield prom


def one(result: Result) -> tuple[dict[str, str], float]:
    assert len(result) == 1, result
    return result[0]["metric"], float(result[0]["value"][1])


def counts(prom: Prometheus, selector: str) -> dict[str, int]:
    """Series per metric name of `selector`."""
    result = prom.query(f"count by (__name__) ({selector})")
    return {r["metric"]["__name__"]: int(r["value"][1]) for r in result}


def test_prometheus_reads_each_run_into_the_same_series(prometheus: Prometheus) -> None:
    """Two exports of one sweep over one file, as two hourly runs: Prometheus reads each
    busbw exactly, the second gives the same series new values (only the run's info series is
    new), and the run id comes back through a join on commbench_run_info."""
    prom = prometheus
    point = 'commbench_busbw_bytes_per_second{op="all_reduce", size_bytes="1048576"}'
    in_window = '{__name__=~"commbench_.+"}[1h]'
    seen = {}
    for name in ("cpu-gloo-a", "cpu-gloo-b"):
        run = load_run(RUNS / name)
        (row,) = [r for r in run.rows if r.op == "all_reduce" and r.size_bytes == 1 << 20]
        assert row.busbw_gbps is not None
        prom.export(RUNS / name)
        info = prom.wait(f'commbench_run_info{{run_id="{name}"}}')
        assert one(prom.query("node_textfile_scrape_error"))[1] == 0  # the file parsed whole

        # the point is one series, labelled with bounded values only, its value exact
        labels, busbw = one(prom.query(point))
        assert busbw == row.busbw_gbps * 1e9
        assert labels["kind"] == "collectives" and labels["backend"] == "gloo"
        assert "run_id" not in labels and "hosts" not in labels

        # the run's identity, and the point joined with it, both ways the docs show
        assert one(prom.query("commbench_run_info"))[0] == one(info)[0]
        assert one(info)[0]["started_at"] == run.context.started_at
        for on in ("on()", "on(job, instance, kind, backend)"):
            joined = prom.query(f"{point} * {on} group_left(run_id) commbench_run_info")
            arithmetic = {k: v for k, v in labels.items() if k != "__name__"}  # drops the name
            assert one(joined) == ({**arithmetic, "run_id": name}, busbw)
        seen[name] = (
            counts(prom, '{__name__=~"commbench_.+"}'),
            counts(prom, f"last_over_time({in_window})"),
        )

    (now_a, window_a), (now_b, window_b) = seen.values()
    assert now_a["commbench_busbw_bytes_per_second"] == 27
    assert now_b == now_a  # what a dashboard shows now: one run's series
    # the series Prometheus keeps: the second run added its info series and nothing else
    assert window_b == {**window_a, "commbench_run_info": 2}
    assert window_a["commbench_run_info"] == 1

    # over time the join gives each value the run it came from
    end = time.time()
    data = prom.api(
        "query_range",
        query=f"{point} * on() group_left(run_id) commbench_run_info",
        start=str(end - 3600),
        end=str(end),
        step="0.5",
    )
    assert {r["metric"]["run_id"] for r in data["result"]} == {"cpu-gloo-a", "cpu-gloo-b"}

    # every query docs/metrics.md shows runs, and each join there names the run
    instance = one(info)[0]["instance"]
    queries = re.findall(r"^```promql\n(.*?)^```", DOCS.read_text(), re.S | re.M)
    assert len(queries) >= 5
    for promql in queries:
        result = prom.query(promql.replace("$instance", instance))
        if "group_left(run_id" in promql:
            assert result and all(r["metric"]["run_id"] == "cpu-gloo-b" for r in result), promql


def test_hostile_strings_come_back_from_prometheus_as_they_were(prometheus: Prometheus) -> None:
    """Every hostile string as a label value and as HELP text, through the textfile
    collector's parser, its exposition and Prometheus' scrape: each one reads back as it was
    written. A HELP text comes back without its leading blanks (the collector's parser skips
    them), and a blank one is not tried: the collector puts its own text in its place."""
    prom = prometheus
    texts = hostile_texts()
    helps = [text for text in texts if text.lstrip(" ")]
    families = hostile_families(texts, helps)
    atomic_write(prom.textfile / "hostile.prom", om.render(families, om.Dialect.prometheus))
    result = prom.wait("commbench_hostile", lambda r: len(r) == len(texts))
    assert one(prom.query("node_textfile_scrape_error"))[1] == 0
    # Prometheus leaves out a label whose value is empty
    read = {int(r["metric"]["case"]): r["metric"].get("value", "") for r in result}
    assert read == dict(enumerate(texts))
    metadata = prom.api("metadata")
    read_helps = {
        int(k.rsplit("_", 1)[1]): v[0]["help"] for k, v in metadata.items() if "_help_" in k
    }
    assert read_helps == {i: text.lstrip(" ") for i, text in enumerate(helps)}
