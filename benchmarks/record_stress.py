"""Does `commbench record` ever hang a job? The deadlock a Python kernel on the dispatch path
can cause on gloo (docs/design/record-capture.md) is a race: this runs the DDP job of the
tests with tiny buckets (thousands of collectives) under `commbench record` `--runs` times,
each with a timeout, and counts the runs that hung or failed.

    python benchmarks/record_stress.py --runs 50       # about 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = Path(__file__).resolve().parents[1] / "tests" / "jobs" / "ddp_mlp.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    hung = failed = calls = 0
    started = time.monotonic()
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable, "-m", "commbench", "record", "-o", f"{tmp}/trace", "--",
                sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-port", str(free_port()), str(JOB), "--steps", str(args.steps),
                "--width", "128", "--layers", "16", "--bucket-cap-mb", "0.03",
            ]  # fmt: skip
            try:
                done = subprocess.run(cmd, capture_output=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                hung += 1
                print(f"run {i + 1}: hung", flush=True)
                subprocess.run(["pkill", "-f", f"{tmp}/trace"], check=False)
                continue
            if done.returncode != 0:
                failed += 1
                print(f"run {i + 1}: exit {done.returncode}", flush=True)
                continue
            files = sorted(Path(tmp, "trace").glob("rank-*.jsonl"))
            if len(files) != 2:
                failed += 1
                print(f"run {i + 1}: {len(files)} rank files, not 2", flush=True)
                continue
            calls += sum(len(f.read_text().splitlines()) for f in files)
    summary = {
        "runs": args.runs,
        "hung": hung,
        "failed": failed,
        "calls": calls,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
