"""Record each training job of tests/jobs/ with `commbench record`, check the recording against
the job's own truth, replay it with `commbench replay --pace`, and print one row a job: its
calls, whether the recording is exact, the replay's exit, and the replayed / recorded median
communication time per step (issue 34's bound: between 0.5 and 2 with --pace).

    python benchmarks/replay_jobs.py                       # the jobs of tests/job_truth.py
    python benchmarks/replay_jobs.py --only fsdp2 --only tp_dtensor
    python benchmarks/replay_jobs.py --job "moe=moe_uneven_job.py:2 --steps 3" --json out.json

`--job` adds a job (`[NAME=]SCRIPT[:NPROC] [ARG...]`, a file of tests/jobs/ or a path; with
`--only-given`, only those run). A job that prints no truth in tests/jobs/truth.py's format
(`truth: {...}`) has `-` for exactness. Two CPU ranks a job by default, gloo, torchrun
--standalone: about 10 to 20 s a job (a first torch.compile adds half a minute).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from commbench.tables import fixed, text_table  # noqa: E402
from tests.job_truth import JOBS, JobSpec, compare, record, replay  # noqa: E402

BOUND = (0.5, 2.0)


@dataclass(slots=True)
class Row:
    """One job's record, check and replay."""

    job: str
    ranks: int
    record_exit: int
    record_s: float
    calls: int | None = None
    """Calls recorded, over every rank."""
    exact: bool | None = None
    """The recording matches the job's truth call for call; None without truth."""
    mismatches: list[str] = field(default_factory=list)
    replay_exit: int | None = None
    replay_s: float | None = None
    refused: list[str] = field(default_factory=list)
    recorded_s: float | None = None
    """Median recorded communication time per step."""
    replayed_s: float | None = None
    ratio: float | None = None
    """replayed_s / recorded_s: issue 34's figure."""
    step_ratios: list[float] = field(default_factory=list)
    ratio_less_waiting: float | None = None
    """replayed_s / the median of (recorded - waiting for peers): like with like, a replay's
    ranks start each step together."""

    @property
    def within(self) -> str:
        if self.ratio is None:
            return "-"
        return "yes" if BOUND[0] <= self.ratio <= BOUND[1] else "no"

    def cells(self) -> list[str]:
        exact = (
            "-" if self.exact is None else "yes" if self.exact else f"no ({len(self.mismatches)})"
        )
        return [self.job, str(self.ranks), _text(self.calls), exact, _text(self.replay_exit),
                fixed(self.ratio), self.within, fixed(self.ratio_less_waiting),
                f"{self.record_s:.1f}", fixed(self.replay_s, 1)]  # fmt: skip


HEADERS = ["job", "ranks", "calls", "record exact", "replay exit", "replayed/recorded",
           "within 0.5..2", "vs recorded-waiting", "record s", "replay s"]  # fmt: skip


def _text(value: int | None) -> str:
    return "-" if value is None else str(value)


def run_job(spec: JobSpec, where: Path, replay_args: list[str]) -> Row:
    """Record, compare and replay one job."""
    recorded = record(spec, where / "trace")
    row = Row(spec.name, spec.nproc, recorded.returncode, recorded.seconds)
    if recorded.returncode != 0:
        sys.stderr.write(f"{spec.name}: record exited {recorded.returncode}\n")
        sys.stderr.write(recorded.stderr[-3000:])
        return row
    trace = recorded.trace()
    row.calls = sum(len(calls) for calls in trace.calls.values())
    if recorded.truth:
        row.mismatches = [str(m) for m in compare(trace, recorded.truth)]
        row.exact = not row.mismatches
    done = replay(where / "trace", where / "replay", *replay_args)
    row.replay_exit, row.replay_s, row.refused = done.returncode, done.seconds, done.refused
    if done.replay is not None:
        rep = done.replay
        row.recorded_s, row.replayed_s, row.ratio = (
            rep.recorded_comm_s,
            rep.replayed_comm_s,
            done.ratio,
        )
        pairs = zip(rep.recorded_comm_s_per_step, rep.replayed_comm_s_per_step, strict=False)
        row.step_ratios = [b / a for a, b in pairs if a and b is not None]
        waits = zip(rep.recorded_comm_s_per_step, rep.recorded_wait_s_per_step, strict=False)
        less = [a - w for a, w in waits if a is not None and w is not None]
        if less and statistics.median(less) > 0 and rep.replayed_comm_s is not None:
            row.ratio_less_waiting = rep.replayed_comm_s / statistics.median(less)
    if done.returncode != 0:
        sys.stderr.write(f"{spec.name}: replay exited {done.returncode}\n")
        sys.stderr.write((done.stdout + done.stderr)[-2000:])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", action="append", default=[], help="[NAME=]SCRIPT[:NPROC] [ARG...]")
    parser.add_argument("--only", action="append", default=[], help="run this job of the list")
    parser.add_argument("--only-given", action="store_true", help="only the --job jobs")
    parser.add_argument("--iters", type=int, help="replay --iters (default: replay's)")
    parser.add_argument("--warmup", type=int, help="replay --warmup (default: replay's)")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="replay --timeout: seconds without progress"
    )
    parser.add_argument(
        "--pace-compute", action="store_true", help="replay --pace-compute (gaps as compute)"
    )
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--keep", type=Path, help="keep each job's trace and replay here")
    args = parser.parse_args()
    specs = [] if args.only_given else [s for s in JOBS if not args.only or s.name in args.only]
    specs += [JobSpec.parse(text) for text in args.job]
    replay_args = ["--timeout", str(args.timeout),
                   *(["--pace-compute"] if args.pace_compute else []),
                   *(["--iters", str(args.iters)] if args.iters else []),
                   *(["--warmup", str(args.warmup)] if args.warmup is not None else [])]  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            where = (args.keep or Path(tmp)) / spec.name
            where.mkdir(parents=True, exist_ok=True)
            rows.append(run_job(spec, where, replay_args))
            sys.stderr.write(f"{spec.name}: done\n")
    print("\n".join(text_table(HEADERS, [r.cells() for r in rows], left=(0, 3))))
    for r in rows:
        for line in r.mismatches[:4]:
            print(f"{r.job}: {line}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")


if __name__ == "__main__":
    main()
