"""How faithful is `commbench replay`? Record a DDP job across two nodes whose link is the
bottleneck, replay the trace on the same two nodes, and compare the communication time per
step: recorded (the job's own calls, issue to seen-complete) against replayed (the same calls
issued by commbench's workers, no compute).

The nodes are network namespaces on one bridge (tests/netns_cluster.py), each link shaped by
`tc tbf` to `--rate-mbit`, so that the link, not the 2 shared cores, sets the time: the same
setup the regression gate's power was measured on. Needs root, iproute2 and util-linux.

    sudo python benchmarks/replay_fidelity.py                  # about a minute
    sudo python benchmarks/replay_fidelity.py --rate-mbit 200 --steps 8 --json out.json

Prints one line per step (recorded, replayed, replayed / recorded) and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from netns_cluster import Cluster  # noqa: E402

JOB = ROOT / "tests" / "jobs" / "ddp_mlp.py"
PORTS = (29701, 29702, 29703)


def torchrun(cluster: Cluster, node: int, port: int, rest: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
        str(node), "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
        f"{cluster.addresses[0]}:{port}", "--rdzv-id", f"fidelity{port}", *rest,
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate-mbit", type=float, default=500.0)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--bucket-cap-mb", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="copy the trace and the replay's run here")
    parser.add_argument(
        "--pace", action="store_true", help="replay with --pace (the recorded gaps)"
    )
    parser.add_argument(
        "--pace-compute",
        action="store_true",
        help="replay with --pace-compute (the recorded gaps as busy compute)",
    )
    args = parser.parse_args()
    pace = ["--pace-compute"] if args.pace_compute else ["--pace"] if args.pace else []
    with tempfile.TemporaryDirectory() as tmp, Cluster(2, prefix="cf") as cluster:
        for node in (0, 1):
            cluster.shape(node, rate_mbit=args.rate_mbit)
        trace = Path(tmp) / "trace"
        step_times = {}
        for mode, port in (("plain", PORTS[2]), ("recorded", PORTS[0])):
            times = Path(tmp) / f"{mode}-times.json"
            job = [str(JOB), "--steps", str(args.steps), "--bucket-cap-mb", str(args.bucket_cap_mb)]
            job += ["--times", str(times)]
            lines = [cluster.shell_line(n, torchrun(cluster, n, port, job)) for n in (0, 1)]
            script = f"{lines[0]} & a=$!; {lines[1]} & b=$!; wait $a && wait $b"
            record = [sys.executable, "-m", "commbench", "record", "-o", str(trace), "--"]
            argv = ["sh", "-c", script]
            subprocess.run(
                [*record, *argv] if mode == "recorded" else argv, check=True, timeout=600
            )
            step_times[mode] = json.loads(times.read_text())
        procs = []
        for n in (0, 1):
            replay = [
                sys.executable, "-m", "commbench", "replay", str(trace), "--device", "cpu",
                "--nproc", "1", "--nnodes", "2", "--node-rank", str(n), "--rdzv-endpoint",
                f"{cluster.addresses[0]}:{PORTS[1]}", "--out", f"{tmp}/out{n}",
                "--iters", str(args.repeats), *pace,
            ]  # fmt: skip
            procs.append(cluster.popen(n, replay, stdout=subprocess.PIPE, text=True))
        for p in procs:
            p.communicate(timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"replay exited {p.returncode}")
        (run,) = [d for d in Path(tmp, "out0").iterdir() if (d / "run.json").exists()]
        replay_record: dict[str, Any] = json.loads((run / "run.json").read_text())["replay"]
        if args.keep:
            shutil.copytree(trace, args.keep / "trace")
            shutil.copytree(run, args.keep / "replay")
    recorded = replay_record["recorded_comm_s_per_step"]
    replayed = replay_record["replayed_comm_s_per_step"]
    numbers = replay_record["step_numbers"]
    ratios = []
    for n, rec, rep in zip(numbers, recorded, replayed, strict=False):
        ratio = rep / rec if rec and rep else None
        if ratio is not None:
            ratios.append(ratio)
        print(
            f"step {n}: recorded {rec * 1e3:.1f} ms, replayed {rep * 1e3:.1f} ms, ratio {ratio:.2f}"
        )
    summary = {
        "link": f"2 netns nodes, tc tbf {args.rate_mbit:g} Mbit/s each way",
        "pace": "compute" if args.pace_compute else args.pace,
        "job": f"DDP MLP 4 x Linear(512), bucket_cap_mb {args.bucket_cap_mb}, 1 rank per node",
        "steps": numbers,
        "recorded_s": recorded,
        "recorded_wait_s": replay_record["recorded_wait_s_per_step"],
        "job_step_s_plain": step_times["plain"],
        "job_step_s_recorded": step_times["recorded"],
        "replayed_s": replayed,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "ratio_min": min(ratios, default=None),
        "ratio_max": max(ratios, default=None),
    }
    print(
        f"replayed / recorded: median {summary['median_ratio']:.2f} "
        f"(steps {summary['ratio_min']:.2f} .. {summary['ratio_max']:.2f})"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
