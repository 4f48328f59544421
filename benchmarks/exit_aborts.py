"""Does a job abort at exit, and does `commbench record` make it more likely? Issue 43: a
pipeline job under `record` died once in a loaded suite run with SIGABRT ("terminate called
without an active exception"), and a plain torchrun of an MoE job once did too. This runs each
job class of the suite's own jobs (tests/jobs/) `--runs` times plain and `--runs` times under
`commbench record`, interleaved so that both sides meet the same load, under a CPU load it
makes itself (`--busy` processes spinning, plus `--parallel` runs at once), and counts the
runs that aborted (a worker killed by SIGABRT, or "terminate called" on its stderr) or failed
otherwise.

    python benchmarks/exit_aborts.py --runs 50 --busy 2 --parallel 2 --json out.json

`--runs 50` over the 4 job classes is 200 runs a side; about 25 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "tests" / "jobs"
CLASSES: dict[str, list[str]] = {
    "pipeline_1f1b": ["pipeline_1f1b_job.py"],
    "moe_uneven": ["moe_uneven_job.py"],
    "ddp": ["ddp_mlp.py"],
    "tp_dtensor": ["tp_dtensor_job.py"],
}
ABORT_MARKS = ("terminate called", "SIGABRT", "exitcode  : -6")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def spin() -> None:  # pragma: no cover - a busy loop, the load
    while True:
        pass


def one(job: str, args: list[str], record: bool, timeout: float) -> dict[str, object]:
    """One run of `job`: its outcome ("ok", "abort", "failed", "hung") and seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        torchrun = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-port", str(free_port()), str(JOBS / job), *args,
        ]  # fmt: skip
        cmd = [sys.executable, "-m", "commbench", "record", "-o", f"{tmp}/trace", "--", *torchrun]
        started = time.monotonic()
        try:
            done = subprocess.run(
                cmd if record else torchrun,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=tmp,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(JOBS), str(ROOT)])},
            )
        except subprocess.TimeoutExpired:
            subprocess.run(["pkill", "-f", str(JOBS / job) + ".*" + tmp], check=False)
            return {"outcome": "hung", "seconds": timeout}
        seconds = round(time.monotonic() - started, 2)
        text = done.stdout + done.stderr
        if any(mark in text for mark in ABORT_MARKS):
            outcome = "abort"
        elif done.returncode != 0:
            outcome = "failed"
        else:
            outcome = "ok"
        result: dict[str, object] = {"outcome": outcome, "seconds": seconds}
        if outcome != "ok":
            result["rc"] = done.returncode
            result["tail"] = text[-1500:]
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="runs a job class and a side")
    parser.add_argument("--busy", type=int, default=2, help="spinning processes: the load")
    parser.add_argument("--parallel", type=int, default=2, help="runs at once")
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    classes = args.classes.split(",")
    plan = [
        (name, record) for _ in range(args.runs) for name in classes for record in (True, False)
    ]
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    started = time.monotonic()
    counts: dict[str, dict[str, dict[str, int]]] = {}
    failures: list[dict[str, object]] = []
    loads: list[float] = []
    try:
        with ThreadPoolExecutor(args.parallel) as pool:
            futures = [
                (
                    name,
                    record,
                    pool.submit(one, *CLASSES[name][:1], CLASSES[name][1:], record, args.timeout),
                )
                for name, record in plan
            ]
            for i, (name, record, future) in enumerate(futures, 1):
                result = future.result()
                loads.append(os.getloadavg()[0])
                side = "record" if record else "plain"
                tally = counts.setdefault(name, {}).setdefault(side, {})
                tally[str(result["outcome"])] = tally.get(str(result["outcome"]), 0) + 1
                if result["outcome"] != "ok":
                    failures.append({"class": name, "side": side, **result})
                    print(f"[{i}/{len(plan)}] {name} {side}: {result['outcome']}", flush=True)
                elif i % 20 == 0:
                    print(f"[{i}/{len(plan)}] {json.dumps(counts)}", flush=True)
    finally:
        for p in spinners:
            p.terminate()
    summary = {
        "runs_per_class_and_side": args.runs,
        "busy": args.busy,
        "parallel": args.parallel,
        "load_median": sorted(loads)[len(loads) // 2] if loads else None,
        "seconds": round(time.monotonic() - started, 1),
        "counts": counts,
        "failures": failures,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "failures"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
