"""Training jobs that print their own ground truth (tests/jobs/truth.py), recorded by
`commbench record` and replayed by `commbench replay --pace`: what tests/test_jobs_record.py
checks and benchmarks/replay_jobs.py measures.

`record` runs `commbench record -o TRACE -- torchrun --nproc-per-node N JOB`, `parse_truth`
reads the job's `truth: {...}` lines from its output, `compare` sets each rank's recorded
calls against them call for call in issue order, and `replay` runs `commbench replay TRACE
--pace` and reads its run directory.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from commbench.results.replay import ReplayRecord
from commbench.results.runs import load_run
from commbench.traces.reader import read_trace
from commbench.traces.records import Call, Trace

JOBS_DIR = Path(__file__).parent / "jobs"
TRUTH_PREFIX = "truth: "
RECORD_TIMEOUT = 240.0
REPLAY_TIMEOUT = 240.0
REFUSALS = ("refused", "no progress", "hang")
"""Words of a replay that did not run its trace through: a refusal, the watchdog's hang."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job of tests/jobs/ and how it is launched."""

    name: str
    script: str
    """Its file in tests/jobs/ (or a path)."""
    nproc: int = 2
    args: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return JOBS_DIR / self.script

    @classmethod
    def parse(cls, text: str) -> JobSpec:
        """`[NAME=]SCRIPT[:NPROC] [ARG...]` (a script alone is named by its stem; a script
        is a file of tests/jobs/ or a path): `moe=moe_uneven_job.py:2 --steps 3`."""
        first, *args = shlex.split(text)
        name, _, rest = first.rpartition("=")
        script, _, nproc = rest.partition(":")
        return cls(name or Path(script).stem, script, int(nproc or 2), tuple(args))


JOBS = (
    JobSpec("tp_dtensor", "tp_dtensor_job.py"),
    JobSpec("subgroups", "subgroups_job.py", nproc=4),
    JobSpec("async_objects", "async_objects_job.py"),
    JobSpec("async_objects_uneven", "async_objects_job.py", args=("--uneven",)),
    JobSpec("functional", "functional_job.py"),
    JobSpec("functional_aot_eager", "functional_job.py", args=("--backend", "aot_eager")),
    JobSpec("coalesced", "coalesced_job.py"),
    JobSpec("coalesced_ring4", "coalesced_job.py", nproc=4),
    JobSpec("fsdp2", "fsdp2_job.py"),
    # written independently of the ones above (a hostile review's): the list form of
    # all_to_all with all_gather_object, a ring of single isend/irecv, new_subgroups with
    # locally synchronised groups, a compiled module calling functional collectives
    JobSpec("moe_list", "hostile_moe_list_job.py"),
    JobSpec("p2p_ring", "hostile_p2p_ring_job.py"),
    JobSpec("subgroups_local", "hostile_subgroups_job.py", nproc=4),
    JobSpec("compiled_funcol", "hostile_compiled_funcol_job.py"),
    # pipelining's 1F1B (batched p2p) with its shapes given; with them inferred (metadata
    # objects) on pipeline subgroups of a dp x pp mesh, the replicas' gradients all-reduced;
    # Interleaved 1F1B with 2 stages a rank, shapes inferred, an optimizer a stage (a training
    # step steps two optimizers); the zero-bubble V schedule (2 stages a rank, in a V)
    JobSpec("pp_1f1b", "pipeline_1f1b_job.py"),
    JobSpec(
        "pp_1f1b_dp", "pipeline_1f1b_job.py", nproc=4, args=("--dp", "2", "--shapes", "inferred")
    ),
    JobSpec("pp_zbv", "pipeline_1f1b_job.py", args=("--schedule", "zbv")),
    JobSpec(
        "pp_interleaved",
        "pipeline_1f1b_job.py",
        args=("--schedule", "interleaved", "--shapes", "inferred", "--optimizer-per-stage"),
    ),
    # FSDP2 beyond the defaults: nested groups with mixed precision and some modules kept
    # unsharded after forward; gradient accumulation without sync on all but the last; HSDP
    # accumulating with reduce-scatters, all-reducing the last; the last two clip their
    # gradients' norm (an all_reduce of the partial norms)
    JobSpec(
        "fsdp2_nested_mixed_keep", "fsdp2_variants_job.py", args=("--nested", "--mixed", "--keep")
    ),
    JobSpec("fsdp2_accumulate", "fsdp2_variants_job.py", args=("--accumulate", "2", "--clip")),
    JobSpec(
        "fsdp2_hsdp",
        "fsdp2_variants_job.py",
        nproc=4,
        args=("--hsdp", "--nested", "--clip", "--accumulate", "2", "--reduce-scatter-each"),
    ),
    # tensor parallel with sequence parallel (all_gather, reduce_scatter, the optimizer's
    # all_reduce of Partial gradients); TP within "tp" and FSDP2 over "dp" on a 2-D mesh
    JobSpec("tp_sequence", "tp_sequence_job.py"),
    # rank 0 broadcasts batches of varying length; an optimizer for the matrices, one for the
    # rest (whose step reduces the norm's Partial gradients)
    JobSpec(
        "tp_sequence_data_two_optimizers",
        "tp_sequence_job.py",
        args=("--broadcast-data", "--two-optimizers"),
    ),
    JobSpec("tp_fsdp_2d", "tp_fsdp_2d_job.py", nproc=4),
    # a vocabulary-parallel head and loss_parallel's cross entropy (its inserted all_reduces)
    JobSpec("tp_loss_parallel", "tp_loss_parallel_job.py"),
)
"""The jobs whose truth is in truth.py's format."""


@dataclass(frozen=True, slots=True)
class Truth:
    """One call as the job says it made it (tests/jobs/truth.py describes each field)."""

    rank: int
    step: int | None
    op: str
    in_bytes: int
    out_bytes: int
    dtype: str
    group: tuple[int, ...]
    peer: int | None
    async_op: bool | None
    in_splits: tuple[int, ...] | None
    out_splits: tuple[int, ...] | None
    batch: int | None = None
    """Which of the rank's batch_isend_irecv's the call was in; None where the job does not
    say."""

    @classmethod
    def from_json(cls, text: str) -> Truth:
        d = json.loads(text)
        return cls(
            rank=d["rank"],
            step=d["step"],
            op=d["op"],
            in_bytes=d["bytes"],
            out_bytes=d["out_bytes"],
            dtype=d["dtype"],
            group=tuple(d["group"]),
            peer=d["peer"],
            async_op=d["async"],
            in_splits=None if d["in_splits"] is None else tuple(d["in_splits"]),
            out_splits=None if d["out_splits"] is None else tuple(d["out_splits"]),
            batch=d.get("batch"),
        )

    def __str__(self) -> str:
        return (
            f"{self.op} step={self.step} bytes={self.in_bytes}/{self.out_bytes} {self.dtype} "
            f"group={list(self.group)} peer={self.peer} async={self.async_op}"
            + (f" splits={self.in_splits}/{self.out_splits}" if self.in_splits else "")
        )


def parse_truth(stdout: str) -> dict[int, list[Truth]]:
    """Each rank's truth lines, in the order the rank printed them. A truth line is one
    write, but may land in the middle of another rank's line (a `print` unbuffered writes
    its text and its newline apart): it is read wherever it starts on the line."""
    out: dict[int, list[Truth]] = {}
    for line in stdout.splitlines():
        at = line.find(TRUTH_PREFIX + "{")
        if at >= 0:
            truth = Truth.from_json(line[at + len(TRUTH_PREFIX) :])
            out.setdefault(truth.rank, []).append(truth)
    return out


def splits(call: Call, side: str) -> tuple[int, ...] | None:
    """A recorded call's splits, where the trace keeps them (a field named `in_splits` or
    `out_splits`; a trace that keeps none has None)."""
    value = getattr(call, f"{side}_splits", None)
    return None if value is None else tuple(value)


def describe(call: Call) -> str:
    return (
        f"{call.op} ({call.name}) step={call.step} bytes={call.in_bytes}/{call.out_bytes} "
        f"{call.dtype} group={list(call.group.ranks)} peer={call.peer} async={call.async_op}"
    )


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Where a rank's recording and its truth part: `index` is the call's place among the
    rank's calls, `field` what differs (`missing`: the truth has a call the trace has not;
    `extra`: the other way)."""

    rank: int
    index: int
    field: str
    recorded: str
    truth: str
    truth_call: Truth | None = None
    call: Call | None = None

    def __str__(self) -> str:
        return (
            f"rank {self.rank}, call {self.index}: {self.field} differs\n"
            f"    recorded: {self.recorded}\n    truth:    {self.truth}"
        )


def _fields(call: Call, truth: Truth, world: int) -> list[tuple[str, object, object]]:
    group = tuple(sorted(call.group.ranks)) or tuple(range(world))
    pairs: list[tuple[str, object, object]] = [
        ("op", call.op, truth.op),
        ("bytes", call.in_bytes, truth.in_bytes),
        ("out_bytes", call.out_bytes, truth.out_bytes),
        ("dtype", call.dtype, truth.dtype),
        ("group", group, truth.group),
        ("peer", call.peer, truth.peer),
        ("step", call.step, truth.step),
    ]
    if truth.async_op is not None:
        pairs.append(("async", call.async_op, truth.async_op))
    if truth.in_splits is not None or truth.out_splits is not None:
        pairs.append(("in_splits", splits(call, "in"), truth.in_splits))
        pairs.append(("out_splits", splits(call, "out"), truth.out_splits))
    if truth.batch is not None:
        pairs.append(("batch", getattr(call, "batch", None), truth.batch))
    return pairs


def compare(trace: Trace, truth: dict[int, list[Truth]]) -> list[Mismatch]:
    """Every difference between each rank's recorded calls and its truth, call for call in
    issue order; a rank the trace or the truth lacks is a difference too."""
    out: list[Mismatch] = []
    for rank in sorted(set(trace.calls) | set(truth)):
        calls: Sequence[Call] = trace.calls.get(rank, ())
        said = truth.get(rank, [])
        for i in range(max(len(calls), len(said))):
            if i >= len(calls):
                out.append(Mismatch(rank, i, "missing", "(none)", str(said[i]), said[i]))
                continue
            if i >= len(said):
                out.append(Mismatch(rank, i, "extra", describe(calls[i]), "(none)", None, calls[i]))
                continue
            for name, got, want in _fields(calls[i], said[i], trace.world_size):
                if got != want:
                    out.append(
                        Mismatch(
                            rank, i, name, f"{name}={got}: {describe(calls[i])}",
                            f"{name}={want}: {said[i]}", said[i], calls[i],
                        )
                    )  # fmt: skip
    return out


def torchrun(nproc: int, port: int | None) -> list[str]:
    """torchrun on `nproc` ranks: at the rendezvous port `port`, or standalone (torchrun
    picks a free one)."""
    where = ["--master-port", str(port)] if port is not None else ["--standalone"]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), *where]


@dataclass(slots=True)
class Recorded:
    """A job recorded: its exit, its output, its truth and the seconds it took."""

    spec: JobSpec
    trace_dir: Path
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    truth: dict[int, list[Truth]] = field(default_factory=dict)

    def trace(self) -> Trace:
        return read_trace(self.trace_dir)

    def calls(self) -> int:
        """The calls the truth says the job made, over every rank."""
        return sum(len(t) for t in self.truth.values())


TORCH_EXIT_ABORT = "terminate called without an active exception"
"""What libstdc++ prints when a thread is ended through C++ frames at exit (torch's teardown
abort)."""


def record(
    spec: JobSpec, trace_dir: Path, port: int | None = None, timeout: float = RECORD_TIMEOUT
) -> Recorded:
    """`commbench record -o TRACE_DIR -- torchrun ... JOB` (a job past `timeout` seconds is
    killed, and raises subprocess.TimeoutExpired). Run again, once, only when torch itself
    aborted at exit after every rank's program had run to its end and closed its file (record
    says "failed at exit"), as tests/test_record.run_record does and for the same reason:
    torch's own teardown abort (benchmarks/exit_aborts.py, issue 43), seen in this suite's
    jobs on a loaded machine, is not the recording's."""
    argv = [sys.executable, "-m", "commbench", "record", "-o", str(trace_dir), "--",
            *torchrun(spec.nproc, port), str(spec.path), *spec.args]  # fmt: skip
    for attempt in range(2):
        if attempt:
            shutil.rmtree(trace_dir, ignore_errors=True)
        start = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - start
        torch_aborted = TORCH_EXIT_ABORT in done.stderr and "failed at exit" in done.stderr
        if done.returncode == 0 or not torch_aborted:
            break
        print(f"torch aborted at exit after every rank ended; run again: {done.stderr[-500:]}")
    return Recorded(
        spec=spec,
        trace_dir=trace_dir,
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        seconds=seconds,
        truth=parse_truth(done.stdout),
    )


@dataclass(slots=True)
class Replayed:
    """A replay run: its exit, its output, its run directory and what it measured."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    run_dir: Path | None
    replay: ReplayRecord | None
    status: str | None

    @property
    def refused(self) -> list[str]:
        """The lines of its output that say it refused something or hung."""
        return [
            line
            for line in (self.stdout + self.stderr).splitlines()
            if any(word in line.lower() for word in REFUSALS)
        ]

    @property
    def ratio(self) -> float | None:
        """Replayed / recorded median communication time per step."""
        if self.replay is None:
            return None
        rec, rep = self.replay.recorded_comm_s, self.replay.replayed_comm_s
        return rep / rec if rec and rep is not None else None


def replay(
    trace_dir: Path,
    out: Path,
    *args: str,
    timeout: float = REPLAY_TIMEOUT,
) -> Replayed:
    """`commbench replay TRACE_DIR --pace --device cpu --out OUT ARGS...`, and the run it
    wrote (the one run directory under OUT)."""
    argv = [sys.executable, "-m", "commbench", "replay", str(trace_dir), "--pace",
            "--device", "cpu", "--out", str(out), *args]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.is_dir() else []
    run_dir = runs[0] if len(runs) == 1 else None
    rep, status = None, None
    if run_dir is not None and (run_dir / "run.json").is_file():
        run = load_run(run_dir)
        rep, status = run.record.replay, run.status.value
    return Replayed(done.returncode, done.stdout, done.stderr, seconds, run_dir, rep, status)
