"""Does a refactor change what commbench does? A snapshot of several hundred invocations,
taken before and after, and a diff of the two (issue 36: "A diff of several hundred
invocations before and after shows it").

    python benchmarks/behaviour_snapshot.py --repo /path/to/before --out before.json
    python benchmarks/behaviour_snapshot.py --repo . --out after.json
    python benchmarks/behaviour_snapshot.py --diff before.json after.json   # exit 1: differs
    python benchmarks/behaviour_snapshot.py --repo . --only '["model"' --out model.json
    python benchmarks/behaviour_snapshot.py --diff before.json model.json --only '["model"'

Each invocation is `python -m commbench ARGV...` with PYTHONPATH=REPO, run in a fresh temporary
directory that holds copies of the inputs it names, and the snapshot keeps its argv, exit code,
stdout, stderr and every file it wrote or changed there (text in full; a binary file, such as
a PNG, by its size and sha256: matplotlib's PNGs are byte-stable for the same data). The list
of invocations is fixed here, in this file, so the same list runs against both checkouts; the
inputs are this checkout's fixtures (tests/fixtures, configs), so both runs read the same
files, whichever code they run.

What runs: `--help` (and `-h`) of the top level, every command and subcommand (their names as
`commbench.cli.reference` walks them from the Typer app, written out here so both sides run
the same list); every command that starts no worker, on the fixtures, in every output format:
topo on the nvidia-smi texts, the saved snapshots and the fake machines of
tests/fixtures/topology (the fake NVML module stands in for pynvml, COMMBENCH_SYSFS_ROOT for
/sys), p2p --dry-run on saved snapshots, compare of the golden runs, report, plot, export,
import nccl-tests of the published logs, model, slurm-script and k8s-manifest with many
options and wrapped commands, replay --dry-run on the fixture traces; and bad input of every
kind (unknown options, malformed sizes and numbers, missing and broken files, bad YAML,
conflicting options, a bad SLURM environment): the exit-2 one-liners. Nothing launches
torchrun or a worker: collectives, p2p (measured), diagnose, record and run appear only with
input they refuse before starting anything.

The environment is fixed: CUDA_VISIBLE_DEVICES="" (no GPU, whatever the machine has; unset
where a fake machine stands in for NVML), COMMBENCH_*, SLURM_*, NCCL_*, TORCH_*, rendezvous
and rank variables removed unless an invocation sets them, TZ=UTC, LC_ALL=C.UTF-8,
COLUMNS=120, TERM=dumb, PYTHONHASHSEED=0, SOURCE_DATE_EPOCH=0 and a matplotlibrc with a fixed
`svg.hashsalt` (matplotlib stamps an SVG with the time and random ids otherwise), stdin empty.
Take both snapshots on the same machine: the host's CPU and NUMA layout appear in `topo`.

Normalisations, applied to stdout, stderr, text files and file names alike, so that two runs
of the same code give the same snapshot (what else differs between runs is a difference):
- the invocation's temporary directory (as given and resolved) -> `<TMP>`;
- this checkout's fixtures directory -> `<FIXTURES>`, the repository under test -> `<REPO>`
  (a traceback names its files);
- the machine's host name, as a whole word -> `<HOST>`;
- timestamps dated within a day of the snapshot (ISO 8601, `2026-11-26T21:42:45+0000`,
  `2026-11-26 21:42:45`, and run directory stamps `20261126-214245`) -> `<TIME>` and
  `<STAMP>`; older ones, such as those recorded in the fixtures, are kept.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import difflib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
CONFIGS = ROOT / "configs"
SCHEMA = 1
TIMEOUT_S = 60
"""Seconds one invocation may take before it is recorded as timed out (none takes ten: one
that does has started something it should not)."""

PREFIXES = {"fx/": FIXTURES, "cfg/": CONFIGS}
"""An argument or environment value that starts with one of these names an input, copied
from there into the invocation's directory under the same name before it runs."""

DROPPED_ENV = ("COMMBENCH_", "SLURM_", "NCCL_", "TORCH_", "CUDA_", "GLOO_", "OMP_", "MASTER_")
DROPPED_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"}

FAKE_MACHINE = r"""
import json, runpy, sys
machine = sys.argv[1]
sys.path.insert(0, "fx/topology")
from fake_nvml import FakeNvml
sys.path.pop(0)
spec = {"gpus": [], "init_error": 12} if machine == "-" else json.load(open(machine))
sys.modules["pynvml"] = FakeNvml(spec)
sys.argv = ["commbench", *sys.argv[2:]]
runpy.run_module("commbench", run_name="__main__", alter_sys=True)
"""
"""Runs commbench with tests/fixtures/topology/fake_nvml.py standing in for pynvml, as
tests/test_topology_cli.py does in process: the hardware is fake, discovery is real."""

MATPLOTLIBRC = "svg.hashsalt: commbench-behaviour-snapshot\n"


@dataclass(frozen=True)
class Invocation:
    """One command line, with what it needs around it."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    """Variables set for it (on top of the fixed environment)."""
    machine: str | None = None
    """A fake NVML machine (an `fx/topology/nvml_*.json`, `-` for no NVML), else real pynvml."""
    stdin: str = ""
    scratch: bool = False
    """Write the bad-input files (`SCRATCH`) under `in/` first."""

    @property
    def key(self) -> str:
        """What identifies it in a snapshot: its command line and what it runs under."""
        parts = [json.dumps(list(self.argv), ensure_ascii=False)]
        if self.env:
            parts.append("env " + " ".join(f"{k}={v}" for k, v in self.env))
        if self.machine:
            parts.append(f"machine {self.machine}")
        if self.stdin:
            parts.append(f"stdin {hashlib.sha256(self.stdin.encode()).hexdigest()[:12]}")
        return "  ".join(parts)


def inv(*argv: str, **kw: Any) -> Invocation:
    """An invocation of `commbench ARGV...`."""
    return Invocation(argv=tuple(argv), **kw)


# --- what runs ------------------------------------------------------------------------------

COMMANDS = [
    "collectives",
    "compare",
    "diagnose",
    "export",
    "history",
    "history add",
    "history changes",
    "history list",
    "history plot",
    "history show",
    "import",
    "import nccl-tests",
    "k8s-manifest",
    "model",
    "p2p",
    "plot",
    "record",
    "replay",
    "report",
    "run",
    "settle",
    "slurm-script",
    "topo",
]
"""Every command and group of the Typer app (`commbench.cli.reference._commands`, groups too)."""

RUNS = ["cpu-gloo-a", "cpu-gloo-b", "h100x8-golden", "two-node-gloo-pcie8", "p2p-v1"]
SMI = sorted(p.name for p in (FIXTURES / "topology").glob("smi_*.txt"))
MACHINES = [
    *(f"fx/topology/{p.name}" for p in sorted((FIXTURES / "topology").glob("nvml_*.json"))),
    "fx/p2p/nvml_puzzle8.json",
]
LOGS = sorted(p.name for p in (FIXTURES / "nccl_tests").iterdir() if p.suffix in (".log", ".json"))
TRACES = ["fx/traces/param", "fx/traces/chakra", "fx/traces/flight_recorder"]
IMAGE = "ghcr.io/acme/commbench:1.0"
HUGE = "9" * 400
SUITE_OK = "collectives: {ops: [all_reduce], sizes: 1K}\n"
_OPS = "collectives: {ops: [all_reduce], "
SCRATCH: dict[str, bytes] = {
    name: text.encode()
    for name, text in {
        "ok.yaml": SUITE_OK,
        "inf.yaml": _OPS + "sizes: '1K-1M:xinf'}\n",
        "in_place.yaml": _OPS + "in_place: maybe}\n",
        "huge.yaml": _OPS + f"sizes: {HUGE}}}\n",
        "huge_list.yaml": _OPS + f"sizes: [1024, {HUGE}]}}\n",
        "huge_quoted.yaml": _OPS + f"sizes: '{HUGE}'}}\n",
        "iters.yaml": _OPS + "sizes: 1K, iters: 99999999999999999999}\n",
        "nan.yaml": _OPS + "sizes: 1K, min_time: .nan}\n",
        "timeout.yaml": _OPS + "sizes: 1K, timeout: 0.001}\n",
        "unicode.yaml": _OPS + "sizes: '\uff11K'}\n",
        "world.yaml": "world_size: 100000\n" + SUITE_OK,
        "tolerance_inf.yaml": SUITE_OK + "compare: {tolerance: .inf}\n",
        "unclosed.yaml": "a: [1, 2\n",
        "empty.yaml": "",
        "list.yaml": "- 1\n- 2\n",
        "unknown_key.yaml": SUITE_OK + "colectives: {}\n",
        "bad_op.yaml": "collectives: {ops: [allreduce], sizes: 1K}\n",
        "bad_dtype.yaml": "collectives: {ops: [all_reduce], sizes: 1K, dtype: float128}\n",
        "p2p_bad.yaml": "p2p: {size: 12Q}\n",
        "bad_gate.yaml": SUITE_OK + "compare: {tolerance: lots}\n",
        "file": "",
        "suite/suite.json": "{}",
        "bad/run.json": "{",
        "empty_run/run.json": "{}",
        "notjson.log": "this is not an nccl-tests log\n",
        "empty.log": "",
        "baseline.json": '{"intra": 10}\n',
        "notes.txt": "hello\n",
    }.items()
} | {
    "binary.yaml": b"\x7fELF\x02\x01\xff\xfe\x00",
    "control.yaml": b'a: "\x01"\n',
    "binary.json": b"\x89PNG\r\n\x1a\n\x00\x00",
}
"""The files test_bad_input.py's `files` fixture writes, and a few more broken ones."""


def helps() -> Iterator[Invocation]:
    yield inv("--help")
    yield inv("-h")
    yield inv("--version")
    yield inv()
    for command in COMMANDS:
        yield inv(*command.split(), "--help")
        yield inv(*command.split(), "-h")


def topo() -> Iterator[Invocation]:
    for smi in SMI:
        for fmt in ("table", "json"):
            yield inv("topo", "--from-smi", f"fx/topology/{smi}", "--format", fmt)
    gpus = {
        "smi_dgx1v_v100_hybrid_cube_mesh.txt": "Tesla V100-SXM2-16GB",
        "smi_a100_p4d_nvswitch_nv12.txt": "NVIDIA A100-SXM4-40GB",
        "smi_h100_nvswitch_nv18_13nics.txt": "NVIDIA H100 80GB HBM3",
        "smi_l40s_g6e_4gpu_node.txt": "NVIDIA L40S",
        "smi_rtx4090x8_pcie_sys_tabs.txt": "NVIDIA GeForce RTX 4090",
        "smi_tesla_p4_single_gpu.txt": "Tesla P4",
        "smi_a40x8_nv4_pairs_nics.txt": "Made-Up GPU 9000",
    }
    for smi, gpu in gpus.items():
        yield inv("topo", "--from-smi", f"fx/topology/{smi}", "--gpu", gpu)
        yield inv("topo", "--from-smi", f"fx/topology/{smi}", "--gpu", gpu, "-f", "json")
    yield inv("topo", "--from-smi", "fx/topology/smi_h100_nvswitch_nv18_13nics.txt", "--all-nics")
    yield inv("topo", "--from-smi", "-", stdin=(FIXTURES / "topology" / SMI[0]).read_text())
    yield inv("topo", "--from-smi", "-", "-f", "json", stdin="garbage\n")
    for src in (
        "fx/topology/snapshot_dgx1v.json",
        "fx/p2p/snapshot_puzzle8.json",
        "fx/runs/h100x8-golden",
        "fx/runs/two-node-gloo-pcie8/run.json",
        "fx/runs/cpu-gloo-a",
    ):
        for fmt in ("table", "json"):
            yield inv("topo", "--from", src, "--format", fmt)
    yield inv("topo", "--from", "fx/topology/snapshot_dgx1v.json", "--all-nics")
    yield inv("topo", "--from", "fx/topology/snapshot_dgx1v.json", "-o", "snap.json", "-f", "json")
    yield inv("topo", "--from", "fx/topology/snapshot_dgx1v.json", "-o", "snap.txt")
    yield inv("topo", "--from-smi", f"fx/topology/{SMI[1]}", "-o", "out/topo.json", "-f", "json")
    for machine in [*MACHINES, "-"]:
        for sysfs in ("fx/sysfs/pcie8_eth", "fx/sysfs/dgx_h100"):
            env = (("COMMBENCH_SYSFS_ROOT", sysfs),)
            yield inv("topo", env=env, machine=machine)
            if sysfs.endswith("pcie8_eth"):
                yield inv("topo", "-f", "json", env=env, machine=machine)
    env = (("COMMBENCH_SYSFS_ROOT", "fx/sysfs/dgx_h100"),)
    yield inv("topo", "--all-nics", env=env, machine="fx/topology/nvml_dgx_h100.json")
    yield inv(
        "topo",
        env=(*env, ("CUDA_VISIBLE_DEVICES", "1,0")),
        machine="fx/topology/nvml_dgx_h100.json",
    )
    yield inv(
        "topo",
        env=(("COMMBENCH_SYSFS_ROOT", "no-such-dir"),),
        machine="fx/topology/nvml_dgx1v.json",
    )
    # bad input
    yield inv("topo", "--format", "yaml")
    yield inv("topo", "--from", "no-such.json")
    yield inv("topo", "--from", "in/bad/run.json", scratch=True)
    yield inv("topo", "--from", "in/binary.json", scratch=True)
    yield inv("topo", "--from", "in/notes.txt", scratch=True)
    yield inv("topo", "--from-smi", "no-such.txt")
    yield inv("topo", "--from-smi", "in/empty.log", scratch=True)
    yield inv(
        "topo", "--from", "fx/topology/snapshot_dgx1v.json", "--from-smi", f"fx/topology/{SMI[0]}"
    )
    yield inv("topo", "--gpu", "Tesla V100-SXM2-16GB")
    yield inv("topo", "--from", "fx/topology/snapshot_dgx1v.json", "-o", "in/file/x", scratch=True)


def p2p() -> Iterator[Invocation]:
    puzzle, dgx = "fx/p2p/snapshot_puzzle8.json", "fx/topology/snapshot_dgx1v.json"
    for snap in (puzzle, dgx):
        for fmt in ("table", "csv", "json", "md"):
            yield inv("p2p", "--dry-run", "--topology", snap, "--format", fmt)
    for extra in (
        ["--dst", "1,2,4"],
        ["--dst", "5", "--mode", "concurrent"],
        ["--mode", "sequential"],
        ["--src", "3", "--size", "1K"],
        ["--size", "64M"],
        ["--size", "1M,64M", "--dst", "1"],
        ["--bidirectional"],
        ["--bidirectional", "--dst", "1,5", "-f", "json"],
        ["--matrix"],
        ["--matrix", "-f", "csv"],
        ["--host"],
        ["--latency"],
        ["--latency", "--host", "-f", "md"],
        ["--warmup", "1", "--iters", "3"],
    ):
        yield inv("p2p", "--dry-run", "--topology", puzzle, *extra)
    yield inv("p2p", "--dry-run", "--topology", dgx, "--matrix", "--bidirectional")
    yield inv("p2p", "--dry-run", "--topology", "fx/runs/h100x8-golden/run.json")
    yield inv("p2p", "--dry-run", "--topology", "fx/runs/p2p-v1/run.json", "-f", "json")
    yield inv("p2p", "--dry-run")
    yield inv("p2p")
    for bad in (
        ["--src", "9"],
        ["--dst", "1,8"],
        ["--dst", "0,1"],
        ["--dst", "1,x"],
        ["--src", "one"],
        ["--size", "12Q"],
        ["--size", "abc"],
        ["--mode", "fast"],
        ["--matrix", "--src", "1"],
        ["--size", "999T"],
        ["--iters", "0"],
        ["--warmup", "-1"],
        ["--format", "yaml"],
    ):
        yield inv("p2p", "--dry-run", "--topology", dgx, *bad)
    yield inv("p2p", "--dry-run", "--topology", "in/bad/run.json", scratch=True)
    yield inv("p2p", "--dry-run", "--topology", "no-such.json")


def compare() -> Iterator[Invocation]:
    pairs = [
        ("cpu-gloo-a", "cpu-gloo-b"),
        ("cpu-gloo-b", "cpu-gloo-a"),
        ("cpu-gloo-a", "cpu-gloo-a"),
        ("h100x8-golden", "h100x8-golden"),
        ("two-node-gloo-pcie8", "two-node-gloo-pcie8"),
        ("p2p-v1", "p2p-v1"),
        ("cpu-gloo-a", "h100x8-golden"),
        ("cpu-gloo-a", "two-node-gloo-pcie8"),
    ]
    for base, new in pairs:
        for fmt in ("table", "csv", "json", "md"):
            yield inv("compare", f"fx/runs/{base}", f"fx/runs/{new}", "--format", fmt)
    a, b = "fx/runs/cpu-gloo-a", "fx/runs/cpu-gloo-b"
    for extra in (
        ["--allow-mismatch"],
        ["--allow-mismatch", "-f", "json"],
    ):
        yield inv("compare", a, "fx/runs/h100x8-golden", *extra)
        yield inv("compare", a, "fx/runs/two-node-gloo-pcie8", *extra)
    for extra in (
        ["--tolerance", "1%"],
        ["--tolerance", "50%"],
        ["-t", "0.2"],
        ["--latency-tolerance", "1%"],
        ["--alpha", "0.5"],
        ["--alpha", "0.0001"],
        ["--noisy-cv", "0.01"],
        ["--noisy-cv", "5"],
        ["--tolerance", "1%", "--latency-tolerance", "1%", "--alpha", "0.5", "-f", "md"],
        ["-o", "gate.txt"],
        ["-o", "gate.json", "-f", "json"],
        ["-o", "out/gate.md", "-f", "md"],
    ):
        yield inv("compare", a, b, *extra)
    for bad in (
        ["--alpha", "small"],
        ["--alpha", "2"],
        ["--tolerance", "inf"],
        ["--tolerance", "-5%"],
        ["--tolerance", "\uff15%"],
        ["--noisy-cv", "0"],
        ["--format", "html"],
        ["-o", "in/file/x"],
    ):
        yield inv("compare", a, b, *bad, scratch=True)
    yield inv("compare", "no-such-run", "no-such-run")
    yield inv("compare", a)
    yield inv("compare", "in/bad", a, scratch=True)
    yield inv("compare", a, "in/empty_run", scratch=True)
    yield inv("compare", "in/suite", "in/suite", scratch=True)
    yield inv("compare", "in", "in", scratch=True)


def report() -> Iterator[Invocation]:
    for run in RUNS:
        yield inv("report", f"fx/runs/{run}", "--images", "none")
        yield inv("report", f"fx/runs/{run}", "-f", "html", "--images", "none")
    yield inv(
        "report", "fx/runs/cpu-gloo-a", "--baseline", "fx/runs/cpu-gloo-b", "--images", "none"
    )
    yield inv(
        "report",
        "fx/runs/cpu-gloo-a",
        "--baseline",
        "fx/runs/h100x8-golden",
        "--images",
        "none",
    )
    yield inv(
        "report",
        "fx/runs/cpu-gloo-a",
        "--baseline",
        "fx/runs/h100x8-golden",
        "--allow-mismatch",
        "--images",
        "none",
        "-f",
        "html",
    )
    yield inv("report", "fx/runs/h100x8-golden", "-o", "report.md", "--images", "files")
    yield inv("report", "fx/runs/cpu-gloo-a", "-o", "report.html", "-f", "html")
    yield inv("report", "fx/runs/two-node-gloo-pcie8", "-o", "out/r.md", "--images", "none")
    yield inv("report", "fx/runs/p2p-v1", "-f", "html", "--images", "embed", "-o", "p2p.html")
    for bad in (
        ["--format", "pdf"],
        ["--images", "some"],
        ["--allow-mismatch"],
        ["--baseline", "no-such-run"],
        ["-o", "in/file/x"],
        ["--images", "files"],
    ):
        yield inv("report", "fx/runs/cpu-gloo-a", *bad, scratch=True)
    yield inv("report", "no-such-run")
    yield inv("report", "in/bad", scratch=True)
    yield inv("report", "in/empty_run", scratch=True)


def plot() -> Iterator[Invocation]:
    # matplotlib: a few seconds each, so a few
    yield inv("plot", "fx/runs/cpu-gloo-a")
    yield inv("plot", "fx/runs/h100x8-golden", "-o", "figs", "--formats", "png")
    yield inv("plot", "fx/runs/p2p-v1", "-o", "figs", "--formats", "svg")
    yield inv("plot", "fx/runs/two-node-gloo-pcie8", "-o", "figs", "--peak", "25")
    yield inv(
        "plot",
        "fx/runs/cpu-gloo-a",
        "fx/runs/cpu-gloo-b",
        "--label",
        "before",
        "--label",
        "after",
        "--formats",
        "svg",
    )
    for bad in (
        ["--peak", "high"],
        ["--formats", "gif"],
        ["--formats", ""],
        ["--formats", " , "],
        ["--label", "one", "--label", "two"],
        ["-o", "in/file"],
    ):
        yield inv("plot", "fx/runs/cpu-gloo-a", *bad, scratch=True)
    yield inv("plot", "no-such-run")
    yield inv("plot", "in/bad", scratch=True)
    yield inv("plot")


def export() -> Iterator[Invocation]:
    for run in RUNS:
        for fmt in ("openmetrics", "prometheus"):
            yield inv("export", f"fx/runs/{run}", "--format", fmt)
    yield inv("export", "fx/runs/h100x8-golden", "-f", "nccl-tests-json", "--op", "all_reduce")
    yield inv("export", "fx/runs/h100x8-golden", "-f", "nccl-tests-json", "--op", "all_gather")
    yield inv("export", "fx/runs/h100x8-golden", "-f", "nccl-tests-json")
    yield inv("export", "fx/runs/cpu-gloo-a", "-f", "nccl-tests-json", "--op", "reduce_scatter")
    yield inv("export", "fx/runs/cpu-gloo-a", "-f", "nccl-tests-json", "--op", "all_to_all")
    yield inv("export", "fx/runs/p2p-v1", "-f", "nccl-tests-json")
    yield inv("export", "fx/runs/cpu-gloo-a", "--baseline", "fx/runs/cpu-gloo-b")
    yield inv(
        "export", "fx/runs/cpu-gloo-b", "--baseline", "fx/runs/cpu-gloo-a", "-f", "prometheus"
    )
    yield inv("export", "fx/runs/cpu-gloo-a", "--baseline", "fx/runs/h100x8-golden")
    yield inv(
        "export", "fx/runs/cpu-gloo-a", "--baseline", "fx/runs/h100x8-golden", "--allow-mismatch"
    )
    yield inv("export", "fx/runs/cpu-gloo-a", "-o", "metrics.prom")
    yield inv("export", "fx/runs/cpu-gloo-a", "-o", "out/dir/metrics.prom", "-f", "prometheus")
    yield inv(
        "export",
        "fx/runs/h100x8-golden",
        "-f",
        "nccl-tests-json",
        "--op",
        "all_reduce",
        "-o",
        "n.json",
    )
    for bad in (
        ["--format", "csv"],
        ["--op", "all_reduce"],
        ["--allow-mismatch"],
        ["--baseline", "no-such-run"],
        ["-o", "in/file/x"],
        ["-f", "nccl-tests-json", "--op", "allreduce"],
    ):
        yield inv("export", "fx/runs/cpu-gloo-a", *bad, scratch=True)
    yield inv("export", "no-such-run")
    yield inv("export", "in/bad", scratch=True)


def import_nccl() -> Iterator[Invocation]:
    for log in LOGS:
        yield inv("import", "nccl-tests", f"fx/nccl_tests/{log}")
    yield inv(
        "import",
        "nccl-tests",
        "fx/nccl_tests/a100x8_all_gather_old_format.log",
        "fx/nccl_tests/gb10x2_all_gather_v2.17.log",
        "-o",
        "imported",
    )
    yield inv(
        "import", "nccl-tests", "fx/nccl_tests/gb10x2_all_gather_v2.17.log", "--op", "all_gather"
    )
    yield inv(
        "import",
        "nccl-tests",
        "fx/nccl_tests/a100x8_all_gather_old_format.log",
        "--world-size",
        "8",
    )
    yield inv(
        "import", "nccl-tests", "fx/nccl_tests/h100x16_2nodes_all_reduce.log", "--op", "allreduce"
    )
    yield inv(
        "import", "nccl-tests", "fx/nccl_tests/h100x16_2nodes_all_reduce.log", "--op", "broadcast"
    )
    yield inv("import", "nccl-tests", "log", "--world-size", "x")
    yield inv("import", "nccl-tests", "no-such.log")
    yield inv("import", "nccl-tests")
    yield inv("import", "nccl-tests", "in/notjson.log", scratch=True)
    yield inv("import", "nccl-tests", "in/empty.log", scratch=True)
    yield inv("import", "nccl-tests", "in/binary.json", scratch=True)
    yield inv("import", "nccl-tests", "in/ok.yaml", "--out", "in/run", scratch=True)
    yield inv(
        "import",
        "nccl-tests",
        "fx/nccl_tests/h100x16_2nodes_all_reduce.log",
        "-o",
        "in/file",
        scratch=True,
    )
    yield inv("import")
    yield inv("import", "no-such-tool")


def model() -> Iterator[Invocation]:
    for fmt in ("table", "csv", "json", "md"):
        yield inv("model", "--bw", "100", "--latency", "5", "--format", fmt)
        yield inv("model", "--from", "fx/runs/h100x8-golden", "-s", "1M", "-f", fmt)
    for extra in (
        ["--world", "8,64,1024"],
        ["--world", "2", "--sizes", "1K-1M"],
        ["--world", "16", "--backend", "gloo"],
        ["--backend", "gloo", "--strategies", "ring,direct"],
        ["--strategies", "ring"],
        ["--launch", "10"],
        ["--launch", "2.5", "--world", "4,8", "-s", "8-128M:x4"],
        ["--sizes", "1K,64K,1M"],
    ):
        yield inv("model", "--bw", "100", "--latency", "5", *extra)
    yield inv("model", "--bw", "25", "--latency", "1.5", "--world", "1024", "-f", "json")
    for run in ("cpu-gloo-a", "h100x8-golden", "two-node-gloo-pcie8"):
        yield inv("model", "--from", f"fx/runs/{run}")
    yield inv("model", "--from", "fx/runs/h100x8-golden", "-s", "1M", "--bw", "2")
    yield inv("model", "--from", "fx/runs/h100x8-golden", "--latency", "3", "-w", "8,64")
    yield inv("model", "--from", "fx/runs/h100x8-golden", "--backend", "gloo")
    yield inv("model", "--from", "fx/runs/p2p-v1")
    for bad in (
        ["--bw", "fast"],
        ["--sizes", "1M,,2M"],
        [],
        ["--bw", "100"],
        ["--latency", "5"],
        ["--bw", "10", "--latency", "1", "--sizes", "1K-1M:xinf"],
        ["--bw", "10", "--latency", "1", "--sizes", HUGE],
        ["--bw", "1e308", "--latency", "1"],
        ["--bw", "10", "--latency", "1e308"],
        ["--bw", "10", "--latency", "1", "--world", HUGE[:20]],
        ["--bw", "1", "--latency", "1", "--sizes", "\uff11K"],
        ["--bw", "1", "--latency", "1", "--world", "\uff18"],
        ["--world", "8,,64", "--bw", "100", "--latency", "5"],
        ["--world", ",".join(["8"] * 300), "--bw", "100", "--latency", "5"],
        ["--bw", "100", "--latency", "5", "--strategies", "bogus"],
        ["--bw", "100", "--latency", "5", "--backend", "mpi"],
        ["--bw", "-1", "--latency", "5"],
        ["--bw", "100", "--latency", "5", "--launch", "-1"],
        ["--bw", "100", "--latency", "5", "--world", "0"],
        ["--bw", "100", "--latency", "5", "-f", "html"],
        ["--from", "no-such-run"],
        ["--from", "in/bad"],
    ):
        yield inv("model", *bad, scratch=True)


def jobs() -> Iterator[Invocation]:
    """slurm-script and k8s-manifest: the scripts, and the wrapped commands they refuse."""
    wrapped = [
        [],
        ["--", "collectives", "--sizes", "1K-1G"],
        [
            "--",
            "collectives",
            "--sizes",
            "1K-1G",
            "--ops",
            "all_reduce,all_gather",
            "--dtype",
            "bfloat16",
        ],
        ["--", "collectives", "--strategies", "all", "--iters", "5"],
        ["--", "collectives", "--device", "cpu", "--nproc", "2"],
        ["--", "collectives", "--out", "results/nightly", "--no-plot", "--debug"],
        ["--", "collectives", "--ranks", "0,2", "--timeout", "60", "--format", "json"],
        ["--", "run", "cfg/ci.yaml"],
        ["--", "run", "cfg/quick.yaml", "--tolerance", "10%"],
        ["--", "diagnose"],
        ["--", "diagnose", "--stages", "inter", "--sizes", "64M", "-f", "junit"],
        ["--", "replay", "fx/traces/param"],
        ["--", "replay", "fx/traces/chakra", "--world", "8", "--steps", "2"],
    ]
    for tail in wrapped:
        yield inv("slurm-script", *tail)
        yield inv("k8s-manifest", "--image", IMAGE, *tail)
    for extra in (
        ["-N", "4"],
        ["-N", "1", "--gpus-per-node", "4"],
        ["--gpus-per-node", "0", "--", "collectives", "--device", "cpu"],
        ["-p", "gpu", "--job-name", "nightly"],
        ["--partition", "a100", "--time", "2-12:00:00"],
    ):
        yield inv("slurm-script", *extra)
    for t in (
        "30",
        "00:30:00",
        "1-00",
        "2-12:00:00",
        "90:00",
        "25:59",
        "1-23:59",
        "365-00",
        "INFINITE",
    ):
        yield inv("slurm-script", "--time", t)
    for extra in (
        ["--namespace", "ml-bench", "--results-volume", "bench-results", "--port", "23456"],
        ["-N", "16", "--gpus-per-node", "4", "--name", "nightly-run"],
        ["--gpus-per-node", "0", "--", "collectives", "--device", "cpu", "--nproc", "1"],
        ["--kind", "jobset"],
        ["--kind", "jobset", "-N", "8", "--namespace", "team", "--", "diagnose"],
        ["-N", "1"],
        [
            "-N",
            "4",
            "--gpus-per-node",
            "8",
            "--name",
            "bench",
            "--port",
            "23456",
            "--",
            "collectives",
            "--sizes",
            "1K-1G",
            "--ops",
            "all_reduce",
        ],
        [
            "--gpus-per-node",
            "0",
            "--",
            "collectives",
            "--out",
            "results/$(JOB_COMPLETION_INDEX)/$$(HOME)",
        ],
    ):
        yield inv("k8s-manifest", "--image", IMAGE, *extra)
    for image in ("acme/commbench", "registry:5000/a/b@sha256:" + "a" * 64, "localhost/x:latest"):
        yield inv("k8s-manifest", "--image", image)
    # refusals of slurm-script
    for bad in (
        ["--", "collectives", "--sizes", "1X"],
        ["--", "collectives", "--bogus"],
        ["--", "collectives", "--iters", "many"],
        ["--", "compare", "a", "b"],
        ["--", "run", "missing.yaml"],
        ["--time", "abc"],
        ["--time", "25:61"],
        ["--time", "1-24"],
        ["--time", "1:60:00"],
        ["--time", "99999999-00"],
        ["--time", "600000"],
        ["--time", "1:2:3:4"],
        ["--time", "-5"],
        ["--gpus-per-node", "1000000"],
        ["--gpus-per-node", "65"],
        ["--job-name", "a;rm -rf /"],
        ["--", "collectives", "--iters", "5", "--min-time", "1"],
        ["-N", "2", "--", "collectives", "--nproc", "2", "--ranks", "0,5"],
        ["-N", "2", "--", "collectives", "--device", "cpu", "--ranks", "5"],
        ["--", "collectives", "--nnodes", "4"],
        ["--gpus-per-node", "0", "--", "collectives", "--backend", "nccl"],
        ["--", "run", "cfg/ci.yaml", "--baseline", "/nonexist"],
        ["--nodes", "two"],
        ["--time", "1:60:00", "--", "collectives"],
        ["--", "collectives", "--sizes", "1K-1M:xinf"],
        ["--", "collectives", "--sizes", HUGE],
        ["--nodes", HUGE[:20]],
        ["--time", "\uff12:00"],
        ["--time", "1:\u0660\u0660"],
        ["--", "collectives", "--sizes", "\uff11K"],
        ["--", "collectives", "--dtype", "float128"],
        ["--", "collectives", "--dtype", "float32,nope"],
        ["--", "collectives", "--in-place", "maybe"],
        ["--", "collectives", "--nproc", "0"],
        ["--", "collectives", "--timeout", "-5"],
        ["--", "collectives", "--timeout", "0.5"],
        ["--", "collectives", "--min-time", "nan"],
        ["--", "collectives", "--strategies", "bogus"],
        ["--", "collectives", "--backend", "mpi"],
        ["--", "collectives", "--reduce-op", "xor"],
        ["--", "collectives", "--ops", "allgather"],
        ["--gpus-per-node", "0", "--", "collectives", "--device", "cuda"],
        ["--gpus-per-node", "4", "--", "collectives", "--nproc", "8"],
        ["--", "run", "in/ok.yaml", "--nproc", "0"],
        ["--", "run", "in/ok.yaml", "--backend", "mpi"],
        ["--", "run", "in/timeout.yaml"],
        ["--", "diagnose", "--stages", "everything"],
        ["--", "replay", "no-such-trace"],
        ["--", "p2p"],
        ["--", "topo"],
        ["-N", "0"],
    ):
        yield inv("slurm-script", *bad, scratch=True)
    # refusals of k8s-manifest
    for bad in (
        ["--image", IMAGE, "-N", "0"],
        ["--image", IMAGE, "-N", "1000000"],
        ["--image", IMAGE, "--gpus-per-node", "65"],
        ["--image", IMAGE, "--gpus-per-node", "-1"],
        ["--image", IMAGE, "--name", "Bench"],
        ["--image", IMAGE, "--name", "1bench"],
        ["--image", IMAGE, "--name", "bench-"],
        ["--image", IMAGE, "--name", "a.b"],
        ["--image", IMAGE, "--name", "b" * 64],
        ["--image", IMAGE, "-N", "100", "--name", "b" * 61],
        ["--image", IMAGE, "--kind", "jobset", "--name", "b" * 55],
        ["--image", IMAGE, "--namespace", "Team"],
        ["--image", IMAGE, "--namespace", "n" * 64],
        ["--image", IMAGE, "--results-volume", "Runs"],
        ["--image", "acme/Commbench"],
        ["--image", "acme:tag:tag"],
        ["--image", IMAGE, "--port", "0"],
        ["--image", IMAGE, "--port", "65536"],
        ["--image", IMAGE, "--kind", "deployment"],
        ["-N", "2"],
        ["--image", IMAGE, "--nodes", "2.5"],
        ["--image", "i", "--name", "Bad_Name"],
        ["--image", IMAGE, "--", "collectives", "--sizes", "1X"],
        ["--image", IMAGE, "--", "collectives", "--bogus"],
        ["--image", IMAGE, "--", "compare", "a", "b"],
        ["--image", IMAGE, "--", "run", "missing.yaml"],
        ["--image", IMAGE, "--gpus-per-node", "0", "--", "collectives", "--backend", "nccl"],
        ["--image", IMAGE, "--", "collectives", "--nnodes", "4"],
        ["--image", IMAGE, "--", "diagnose", "--warmup", "1.5"],
    ):
        yield inv("k8s-manifest", *bad, scratch=True)
    for command in ("slurm-script", "k8s-manifest"):
        extra = ["--image", IMAGE] if command == "k8s-manifest" else []
        for tail in (
            ["collectives", "--out", "results/x\n---\nkind: Pod\nmetadata: {name: evil}"],
            ["collectives", "--sizes", "1K\r"],
            *(
                ["collectives", "--out", f"results/x{sep}---{sep}kind: Pod"]
                for sep in "\x85\u2028\u2029"
            ),
            ["collectives", "--help"],
            ["diagnose", "-h"],
        ):
            yield inv(command, *extra, "--", *tail)


def replay() -> Iterator[Invocation]:
    for trace in TRACES:
        yield inv("replay", trace, "--dry-run")
        yield inv("replay", trace, "--dry-run", "--world", "8")
        yield inv("replay", trace, "--dry-run", "--steps", "1")
        yield inv("replay", trace, "--dry-run", "--rebucket", "1M-256M:x2")
        yield inv(
            "replay", trace, "--dry-run", "--rebucket", "1M-64M:x4", "--bw", "100", "--latency", "5"
        )
    yield inv("replay", "fx/traces/param/0.json", "--dry-run")
    yield inv("replay", "fx/traces/flight_recorder/rank_0.json", "--dry-run", "--world", "4")
    yield inv("replay", "fx/traces/param", "--dry-run", "--pace")
    yield inv("replay", "fx/traces/param", "--dry-run", "--pace-compute", "--max-gap", "1")
    yield inv("replay", "fx/traces/chakra", "--dry-run", "--world", "3")
    for bad in (
        ["trace", "--world", "two"],
        ["no-such-trace", "--dry-run"],
        ["fx/traces/flight_recorder_rank_0.pickle", "--dry-run"],
        ["fx/traces/param", "--dry-run", "--world", "0"],
        ["fx/traces/param", "--dry-run", "--steps", "0"],
        ["fx/traces/param", "--dry-run", "--bw", "100"],
        ["fx/traces/param", "--dry-run", "--latency", "5"],
        ["fx/traces/param", "--dry-run", "--max-gap", "1"],
        ["fx/traces/param", "--dry-run", "--rebucket", "lots"],
        ["fx/traces/param", "--dry-run", "--timeout", "0.001"],
        ["in/empty_run", "--dry-run"],
        ["in/notes.txt", "--dry-run"],
        ["in/binary.json", "--dry-run"],
        ["in", "--dry-run"],
        [],
    ):
        yield inv("replay", *bad, scratch=True)


def refused() -> Iterator[Invocation]:
    """Commands that would start workers, with input refused before anything starts."""
    for command in COMMANDS:
        if command != "import":
            yield inv(*command.split(), "--no-such-option")
    for args in (
        ["collectives", "--iters", "many"],
        ["collectives", "--sizes", "1X"],
        ["diagnose", "--warmup", "1.5"],
        ["diagnose", "--stages", "everything"],
        ["diagnose", "--stages", "intra-node,,inter-node"],
        ["diagnose", "--format", "yaml"],
        ["diagnose", "--tolerance", "lots"],
        ["diagnose", "--sizes", "1X"],
        ["diagnose", "--baseline", "no-such.json"],
        ["diagnose", "--baseline", "in/bad", "--timeout", "1"],
        ["diagnose", "--nnodes", "2", "--device", "cpu"],
        ["diagnose", "--iters", "0"],
        ["record", "--out"],
        ["record"],
        ["record", "--"],
        ["record", "-o", "in/run", "--", "true"],
        ["record", "-o", "in/file", "--", "true"],
        ["run", "suite.yaml", "--nproc", "x"],
        ["run", "no-such-suite.yaml"],
        ["run"],
        ["collectives", "--nnodes", "2", "--device", "cpu"],
        ["collectives", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"],
        ["collectives", "--rdzv-endpoint", "nohost"],
        ["collectives", "--rdzv-endpoint", "h:99999"],
        ["collectives", "--format", "yaml"],
        ["collectives", "--device", "tpu"],
        ["collectives", "--backend", "mpi"],
        ["collectives", "--ops", "allgather"],
        ["collectives", "--strategies", "bogus"],
        ["collectives", "--reduce-op", "xor"],
        ["collectives", "--iters", "5", "--min-time", "1"],
        ["collectives", "--min-time", "0"],
        ["collectives", "--skew", "nope"],
        ["collectives", "--skew", "zipf:-1"],
        ["collectives", "--ranks", "0,5", "--nproc", "2"],
        ["collectives", "--device", "cuda"],
        ["collectives", "--graph", "--device", "cpu"],
        ["p2p", "--src", "first"],
        ["p2p", "--dst", "1,,2"],
        ["p2p", "--out", "in/run"],
    ):
        yield inv(*args, scratch=True)
    # test_bad_input.py's cases: every class of bad input
    for args in (
        ["collectives", "--sizes", "1K-1M:xinf"],
        ["collectives", "--sizes", "1K-1M:xnan"],
        ["collectives", "--sizes", "1K-1M:x1e400"],
        ["collectives", "--sizes", "1K-1M:x1e308"],
        ["collectives", "--sizes", "inf"],
        ["collectives", "--sizes", "1e400"],
        ["collectives", "--sizes", HUGE],
        ["collectives", "--sizes", f"1K-{HUGE}"],
        ["collectives", "--sizes", "1025T"],
        ["collectives", "--sizes", "1.0000000000000000000000001K"],
        ["collectives", "--iters", "99999999999999999999999"],
        ["collectives", "--warmup", "99999999999999999999999"],
        ["collectives", "--nproc", HUGE[:30]],
        ["collectives", "--nnodes", HUGE[:30]],
        ["collectives", "--timeout", "1e400"],
        ["collectives", "--skew", "zipf:1e400"],
        ["collectives", "--skew", "hot:inf"],
        ["collectives", "--seed", HUGE[:30]],
        ["p2p", "--dry-run", "--size", "1K-1M:xinf"],
        ["p2p", "--dry-run", "--size", "nan"],
        ["p2p", "--dry-run", "--size", HUGE],
        ["p2p", "--dry-run", "--dst", HUGE],
        ["run", "in/inf.yaml"],
        ["run", "in/huge.yaml"],
        ["run", "in/huge_list.yaml"],
        ["run", "in/huge_quoted.yaml"],
        ["run", "in/iters.yaml"],
        ["run", "in/nan.yaml"],
        ["run", "in/tolerance_inf.yaml"],
        ["run", "in/unicode.yaml"],
        ["run", "in/empty.yaml"],
        ["run", "in/list.yaml"],
        ["run", "in/unknown_key.yaml"],
        ["run", "in/bad_op.yaml"],
        ["run", "in/bad_dtype.yaml"],
        ["run", "in/p2p_bad.yaml"],
        ["run", "in/bad_gate.yaml"],
        ["collectives", "--sizes", "\uff11K"],
        ["collectives", "--sizes", "1K-\uff11M"],
        ["collectives", "--sizes", "\u0664K"],
        ["collectives", "--sizes", "1K-1M:x\uff12"],
        ["collectives", "--sizes", "\u00b2K"],
        ["collectives", "--ranks", "\uff10,1"],
        ["collectives", "--rdzv-endpoint", "localhost:\u00b2"],
        ["collectives", "--nnodes", "2", "--rdzv-endpoint", "h:\uff11\uff12"],
        ["collectives", "--rdzv-endpoint", "h\uff11:29400"],
        ["p2p", "--dry-run", "--dst", "\u00b2"],
        ["p2p", "--dry-run", "--dst", "\uff11"],
        ["p2p", "--dry-run", "--src", "\u00b2"],
        ["p2p", "--dry-run", "--size", "\uff11K"],
        ["collectives", "--nnodes", "0"],
        ["collectives", "--timeout", "0.001"],
        ["collectives", "--dtype", "float32,nope"],
        ["collectives", "--dtype", ","],
        ["collectives", "--in-place", "maybe"],
        ["run", "in/in_place.yaml"],
        ["run", "in/world.yaml", "--device", "cpu"],
        ["run", "in/timeout.yaml", "--device", "cpu"],
        ["collectives", "--out", "in/run"],
        ["collectives", "--out", "in/suite"],
        ["run", "in/ok.yaml", "--device", "cpu", "--out", "in/run"],
        ["collectives", "--ranks", "0,,1"],
        ["collectives", "--ops", "all_reduce,"],
        ["collectives", "--ranks", ",".join(["0"] * 5000)],
        ["run", "in/ok.yaml", "--device", "cpu", "--out", "in/file"],
        ["run", "in/ok.yaml", "--device", "cpu", "--out", "in/file/x"],
        ["run", "in/ok.yaml", "--device", "cpu", "--baseline", "in/none"],
        ["run", "in/ok.yaml", "--device", "cpu", "--baseline", "in/bad"],
        ["run", "in/binary.yaml"],
        ["run", "in/control.yaml"],
        ["run", "in/unclosed.yaml"],
        ["run", "in/ok.yaml", "--tolerance", "lots"],
        ["run", "in/ok.yaml", "--backend", "mpi"],
        ["collectives", "--out", "in/" + "x" * 300],
    ):
        yield inv(*args, scratch=True)
    slurm_env = {"SLURM_JOB_ID": "42", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
    for key, value in (
        ("SLURM_JOB_NODELIST", "n[\u00b2]"),
        ("SLURM_JOB_NODELIST", "n[\uff11-\uff12]"),
        ("SLURM_JOB_NODELIST", "n[0-30000000]"),
        ("SLURM_JOB_NODELIST", "r[0-999]n[0-999]"),
        ("SLURM_JOB_NODELIST", "n[" + "9" * 5000 + "]"),
        ("SLURM_JOB_NODELIST", "n[5-1]"),
        ("SLURM_NODEID", "\u00b2"),
        ("SLURM_NODEID", "\uff11"),
        ("SLURM_NNODES", "9" * 5000),
        ("SLURM_NNODES", "0"),
    ):
        env = tuple(sorted({**slurm_env, key: value}.items()))
        yield inv("collectives", "--out", "o", env=env)


GROUPS = [
    helps,
    topo,
    p2p,
    compare,
    report,
    plot,
    export,
    import_nccl,
    model,
    jobs,
    replay,
    refused,
]


def invocations() -> list[Invocation]:
    """The whole list, in a fixed order; every key once."""
    found = [i for group in GROUPS for i in group()]
    keys = [i.key for i in found]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    assert not duplicates, duplicates
    return found


# --- running one ----------------------------------------------------------------------------


def _inputs(item: Invocation) -> set[str]:
    """The fx/... and cfg/... paths it names."""
    words = [*item.argv, *(v for _, v in item.env)]
    if item.machine:
        words += [item.machine, "fx/topology/fake_nvml.py"]
    found = set()
    for word in words:
        for prefix in PREFIXES:
            if word.startswith(prefix):
                found.add(word)
    return found


def _place(item: Invocation, cwd: Path) -> None:
    for word in sorted(_inputs(item)):
        for prefix, source_root in PREFIXES.items():
            if word.startswith(prefix):
                source = source_root / word[len(prefix) :]
                if not source.exists():
                    continue
                target = cwd / word
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.is_dir():  # sysfs trees link back up: links stay links
                    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
                else:
                    shutil.copy2(source, target)
    if item.scratch:
        for name, data in SCRATCH.items():
            path = cwd / "in" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        shutil.copytree(FIXTURES / "runs" / "cpu-gloo-a", cwd / "in" / "run")


def _tree(cwd: Path) -> dict[str, str]:
    """Each file's path (relative) -> sha256 of its bytes; links are not followed (a sysfs
    tree links back up to its parents)."""
    found = {}
    for top, _dirs, names in os.walk(cwd):
        for name in names:
            path = Path(top) / name
            if not path.is_symlink():
                found[path.relative_to(cwd).as_posix()] = hashlib.sha256(
                    path.read_bytes()
                ).hexdigest()
    return dict(sorted(found.items()))


def environment(repo: Path, rc_dir: Path) -> dict[str, str]:
    """The fixed environment every invocation starts from."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(DROPPED_ENV) and k not in DROPPED_NAMES and not k.startswith("PYTHON")
    }
    env.update(
        PYTHONPATH=str(repo),
        PYTHONHASHSEED="0",
        PYTHONDONTWRITEBYTECODE="1",
        CUDA_VISIBLE_DEVICES="",
        TZ="UTC",
        LC_ALL="C.UTF-8",
        LANG="C.UTF-8",
        COLUMNS="120",
        LINES="50",
        TERM="dumb",
        SOURCE_DATE_EPOCH="0",
        MATPLOTLIBRC=str(rc_dir / "matplotlibrc"),
    )
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    return env


@dataclass
class Normaliser:
    """Turns what differs between two runs of the same code into placeholders."""

    repo: Path
    today: dt.date = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).date())
    host: str = field(default_factory=socket.gethostname)

    def _dates(self) -> set[str]:
        return {str(self.today + dt.timedelta(days=d)) for d in (-1, 0, 1)}

    def text(self, text: str, cwd: Path) -> str:
        for path, name in (
            (str(cwd.resolve()), "<TMP>"),
            (str(cwd), "<TMP>"),
            (str(FIXTURES), "<FIXTURES>"),
            (str(self.repo.resolve()), "<REPO>"),
        ):
            text = text.replace(path, name)
        dates = self._dates()
        stamps = {d.replace("-", "") for d in dates}

        def iso(match: re.Match[str]) -> str:
            return "<TIME>" if match.group(1) in dates else match.group(0)

        def stamp(match: re.Match[str]) -> str:
            return "<STAMP>" if match.group(1) in stamps else match.group(0)

        text = re.sub(
            r"(\d{4}-\d{2}-\d{2})[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?", iso, text
        )
        text = re.sub(r"(?<!\d)(\d{8})-\d{6}(?!\d)", stamp, text)
        if self.host:
            text = re.sub(rf"(?<![\w.-]){re.escape(self.host)}(?![\w-])", "<HOST>", text)
        return text


def _file(data: bytes, normalise: Normaliser, cwd: Path) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        kind = "png" if data.startswith(b"\x89PNG\r\n\x1a\n") else "binary"
        return {"kind": kind, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return normalise.text(text, cwd)


def _execute(
    argv: list[str], cwd: Path, env: dict[str, str], stdin: bytes
) -> tuple[Any, bytes, bytes]:
    """Exit code (or "timeout"), stdout and stderr; on a timeout, its whole process group is
    killed (what it started included)."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return "timeout", out, err
    return proc.returncode, out, err


def run_one(
    item: Invocation, repo: Path, env: dict[str, str], normalise: Normaliser
) -> dict[str, Any]:
    """Run it in a fresh directory; what it printed, its exit code and what it wrote."""
    with tempfile.TemporaryDirectory(prefix="cb-snap-") as tmp:
        cwd = Path(tmp)
        _place(item, cwd)
        before = _tree(cwd)
        run_env = {**env, **dict(item.env)}
        if item.machine:
            run_env.pop("CUDA_VISIBLE_DEVICES", None)
            run_env.update(dict(item.env))
            argv = [sys.executable, "-c", FAKE_MACHINE, item.machine, *item.argv]
        else:
            argv = [sys.executable, "-m", "commbench", *item.argv]
        started = time.monotonic()
        code, out, err = _execute(argv, cwd, run_env, item.stdin.encode())
        seconds = time.monotonic() - started
        after = _tree(cwd)
        files: dict[str, Any] = {}
        for path, digest in after.items():
            if before.get(path) != digest:
                name = normalise.text(path, cwd)
                while name in files:  # two paths that normalise alike (same second)
                    name += "+"
                files[name] = _file((cwd / path).read_bytes(), normalise, cwd)
        for path in before.keys() - after.keys():
            files[normalise.text(path, cwd)] = None  # removed
        return {
            "key": item.key,
            "argv": list(item.argv),
            "env": dict(item.env),
            "machine": item.machine,
            "exit_code": code,
            "stdout": normalise.text(out.decode("utf-8", "replace"), cwd),
            "stderr": normalise.text(err.decode("utf-8", "replace"), cwd),
            "files": dict(sorted(files.items())),
            "seconds": round(seconds, 2),
        }


def _commit(repo: Path) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return proc.stdout.strip()


def snapshot(repo: Path, jobs: int, only: str | None, progress: bool = True) -> dict[str, Any]:
    items = [i for i in invocations() if only is None or only in i.key]
    normalise = Normaliser(repo=repo)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cb-snap-rc-") as rc:
        rc_dir = Path(rc)
        (rc_dir / "matplotlibrc").write_text(MATPLOTLIBRC)
        env = environment(repo, rc_dir)
        results: list[dict[str, Any]] = []
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(run_one, i, repo, env, normalise) for i in items]
            for n, future in enumerate(futures, 1):
                results.append(future.result())
                if progress and (n % 25 == 0 or n == len(futures)):
                    print(
                        f"{n}/{len(futures)} invocations, {time.monotonic() - started:.0f} s",
                        file=sys.stderr,
                    )
    return {
        "schema": SCHEMA,
        "repo": str(repo),
        "commit": _commit(repo),
        "invocations": len(results),
        "seconds": round(time.monotonic() - started, 1),
        "results": results,
    }


# --- the diff -------------------------------------------------------------------------------

COMPARED = ("exit_code", "stdout", "stderr")
"""The fields of one invocation that must be equal (with `files`); `seconds` never is."""


def _lines(value: Any) -> list[str]:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    return text.splitlines(keepends=True) or [""]


def _unified(a: Any, b: Any, what: str) -> list[str]:
    lines = list(difflib.unified_diff(_lines(a), _lines(b), f"before {what}", f"after {what}", n=2))
    return [line if line.endswith("\n") else line + "\n" for line in lines]


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One report per invocation that differs (or is in one snapshot only), in order."""
    old = {r["key"]: r for r in before["results"]}
    new = {r["key"]: r for r in after["results"]}
    found: list[str] = []
    for key in [*old, *(k for k in new if k not in old)]:
        if key not in new or key not in old:
            side = "before" if key in old else "after"
            found.append(f"=== {key}\nonly in the {side} snapshot\n")
            continue
        a, b = old[key], new[key]
        parts: list[str] = []
        for name in COMPARED:
            if a[name] != b[name]:
                parts += _unified(a[name], b[name], name)
        for path in sorted(a["files"].keys() | b["files"].keys()):
            if path not in b["files"]:
                parts.append(f"file {path}: written before, not after\n")
            elif path not in a["files"]:
                parts.append(f"file {path}: written after, not before\n")
            elif a["files"][path] != b["files"][path]:
                parts += _unified(a["files"][path], b["files"][path], f"file {path}")
        if parts:
            found.append(f"=== {key}\n" + "".join(parts))
    return found


def diff_files(before: Path, after: Path, only: str | None = None) -> int:
    """Print the differences; 1 if there is any. `only`: compare just the invocations whose
    key holds this text (as `--only` ran them)."""
    a, b = (json.loads(p.read_text()) for p in (before, after))
    if only is not None:
        for data in (a, b):
            data["results"] = [r for r in data["results"] if only in r["key"]]
    found = differences(a, b)
    for report in found:
        sys.stdout.write(report)
    keys = {r["key"] for r in a["results"]} | {r["key"] for r in b["results"]}
    print(f"{len(found)} of {len(keys)} invocations differ")
    return 1 if found else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="checkout to run (default: this)")
    parser.add_argument("--out", type=Path, help="write the snapshot here (JSON)")
    parser.add_argument("--jobs", type=int, default=2, help="invocations at once (default 2)")
    parser.add_argument(
        "--only", help="run (or, with --diff, compare) only the invocations whose key holds this"
    )
    parser.add_argument("--list", action="store_true", help="print the invocations' keys")
    parser.add_argument(
        "--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"), help="compare two snapshots"
    )
    args = parser.parse_args(argv)
    if args.diff:
        return diff_files(*args.diff, only=args.only)
    if args.list:
        for item in invocations():
            print(item.key)
        return 0
    if args.out is None:
        parser.error("--out is required (or --diff, --list)")
    repo = args.repo.resolve()
    data = snapshot(repo, args.jobs, args.only)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    codes: dict[str, int] = {}
    for result in data["results"]:
        codes[str(result["exit_code"])] = codes.get(str(result["exit_code"]), 0) + 1
    print(
        f"{data['invocations']} invocations of {repo} ({data['commit'][:7]}) in "
        f"{data['seconds']} s; exit codes {dict(sorted(codes.items()))}; written to {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
