"""Signals as schedulers send them, to a two-node run (two commbench processes on this
machine, each with its own torchrun agent, meeting at a c10d rendezvous on 127.0.0.1).

SLURM, at a job's time limit, sends SIGTERM to every process of the job step (then SIGKILL
after KillWait); Kubernetes, at preemption, sends SIGTERM to the container's first process
(then SIGKILL after the grace period, 30 s by default). Each node then exits 143 (130 for a
Ctrl-C, SIGINT), and within 10 s of the signal everything is final on disk: run.json closed
as interrupted on each node, results.json and results.csv strict and holding every row
measured, no process of the run left. At three moments: during the launch and rendezvous,
mid-sweep, near the end.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from commbench.launch import procs
from commbench.processes import RUN_MARKER

pytestmark = pytest.mark.integration

FINAL_WITHIN_S = 10.0
"""What a user is promised: well inside SLURM's KillWait and Kubernetes' 30 s grace."""

SIZES = "16K-8M"
POINTS = 10  # 1K, 2K, ... 512K: one all_reduce each


def _strict(text: str) -> Any:
    """JSON as commbench promises to write it: no NaN, no Infinity."""

    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _start(port: int, node: int, out: Path) -> subprocess.Popen[str]:
    """One node, in a process group of its own, as a scheduler starts a job step's task."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "commbench", "collectives",
            "--nnodes", "2", "--node-rank", str(node),
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"stop{port}",
            "--nproc", "1", "--device", "cpu", "--ops", "all_reduce", "--sizes", SIZES,
            "--iters", "20", "--warmup", "2", "--timeout", "120", "--no-plot",
            "-o", str(out / f"node{node}"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def _run_dir(out: Path, node: int) -> Path | None:
    found = [p for p in (out / f"node{node}").glob("*") if (p / "run.json").is_file()]
    return found[0] if found else None


def _rows_written(out: Path) -> int:
    """Rows in whichever node's results.json holds them (global rank 0's node writes them)."""
    most = 0
    for node in (0, 1):
        run_dir = _run_dir(out, node)
        if run_dir is None:
            continue
        try:
            most = max(most, len(_strict((run_dir / "results.json").read_text())["rows"]))
        except (OSError, ValueError, KeyError):
            continue  # not written yet
    return most


def _workers_started(nodes: list[subprocess.Popen[str]]) -> bool:
    """Every node's torchrun has started a worker: the rendezvous is under way."""
    return all(len(procs.descendants(p.pid)) >= 2 for p in nodes)


def _wait_for(
    what: Callable[[], bool], nodes: list[subprocess.Popen[str]], limit: float = 240
) -> None:
    deadline = time.monotonic() + limit
    while not what():
        for p in nodes:
            assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the moment to signal never came"
        time.sleep(0.02)


MOMENTS: dict[str, Callable[[list[subprocess.Popen[str]], Path], bool]] = {
    "launch": lambda nodes, out: _workers_started(nodes),
    "mid-sweep": lambda nodes, out: _rows_written(out) >= 3,
    "near-end": lambda nodes, out: _rows_written(out) >= POINTS - 2,
}


def _job(nodes: list[subprocess.Popen[str]]) -> set[int]:
    """Every process of the job now: each node's commbench and all it started."""
    job = {p.pid for p in nodes}
    for p in nodes:
        job |= procs.descendants(p.pid)
    return job


def _send(nodes: list[subprocess.Popen[str]], job: set[int], sig: int, whole_job: bool) -> None:
    """`sig` to each node's process group and, `whole_job`, to every process of the `job` as
    SLURM does (torchrun and the workers run in sessions of their own, out of the group)."""
    for p in nodes:
        os.killpg(p.pid, sig)
    if whole_job:
        procs.signal_all(job - {p.pid for p in nodes}, sig)


def _final(run_dir: Path) -> dict[str, Any]:
    """run.json, results.json and results.csv, each read strictly: run.json's record, with
    the rows of the other two (None where this node holds none)."""
    record = _strict((run_dir / "run.json").read_text())
    rows = None
    if (run_dir / "results.json").exists():
        rows = _strict((run_dir / "results.json").read_text())["rows"]
        with (run_dir / "results.csv").open(newline="") as f:
            table = list(csv.DictReader(io.StringIO(f.read(), newline="")))
        assert len(table) == len(rows), run_dir
        assert [int(r["size_bytes"]) for r in table] == [r["size_bytes"] for r in rows]
    return {"record": record, "rows": rows}


def _stopped_run(
    tmp_path: Path, port: int, moment: str, sig: int, whole_job: bool
) -> tuple[list[subprocess.Popen[str]], list[str], float, list[dict[str, Any]]]:
    """Start two nodes, send `sig` at `moment`, and return them, their stderr, the seconds
    from the signal until both had exited with no process of the run left, and each node's
    final files."""
    out = tmp_path / "out"
    nodes = [_start(port, node, out) for node in (0, 1)]
    job = {p.pid for p in nodes}
    try:
        _wait_for(lambda: MOMENTS[moment](nodes, out), nodes)
        job = _job(nodes)
        _send(nodes, job, sig, whole_job)
        sent = time.monotonic()
        errs = [p.communicate(timeout=120)[1] for p in nodes]
        while any(procs.alive(pid) for pid in job) and time.monotonic() - sent < 60:
            time.sleep(0.01)
        took = time.monotonic() - sent
    finally:
        for p in nodes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        procs.signal_all({pid for pid in job if procs.alive(pid)}, signal.SIGKILL)
    finals = []
    for node in (0, 1):
        run_dir = _run_dir(out, node)
        assert run_dir is not None, errs[node]
        finals.append(_final(run_dir))
        # a worker torchrun started after the signal is no descendant seen above: its marker
        assert not procs.marked(RUN_MARKER, str(run_dir.resolve())), node
    print(f"{moment} {signal.Signals(sig).name} whole_job={whole_job}: final in {took:.2f} s")
    return nodes, errs, took, finals


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_schedulers_sigterm_to_the_whole_job_exits_143_with_everything_final(
    tmp_path: Path, free_port: int, moment: str
) -> None:
    """SLURM's way: every process of the step gets SIGTERM, torchrun and workers included."""
    nodes, errs, took, finals = _stopped_run(tmp_path, free_port, moment, signal.SIGTERM, True)
    assert [p.returncode for p in nodes] == [143, 143], errs
    assert took < FINAL_WITHIN_S, f"{took:.1f} s from the signal until all was final"
    _interrupted_with_every_row_measured(finals, errs, moment)


def test_a_sigterm_to_the_first_process_only_exits_143_with_everything_final(
    tmp_path: Path, free_port: int
) -> None:
    """Kubernetes' way: only the container's first process (commbench) gets SIGTERM."""
    nodes, errs, took, finals = _stopped_run(
        tmp_path, free_port, "mid-sweep", signal.SIGTERM, False
    )
    assert [p.returncode for p in nodes] == [143, 143], errs
    assert took < FINAL_WITHIN_S, f"{took:.1f} s from the signal until all was final"
    _interrupted_with_every_row_measured(finals, errs, "mid-sweep")


def test_ctrl_c_still_exits_130(tmp_path: Path, free_port: int) -> None:
    """The terminal's Ctrl-C: SIGINT to the foreground process group (commbench's)."""
    nodes, errs, took, finals = _stopped_run(tmp_path, free_port, "mid-sweep", signal.SIGINT, False)
    assert [p.returncode for p in nodes] == [130, 130], errs
    assert took < FINAL_WITHIN_S, f"{took:.1f} s from the signal until all was final"
    _interrupted_with_every_row_measured(finals, errs, "mid-sweep")


def _interrupted_with_every_row_measured(
    finals: list[dict[str, Any]], errs: list[str], moment: str
) -> None:
    """Each node's run.json is closed as interrupted (or, a signal that came as the last
    point landed, complete with every point), and the rows on disk are those it counts."""
    for node, final in enumerate(finals):
        record = final["record"]
        assert record["finished_at"], (node, record)
        done = record["points_done"]
        if record["status"] == "complete":  # the sweep ended as the signal came
            assert moment == "near-end" and done == POINTS, (node, record, errs[node])
        else:
            assert record["status"] == "interrupted", (node, record, errs[node])
        if final["rows"] is not None:
            assert len(final["rows"]) == done, (node, record)
    writers = [f for f in finals if f["rows"]]
    if moment == "launch":
        assert all(f["record"]["points_done"] == 0 for f in finals), finals
    else:
        assert len(writers) == 1, finals  # global rank 0's node holds the rows
        assert len(writers[0]["rows"]) >= (3 if moment == "mid-sweep" else POINTS - 2)
    assert all("Traceback" not in e for e in errs), errs
