"""`commbench p2p` through the CLI: dry runs on fixtures, bad input, no GPU, and whole runs
with the CPU backend standing in for CUDA (the same loop, files and output)."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from commbench.cli import app
from commbench.p2p import measure
from commbench.results.schema import SCHEMA_VERSION
from tests.factories import cpu_gpus_for_p2p, fake_snapshot

FIXTURES = Path(__file__).parent / "fixtures"
PUZZLE = str(FIXTURES / "p2p" / "snapshot_puzzle8.json")
DGX1V = str(FIXTURES / "topology" / "snapshot_dgx1v.json")
sys.path.insert(0, str(FIXTURES / "topology"))

from fake_nvml import FakeNvml, load_machine  # noqa: E402

runner = CliRunner()
FAST = ["--size", "64K", "--warmup", "1", "--iters", "3"]


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["p2p", *args])


@pytest.fixture
def cpu_gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make `n` CPU 'GPUs' stand in for CUDA devices."""

    def install(n: int, **kw: Any) -> None:
        cpu_gpus_for_p2p(monkeypatch, n, **kw)

    return install


# --- dry run -------------------------------------------------------------------------------


def test_dry_run_explains_the_puzzle() -> None:
    result = invoke("--dry-run", "--topology", PUZZLE, "--dst", "1,2,4")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("Dry run on 8x Tesla V100-SXM2-16GB (snapshot_puzzle8.json)")
    assert "# concurrent 0->{1,2,4}: all copies at once, 400,000,000 B (10^8 float32) each" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:3] == "0->"}
    assert rows["0->1"][1:8] == ["NV4", "4", "yes", "100.0", "100.0", "90.0", "4.44"]
    assert rows["0->4"][1:8] == ["NV2", "2", "yes", "50.0", "50.0", "45.0", "8.89"]
    assert rows["0->2"][1:8] == ["NODE", "0", "no", "15.8", "15.8", "9.5", "42.32"]
    assert "P2P not supported between 0 and 2 (chipset not supported): staged through" in out
    assert "# sequential: one copy at a time" in out


def test_a_tiny_copy_is_called_latency_bound() -> None:
    """The bandwidth model leaves out a copy's fixed cost: at 1 KiB it must say so."""
    tiny = invoke("--dry-run", "--topology", DGX1V, "--dst", "1", "--size", "1K")
    assert tiny.exit_code == 0 and "latency-bound at this size" in tiny.stdout
    assert "no expectation" in tiny.stdout and " 22.5 " not in tiny.stdout
    big = invoke("--dry-run", "--topology", DGX1V, "--dst", "1", "--size", "64M")
    assert big.exit_code == 0 and "latency-bound" not in big.stdout


def test_dry_run_json_on_a_dgx1v() -> None:
    result = invoke("--dry-run", "--topology", DGX1V, "--format", "json", "--mode", "concurrent")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["pair"] for r in records] == [f"0->{d}" for d in range(1, 8)] + ["0->{1,2,3,4,5,6,7}"]
    far = next(r for r in records if r["pair"] == "0->5")
    assert far["path"] == "staged" and far["p2p"] is False and far["link"] == "SYS"
    assert far["ceiling_gbps"] == pytest.approx(15.754 / 3, abs=1e-3)
    assert far["shared_with"] == ["0->6", "0->7"]
    assert records[0]["mode"] == "concurrent" and records[0]["size_bytes"] == 400_000_000


@pytest.mark.parametrize("fmt", ["csv", "md"])
def test_dry_run_other_formats(fmt: str) -> None:
    result = invoke("--dry-run", "--topology", DGX1V, "--dst", "5", "--format", fmt)
    assert result.exit_code == 0, result.output
    if fmt == "csv":
        (row,) = list(csv.DictReader(io.StringIO(result.stdout)))
        assert (row["pair"], row["link"], row["path"]) == ("0->5", "SYS", "staged")
    else:
        assert "| 0->5 | SYS | 0 | no | 15.8 |" in result.stdout


def test_dry_run_one_gpu_says_there_are_no_peers(tmp_path: Path) -> None:
    snap = fake_snapshot("one_gpu_old_driver")
    path = tmp_path / "t4.json"
    path.write_text(json.dumps(snap.to_dict()))
    result = invoke("--dry-run", "--topology", str(path), "--host")
    assert result.exit_code == 0, result.output
    assert "one GPU visible: there are no peers" in result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines() if "->" in line[:8]] == [
        "0->0",
        "host->0",
        "0->host",
    ]


def test_dry_run_without_a_gpu_or_topology_is_one_line() -> None:
    result = invoke("--dry-run")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "pass --topology SNAPSHOT.json" in result.stderr


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--src", "9"], "--src 9: no such GPU (visible: 0..7)"),
        (["--dst", "1,8"], "--dst 8: no such GPU (visible: 0..7)"),
        (["--dst", "0,1"], "--dst includes the source GPU 0"),
        (["--dst", "1,x"], "--dst '1,x': 'x' is not a GPU index"),
        (["--src", "one"], "--src 'one': expected a GPU index (0, 1, ...)"),
        (["--size", "12Q"], "unknown unit 'Q' in size '12Q'"),
        (["--size", "abc"], "malformed size 'abc'"),
        (["--mode", "fast"], "--mode 'fast': choose concurrent, sequential or both"),
        (["--matrix", "--src", "1"], "--matrix measures every pair; it takes no --src"),
        (
            ["--size", "999T"],
            "--size 999T (copy sources and destinations) needs about 999.0T on GPU 0",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = invoke("--dry-run", "--topology", DGX1V, *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"commbench: error: {message}")
    assert result.stderr.count("\n") == 1


def test_bad_topology_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    result = invoke("--dry-run", "--topology", str(bad))
    assert result.exit_code == 2 and "not valid JSON" in result.stderr


# --- no GPU --------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_no_gpu_exits_2_with_the_message() -> None:
    result = invoke()
    assert result.exit_code == 2
    assert result.stderr.startswith("commbench: error: p2p needs a CUDA GPU, and none is visible")
    assert "`commbench p2p --dry-run --topology SNAPSHOT.json`" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not Path("results").exists()


def test_no_gpu_known_to_nvml_needs_no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(load_machine("zero_gpus")))
    monkeypatch.setitem(sys.modules, "commbench.p2p.measure", None)  # importing it would fail
    result = invoke()
    assert result.exit_code == 2
    assert result.stderr == (
        "commbench: error: p2p needs a CUDA GPU, and none is visible (NVML reports no "
        "devices); without one, `commbench p2p --dry-run --topology SNAPSHOT.json` says what "
        "each copy of another machine should reach (SNAPSHOT.json: `commbench topo --format "
        "json` there)\n"
    )


def test_topology_that_is_not_this_machine_is_refused(cpu_gpus: Any) -> None:
    cpu_gpus(2)
    result = invoke("--topology", PUZZLE, *FAST)
    assert result.exit_code == 2
    assert "the topology describes 8 GPUs but CUDA sees 2 here" in result.stderr


# --- whole runs on the CPU backend ---------------------------------------------------------


def run_dir() -> Path:
    (path,) = Path("results").iterdir()
    return path


def _copy(row: dict[str, Any]) -> dict[str, Any]:
    """A stored p2p row with its copy's fields and its stats beside the row's own."""
    return {**row, **row["p2p"], **row["stats"]}


@pytest.mark.integration
def test_measured_run_writes_rows_with_verdicts(cpu_gpus: Any) -> None:
    cpu_gpus(8)
    result = invoke("--topology", PUZZLE, "--dst", "1,2,4", *FAST)
    assert result.exit_code == 0, result.output
    assert "# concurrent 0->{1,2,4}: all copies at once, 65,536 B each" in result.stdout
    assert "commbench: complete: 7 rows in results/" in result.stderr
    d = run_dir()
    meta = json.loads((d / "run.json").read_text())
    assert (meta["kind"], meta["status"], meta["steps_done"]) == ("p2p", "complete", 4)
    assert meta["context"]["topology"]["host"]["hostname"] == "puzzle8"
    assert meta["settings"]["dsts"] == [1, 2, 4]
    data = json.loads((d / "results.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    rows = [_copy(r) for r in data["rows"]]
    assert [(r["step"], r["mode"], r["pair"]) for r in rows] == [
        (0, "concurrent", "0->1"),
        (0, "concurrent", "0->2"),
        (0, "concurrent", "0->4"),
        (0, "concurrent", "0->{1,2,4}"),
        (1, "sequential", "0->1"),
        (2, "sequential", "0->2"),
        (3, "sequential", "0->4"),
    ]
    first = rows[0]
    assert (first["src"], first["dst"], first["link"], first["nvlinks"]) == (0, 1, "NV4", 4)
    assert first["check"] == "ok" and len(first["samples_us"]) == first["n"] == 3
    assert first["median"] == sorted(first["samples_us"])[1]
    assert first["peak_gbps"] == 100.0 and first["dtype"] == "float32"
    assert rows[3]["copy"] == "total" and rows[3]["dst"] is None
    assert rows[3]["median"] == pytest.approx(
        sorted(max(r["samples_us"][i] for r in rows[:3]) for i in range(3))[1]
    )
    table = list(csv.DictReader(io.StringIO((d / "results.csv").read_text())))
    assert [r["pair"] for r in table] == [r["pair"] for r in rows]
    assert "samples_ms" not in table[0]
    assert "samples_us" not in table[0]


@pytest.mark.integration
def test_json_output_and_host_and_latency(cpu_gpus: Any) -> None:
    cpu_gpus(2)
    result = invoke("--host", "--latency", "--mode", "sequential", "--format", "json", *FAST)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    bandwidth = [r["pair"] for r in rows if r["test"] == "bandwidth"]
    assert bandwidth == ["0->1", "host->0", "0->host"]
    latency = [r for r in rows if r["test"] == "latency"]
    assert {r["size_bytes"] for r in latency} == {4, 64, 1024, 16384, 65536}
    assert all(r["bw_gbps"] is None and r["check"] == "ok" for r in latency)
    host = next(r for r in rows if r["pair"] == "host->0")
    assert (host["copy"], host["src"], host["dst"]) == ("h2d", None, 0)
    # No NVML here: the topology is unknown, and the run says so.
    assert "topology unknown" in result.stderr
    assert rows[0]["link"] == "N/A" and rows[0]["peak_gbps"] is None


@pytest.mark.integration
def test_one_gpu_measures_within_the_gpu(cpu_gpus: Any) -> None:
    cpu_gpus(1)
    result = invoke(*FAST)
    assert result.exit_code == 0, result.output
    assert "one GPU visible: there are no peers" in result.stderr
    rows = [_copy(r) for r in json.loads((run_dir() / "results.json").read_text())["rows"]]
    assert [(r["pair"], r["copy"]) for r in rows] == [("0->0", "d2d")]


@pytest.mark.integration
def test_wrong_data_fails_the_run(cpu_gpus: Any) -> None:
    def corrupt(dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)
        dst[-1] = 7

    cpu_gpus(2, copy_fn=corrupt)
    result = invoke("--dst", "1", *FAST)
    assert result.exit_code == 1
    assert "commbench: error: wrong data after the copy: 0->1 (sequential)" in result.stderr
    meta = json.loads((run_dir() / "run.json").read_text())
    assert meta["status"] == "failed" and "0->1" in meta["failure"]
    rows = json.loads((run_dir() / "results.json").read_text())["rows"]
    assert rows[0]["check"] == "failed"


@pytest.mark.integration
def test_matrix_writes_a_heatmap(cpu_gpus: Any) -> None:
    cpu_gpus(3)
    result = invoke("--matrix", "--bidirectional", "--mode", "sequential", *FAST)
    assert result.exit_code == 0, result.output
    d = run_dir()
    assert (d / "p2p-matrix.png").stat().st_size > 1000
    pairs = [r["p2p"]["pair"] for r in json.loads((d / "results.json").read_text())["rows"]]
    assert pairs[:3] == ["0->1", "1->0", "0<->1"]


@pytest.mark.integration
def test_suspicious_rows_are_flagged(cpu_gpus: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_gpus(8)
    # Events 1 ns apart: a 64 KiB copy "at 65,536 GB/s", far above any link.
    monkeypatch.setattr(measure.CpuBackend, "elapsed_ms", lambda self, a, b: 1e-6)
    result = invoke("--topology", PUZZLE, "--dst", "1", *FAST)
    assert result.exit_code == 0, result.output
    assert "commbench: warning: 1 measurement(s) above the theoretical peak: 0->1" in result.stderr
    assert "!" in result.stdout and "SUSPICIOUS" in result.stdout
    meta = json.loads((run_dir() / "run.json").read_text())
    assert meta["suspicious"] == ["0->1 (sequential)"]


def test_help_lists_every_option() -> None:
    result = runner.invoke(app, ["p2p", "--help"])
    assert result.exit_code == 0
    for flag in ("--src", "--dst", "--size", "--mode", "--bidirectional", "--matrix", "--host",
                 "--latency", "--warmup", "--iters", "--topology", "--dry-run", "--out",
                 "--format"):  # fmt: skip
        assert flag in result.stdout
