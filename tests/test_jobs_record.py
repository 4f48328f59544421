"""`commbench record` against the truth of real training jobs, and `commbench replay --pace`
of what it recorded (issue 34).

Each job of tests/jobs/ in `job_truth.JOBS` trains for 3 steps with standard PyTorch APIs
(DTensor tensor parallel, subgroups, async and object collectives, functional collectives
eager and compiled, batched p2p and coalesced collectives, FSDP2; pipelining's 1F1B,
Interleaved 1F1B and zero-bubble V schedules, on a dp x pp mesh too; FSDP2 nested, in mixed
precision, accumulating, HSDP, clipping; sequence parallel, loss_parallel, TP with FSDP2 on
a 2-D mesh) and prints the truth of
every collective it makes, computed from its own tensors and torch's documented behaviour
(tests/jobs/truth.py). The recording must match it call for call, per rank, in issue order:
op, bytes in and out, dtype, group, root or peer, step, and async and splits where the job
says them. The paced replay of the recording (with replay's own iteration counts, as a user
runs it) must run to the end, its run directory written. Timings are printed
(`-s`), never asserted: benchmarks/replay_jobs.py measures them.

A mismatch that a known commbench bug explains (being fixed under issue 34) is listed in
KNOWN: the test then fails with KnownMismatch, which its strict xfail expects, so that the
fix turns it into an XPASS that says to remove the entry; any other mismatch fails it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.job_truth import JOBS, JobSpec, Mismatch, Recorded, compare, record, replay

pytestmark = pytest.mark.integration

REPLAY_TIMEOUT = 180.0


class KnownMismatch(Exception):
    """Only mismatches that KNOWN explains: the strict xfail of the test expects this."""


@dataclass(frozen=True)
class Known:
    """Mismatches of a job's recording that a commbench bug explains."""

    reason: str
    matches: Callable[[Mismatch], bool]


KNOWN: dict[str, Known] = {}
REPLAY_FAILS = {}


def _record_cases() -> list[Any]:
    """Each job; one KNOWN explains is expected to fail with KnownMismatch alone."""
    return [
        pytest.param(
            spec,
            id=spec.name,
            marks=[pytest.mark.xfail(strict=True, reason=known.reason, raises=KnownMismatch)]
            if (known := KNOWN.get(spec.name))
            else [],
        )
        for spec in JOBS
    ]


def _replay_cases() -> list[Any]:
    return [
        pytest.param(
            spec,
            id=spec.name,
            marks=[pytest.mark.xfail(strict=True, reason=reason)]
            if (reason := REPLAY_FAILS.get(spec.name))
            else [],
        )
        for spec in JOBS
    ]


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory,
    hold_port: Callable[..., AbstractContextManager[int]],
) -> Callable[[JobSpec], Recorded]:
    """Each job recorded once, for both of its tests."""
    done: dict[str, Recorded] = {}

    def get(spec: JobSpec) -> Recorded:
        if spec.name not in done:
            with hold_port() as port:
                trace = tmp_path_factory.mktemp(spec.name) / "trace"
                done[spec.name] = record(spec, trace, port)
            print(f"\n{spec.name}: recorded in {done[spec.name].seconds:.1f} s")
        return done[spec.name]

    return get


def _listed(mismatches: list[Mismatch], most: int = 12) -> str:
    lines = [str(m) for m in mismatches[:most]]
    if len(mismatches) > most:
        lines.append(f"... and {len(mismatches) - most} more")
    return "\n".join(lines)


@pytest.mark.parametrize("spec", _record_cases())
def test_the_recording_matches_the_jobs_truth(
    spec: JobSpec, recorded: Callable[[JobSpec], Recorded]
) -> None:
    job = recorded(spec)
    assert job.returncode == 0, job.stderr[-4000:]
    assert "(complete)" in job.stderr, job.stderr[-2000:]
    assert sorted(job.truth) == list(range(spec.nproc)), "every rank prints its truth"
    mismatches = compare(job.trace(), job.truth)
    known = KNOWN.get(spec.name)
    unknown = [m for m in mismatches if known is None or not known.matches(m)]
    assert not unknown, f"{spec.name}: the recording is not the truth:\n{_listed(unknown)}"
    if mismatches:
        raise KnownMismatch(f"{spec.name}: {len(mismatches)} known:\n{_listed(mismatches)}")


@pytest.mark.parametrize("spec", _replay_cases())
def test_the_paced_replay_runs_to_the_end(
    spec: JobSpec, recorded: Callable[[JobSpec], Recorded], tmp_path: Path
) -> None:
    job = recorded(spec)
    assert job.returncode == 0, job.stderr[-4000:]
    out = tmp_path / "out"
    # replay's own iteration counts, as a user runs it (fixed counts hide a bug: REPLAY_FAILS)
    run = replay(job.trace_dir, out, "--timeout", "60", timeout=REPLAY_TIMEOUT)
    ratio = "-" if run.ratio is None else f"{run.ratio:.2f}"
    print(f"\n{spec.name}: replayed in {run.seconds:.1f} s, replayed/recorded median {ratio}")
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert not run.refused, run.refused
    assert run.run_dir is not None and run.status == "complete", run.status
    for name in ("run.json", "results.csv", "settings.json"):
        assert (run.run_dir / name).is_file(), name
    assert run.replay is not None
    steps = sorted({t.step for t in job.truth[0] if t.step is not None})
    assert run.replay.step_numbers == steps
    assert all(s is not None and s > 0 for s in run.replay.replayed_comm_s_per_step)
