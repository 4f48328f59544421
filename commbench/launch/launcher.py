"""Launch a sweep through torchrun, watch it, and keep what it measured.

The launcher is the only writer of the result files: it tails rank 0's journal and rewrites
`results.csv` / `results.json` atomically after every point, so whatever happens to the
workers, every point measured so far is on disk. It never waits on a worker blindly: if no
rank makes progress for `timeout` seconds, it names the rank(s) that stopped, stops them all
and returns. What is refused before a launch lives in `preflight`, the diagnosis of a hang or
a crash in `watchdog`.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from commbench.collectives.settings import MAX_NODES, CollectivesSettings, Point, plan_points
from commbench.context import env_knobs, host_context, topology_snapshot
from commbench.errors import CommbenchError, Interrupted, RunFailed, UserError, quoted
from commbench.fields import Fields
from commbench.health.record import NodeHealth
from commbench.launch import procs
from commbench.launch.limits import store_limits
from commbench.launch.plane import ControlPlane
from commbench.launch.preflight import check_resources, probe, validate_ranks
from commbench.launch.protocol import (
    LAUNCHER_PID_ENV,
    LOGS_DIR,
    RESULTS_AT_FILE,
    RUN_MARKER,
    ProtocolError,
    ResultsAt,
)
from commbench.launch.pythonpath import with_package_path
from commbench.launch.rendezvous import host_store_args
from commbench.launch.watchdog import Watch, describe_crash, describe_hang
from commbench.numbers import check_range, is_digits
from commbench.results.lifecycle import INTERRUPTED, Life, now, start_run
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus
from commbench.results.schema import ResultRow
from commbench.results.store import RunDir
from commbench.results.verdict import Verdict, judge, wrong_points
from commbench.topology.sysfs import check_sysfs_root
from commbench.torch_version import require_torch

if TYPE_CHECKING:
    from commbench.launch.job import MultiNodeJob
    from commbench.launch.request import CollectivesRun, LaunchRequest
    from commbench.results.runs import Run

POLL = 0.1
DESCENDANTS_SCAN = 2.0
# Seconds torchrun may take to exit after its workers finished before it is stopped.
AGENT_LINGER = 10.0


_RECORDED = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "source", "debug")
"""The options run.json's `launch` keeps, in its order."""


@dataclass(kw_only=True, slots=True)
class LaunchOptions:
    """How workers are started: one node by default, or a torchrun rendezvous across nodes."""

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    """HOST:PORT of the c10d rendezvous; None = a standalone one on a free local port."""
    rdzv_id: str = "commbench"
    debug: bool = False
    """TORCH_DISTRIBUTED_DEBUG=DETAIL and NCCL INFO logging into the run directory."""
    source: str = "flags"
    """Where the multi-node settings came from: 'flags', 'slurm' or 'single' (for run.json)."""

    def __post_init__(self) -> None:
        check_range(self.nnodes, "--nnodes", 1, MAX_NODES)
        if not 0 <= self.node_rank < self.nnodes:
            raise UserError(f"--node-rank {self.node_rank} is outside 0..{self.nnodes - 1}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise UserError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
        if self.rdzv_endpoint is not None:
            host, sep, port = self.rdzv_endpoint.rpartition(":")
            # ASCII only: isdigit() takes '²' (which int() refuses), torchrun a host name
            # with spaces or a fullwidth digit (and fails once the run has started)
            good_host = re.fullmatch(r"[A-Za-z0-9._:\[\]-]+", host) is not None
            good_port = is_digits(port) and len(port) <= 5 and 0 < int(port) < 65536
            if not (sep and good_host and good_port):
                raise UserError(
                    f"--rdzv-endpoint must be HOST:PORT (port 1-65535), got {quoted(self.rdzv_endpoint)}"
                )

    def to_dict(self) -> dict[str, Any]:
        """run.json's `launch`, in its key order (every run kind that launches writes this)."""
        return {key: getattr(self, key) for key in _RECORDED}


def resolve_launch(request: LaunchRequest, environ: dict[str, str] | None = None) -> LaunchOptions:
    """The launch `request` makes here: explicit flags win; inside a SLURM job step the job's
    nodes make the rendezvous; else one node. The request holds the flags as parsed; this is
    where they meet the machine (`environ`), so the record never calls back in here."""
    from commbench.launch.slurm import from_env

    if request.node_rank is not None and request.nnodes is None:
        raise UserError("--node-rank needs --nnodes (and --rdzv-endpoint)")
    if request.nnodes is not None or request.rdzv_endpoint is not None:
        return LaunchOptions(
            # `--nnodes 0` is refused, not taken as 1
            nnodes=1 if request.nnodes is None else request.nnodes,
            node_rank=request.node_rank or 0,
            rdzv_endpoint=request.rdzv_endpoint,
            rdzv_id=request.rdzv_id or "commbench",
            debug=request.debug,
        )
    job = from_env(dict(os.environ) if environ is None else environ)
    if job is None or (job.nnodes == 1 and job.tasks_per_node == 1):
        return LaunchOptions(debug=request.debug, source="single")
    if job.tasks_per_node != 1:
        raise UserError(
            f"SLURM started {job.tasks_per_node} commbench tasks per node: use srun --ntasks-per-node=1 "
            "(commbench starts one worker per GPU itself)"
        )
    return LaunchOptions(
        nnodes=job.nnodes,
        node_rank=job.node_rank,
        rdzv_endpoint=job.rdzv_endpoint,
        rdzv_id=request.rdzv_id or f"slurm-{job.job_id}",
        debug=request.debug,
        source="slurm",
    )


@dataclass(kw_only=True, slots=True)
class Outcome:
    """What a launched run produced. The CLI renders it; nothing here prints."""

    run_dir: Path
    status: RunStatus
    rows: list[ResultRow]
    points_total: int
    record: RunRecord
    """What run.json says."""
    failure: str | None = None
    failed_ranks: list[int] = field(default_factory=list)
    stop_requested: bool = False
    """Ctrl-C or SIGTERM arrived while the run was being wound up: its record is whole, but
    whoever runs more after it (a suite) should stop."""

    @property
    def checks_failed(self) -> list[ResultRow]:
        return wrong_points(self.rows)

    @property
    def verdict(self) -> Verdict:
        """What the run means to whoever ran it (`results.verdict.judge`)."""
        return judge(
            self.status,
            self.rows,
            self.run_dir,
            failure=self.failure,
            stop_requested=self.stop_requested,
        )


ProgressFn = Callable[[int, int, ResultRow | None], None]


WORKER = "commbench.launch.worker"
"""The module torchrun runs on every rank (another run kind brings its own: `diagnose`)."""


def torchrun_command(
    run_dir: Path, settings: CollectivesSettings, launch: LaunchOptions, worker: str = WORKER
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(launch.nnodes),
        "--nproc-per-node",
        str(settings.placement.nproc),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.2",
        "--log-dir",
        str(run_dir / LOGS_DIR),
        "--redirects",
        "3",
    ]
    if launch.rdzv_endpoint is None:
        cmd.append("--standalone")  # c10d store on a free port: concurrent runs never collide
    else:
        cmd += [
            "--node-rank",
            str(launch.node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            launch.rdzv_endpoint,
            "--rdzv-id",
            launch.rdzv_id,
            *host_store_args(launch.rdzv_endpoint, launch.node_rank),
        ]
    cmd += ["-m", worker, str(run_dir)]
    return cmd


def _worker_env(run_dir: Path, launch: LaunchOptions) -> dict[str, str]:
    env = with_package_path(os.environ)
    if launch.debug:
        env.update(
            TORCH_DISTRIBUTED_DEBUG="DETAIL",
            TORCH_CPP_LOG_LEVEL="INFO",
            NCCL_DEBUG="INFO",
            NCCL_DEBUG_FILE=str(run_dir / LOGS_DIR / "nccl.%h.%p.log"),
        )
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, set here to skip its warning
    env["PYTHONUNBUFFERED"] = "1"
    env[RUN_MARKER] = str(run_dir.resolve())
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    env["PYTHONWARNINGS"] = env.get("PYTHONWARNINGS", "ignore::FutureWarning")
    return env


def preflight(settings: CollectivesSettings, launch: LaunchOptions | None = None) -> dict[str, Any]:
    """Everything refused before a launch (ranks outside the world, what the installed torch
    cannot run, more than the node holds); the probe's answer. Creates nothing, so a suite
    checks every run with it before it makes its directory."""
    launch = launch or LaunchOptions()
    require_torch()
    check_sysfs_root()
    validate_ranks(settings, settings.placement.nproc * launch.nnodes)
    probe_info = probe(settings)
    check_resources(settings, probe_info, settings.placement.nproc * launch.nnodes)
    return probe_info


def _add_node_health(context: RunContext, journaled: dict[str, Any]) -> None:
    """The other nodes' link health (multi-node runs) into `context.health`; an entry that
    does not validate is left out, never a reason to lose the run."""
    if context.health is None or not journaled["nodes"]:
        return
    node = journaled["node"]
    context.health.node = node if isinstance(node, int) and node >= 0 else None
    for entry in sorted(journaled["nodes"].values(), key=lambda e: e["node"]):
        try:
            context.health.nodes.append(
                NodeHealth.from_fields(Fields(entry, f"health of node {entry['node']}"))
            )
        except UserError:
            continue


@dataclass(kw_only=True, slots=True)
class _Opened:
    """A run whose directory and record exist and whose workers have not started yet."""

    life: Life[RunDir, RunRecord]
    context: RunContext
    """The record's context, filled in as the run reveals it (the workers', the health)."""
    worker_env: dict[str, str]

    @property
    def run_dir(self) -> Path:
        return self.life.path

    @property
    def record(self) -> RunRecord:
        return self.life.record


@dataclass(kw_only=True, slots=True)
class _Ending:
    """How the watch ended: what run.json will say, and whom it names."""

    status: RunStatus = RunStatus.COMPLETE
    failure: str | None = None
    culprits: list[int] = field(default_factory=list)
    """The ranks named for a hang or a crash."""
    launcher_failed: bool = False
    """The launcher stopped the run itself (it could not write)."""
    agent_stuck: bool = False
    """Every row was in and the workers gone, but torchrun did not exit and was stopped."""


def run_collectives(
    settings: CollectivesSettings,
    out_parent: Path,
    launch: LaunchOptions | None = None,
    on_progress: ProgressFn | None = None,
    *,
    kind: RunKind = RunKind.COLLECTIVES,
    worker: str = WORKER,
    extra_settings: dict[str, Any] | None = None,
    points: list[Point] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    name: str | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Outcome:
    """Validate, launch torchrun, watch it, and return what was measured.

    `name` names the run directory (`<timestamp>-<name>`) instead of the kind: a suite's
    entry (`strategies-float32`), so that nobody has to open run.json to tell them apart.

    Another run kind that times collectives over the same launch (`diagnose`) passes its
    `kind`, its `worker` module, its own settings (written beside these in settings.json;
    the collectives settings read past them), its `points` (what the watchdog names a hang
    by) and `on_event` for the journal events of its own types. `on_warning` gets each line
    run.json's warnings take before any worker starts (the limits this node would hold the
    job's store under), when it is taken: a run of hours must not say it only at its end."""
    launch = launch or LaunchOptions()
    probe_info = preflight(settings, launch)
    if points is None:
        points = plan_points(
            settings,
            len(settings.ranks) if settings.ranks else settings.placement.nproc * launch.nnodes,
        )
    opened = _open_run(settings, out_parent, launch, kind, name, extra_settings, len(points))
    # limits this node holds the job's store under, should the rendezvous make it its host:
    # a warning, not a refusal, since another node may come to host it
    said = store_limits(launch.nnodes, settings.placement.nproc * launch.nnodes)
    if said:
        opened.record.warnings += said
        opened.life.save()  # in run.json from the start: a run that dies keeps them too
        if on_warning is not None:
            for line in said:
                on_warning(line)
    watch = Watch(opened.run_dir, points, on_event=on_event)
    on_row = _reporter(watch, len(points), on_progress)
    started = time.monotonic()
    signals = procs.StopSignals()
    with open(opened.run_dir / "launcher.log", "wb") as log, signals.installed():
        proc = _start_workers(opened, settings, launch, worker, log, watch)
        ending = _watch_until_done(proc, watch, settings, signals, on_row)
        # from here to the return, a Ctrl-C or SIGTERM would leave run.json saying "running":
        # it is held, and reported as `stop_requested`
        signals.hold()
        _collect(proc, watch, opened, on_row)
        _judge_exit(proc, watch, opened.record, settings, ending)
        _complete_record(opened, watch, launch, probe_info, ending, started)
        gone = watch.run_dir_problem()
        # never write into a directory that replaced ours
        unwritable = _write_results(opened, watch, ending) if gone is None else None
    # out of `installed()`: a stop signal from here on is the command's (KeyboardInterrupt),
    # and one that came while the record was written is in `held`, read after the last one
    # could land there
    stop_requested = bool(signals.held)
    return _outcome(opened, watch, ending, gone, unwritable, stop_requested)


def _reporter(
    watch: Watch, points_total: int, on_progress: ProgressFn | None
) -> Callable[[ResultRow], None]:
    """What the watch calls with each new row: the caller's progress, said once at 0 now, so
    that a caller shows the sweep before its first point lands."""
    progress = on_progress or (lambda done, total, row: None)
    progress(0, points_total, None)

    def on_row(row: ResultRow) -> None:
        progress(len(watch.rows), points_total, row)

    return on_row


def _open_run(
    settings: CollectivesSettings,
    out_parent: Path,
    launch: LaunchOptions,
    kind: RunKind,
    name: str | None,
    extra_settings: dict[str, Any] | None,
    points_total: int,
) -> _Opened:
    """The run directory, run.json (running) and settings.json, before any worker starts: a
    run that dies at any later moment is on disk, and says what it was asked to do."""
    context = RunContext.from_dict(host_context(), "context")
    context.topology, context.topology_error = topology_snapshot()
    all_settings = {**settings.to_dict(), **(extra_settings or {})}
    life = start_run(
        out_parent,
        kind,
        name=name,
        settings=all_settings,
        context=context,
        health=True,
        launch=launch.to_dict(),
        points_total=points_total,
        points_done=0,
    )
    life.dir.write_settings(all_settings)
    if launch.nnodes == 1:  # the one node writes the rows; across nodes, only rank 0's
        life.dir.write_rows([])
    worker_env = _worker_env(life.path, launch)
    # the knobs the workers ran with (--debug's included), not only the launcher's own
    context.env = env_knobs(worker_env)
    return _Opened(life=life, context=context, worker_env=worker_env)


def _start_workers(
    opened: _Opened,
    settings: CollectivesSettings,
    launch: LaunchOptions,
    worker: str,
    log: IO[bytes],
    watch: Watch,
) -> subprocess.Popen[bytes]:
    """torchrun, in a session of its own, and (across nodes) the cross-node watch: from here
    on every process is one the watch knows and can stop."""
    proc = subprocess.Popen(
        torchrun_command(opened.run_dir, settings, launch, worker),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=opened.worker_env,
        start_new_session=True,  # our Ctrl-C is ours to handle: stop everything, keep data
    )
    watch.pids.add(proc.pid)
    watch.agent_pid = proc.pid
    if launch.nnodes > 1:  # the cross-node watch, on its own thread
        watch.control = ControlPlane(opened.run_dir, skips=watch.skips)
        watch.control.start()
    return proc


def _stop_run(proc: subprocess.Popen[bytes], watch: Watch, grace: float) -> None:
    """torchrun and every process it was seen to start (scanned once more now)."""
    watch.pids |= procs.descendants(proc.pid)
    procs.stop_all(watch.pids, grace=grace)
    procs.wait_or_kill(proc, 30)


def _watch_until_done(
    proc: subprocess.Popen[bytes],
    watch: Watch,
    settings: CollectivesSettings,
    signals: procs.StopSignals,
    on_row: Callable[[ResultRow], None],
) -> _Ending:
    """Poll until torchrun exits, the run hangs, the user stops it or the launcher cannot go
    on: the one loop that must never block, so each way out is decided here and nowhere else."""
    ending = _Ending()
    next_scan = 0.0
    finished = 0.0
    try:
        while True:
            returncode = proc.poll()
            with signals.deferred():
                watch.poll(on_row)
            if time.monotonic() >= next_scan:
                # a /proc scan costs ~2 ms of a core the workers are measuring on: not
                # every poll; the stop paths below scan again before they signal
                watch.pids |= procs.descendants(proc.pid)
                next_scan = time.monotonic() + DESCENDANTS_SCAN
            if returncode is not None:
                break
            # this node's part is over: on the writer, every row is in; on another node,
            # every local rank said it finished (its rows are the writer's)
            finished_here = watch.done if watch.worker_context else watch.local_ranks_done()
            if finished_here and not watch.local_workers_alive():
                # the workers have exited, but torchrun lingers (stopped, wedged, or waiting
                # in its exit barrier on a store that hangs): the measurement is whole, only
                # the agent is stuck
                finished = finished or time.monotonic()
                if time.monotonic() - finished > AGENT_LINGER:
                    ending.agent_stuck = True
                    procs.stop_all({proc.pid} | procs.descendants(proc.pid), grace=2.0)
                    procs.wait_or_kill(proc, 10)
                    break
                time.sleep(POLL)
                continue
            allowance = watch.allowance(settings.timing.timeout)
            stalled = time.monotonic() - watch.last_progress > allowance
            # a worker stopped for --timeout is no slow start-up, whatever the allowance
            if stalled or watch.stopped_ranks(longer_than=settings.timing.timeout):
                ending.failure, ending.culprits = describe_hang(
                    watch, allowance if stalled else settings.timing.timeout
                )
                ending.status = RunStatus.FAILED
                _stop_run(proc, watch, grace=2.0)
                break
            time.sleep(POLL)
    except KeyboardInterrupt:  # the signal handler now holds any further ones
        _stop_run(proc, watch, grace=5.0)
        ending.status, ending.failure = RunStatus.INTERRUPTED, INTERRUPTED
    except CommbenchError as exc:  # the launcher itself cannot go on (results unwritable)
        signals.hold()
        _stop_run(proc, watch, grace=2.0)
        # a write that failed because the directory went is said as such, like a deletion
        # the poll saw first: one cause, one wording
        ending.status = RunStatus.FAILED
        ending.failure = f"stopped the run: {watch.run_dir_problem() or exc}"
        ending.launcher_failed = True
    return ending


def _collect(
    proc: subprocess.Popen[bytes],
    watch: Watch,
    opened: _Opened,
    on_row: Callable[[ResultRow], None],
) -> None:
    """Stop whatever could still journal, then read the journal for the last time.

    Every process that could still journal is stopped, and gone, before the journal is read
    for the last time: workers outlive a killed torchrun agent, and a row rank 0 journals
    after that read (it was between two points when the agent died) would be in events.jsonl
    and in no result file."""
    leftover = {p for p in watch.pids if procs.alive(p)}
    leftover |= procs.marked(RUN_MARKER, opened.worker_env[RUN_MARKER])  # run_dir may be gone
    procs.stop_all(leftover, grace=1.0)
    with contextlib.suppress(CommbenchError):  # RunDirGone included
        watch.read_journal(on_row, final=True)  # rows journalled up to the end


def _judge_exit(
    proc: subprocess.Popen[bytes],
    watch: Watch,
    record: RunRecord,
    settings: CollectivesSettings,
    ending: _Ending,
) -> None:
    """What torchrun's exit means once every row is in: a stuck agent is a note on a whole
    run; a bad exit, or a journal without its end, a crash with its culprits (as the other
    nodes saw it too)."""
    writer = bool(watch.worker_context)  # this node runs global rank 0, which journals the rows
    if ending.agent_stuck:
        record.note = (
            f"torchrun (pid {proc.pid}) did not exit {AGENT_LINGER:.0f} s after its workers "
            "finished and was stopped; every point was measured"
        )
    elif (
        ending.status == RunStatus.COMPLETE
        and proc.returncode != 0
        and watch.local_ranks_done()
        and (watch.done or not writer)
    ):
        # the agent failed after its workers: in a multi-node job, torchrun's exit barrier
        # needs the job's store, which goes with its host's agent when that one ends first
        # (or is stopped and then ended by its own launcher)
        record.note = (
            f"torchrun (pid {proc.pid}) exited {proc.returncode} after every rank of this "
            "node had finished (its agent lost the job's store); every point was measured"
        )
    elif ending.status == RunStatus.COMPLETE and (
        proc.returncode != 0 or (writer and not watch.done)
    ):
        ending.status = RunStatus.FAILED
        if watch.control is not None:  # what the other nodes saw of the crash
            watch.refresh_remote(wait=3 * watch.control.interval + 1)
        ending.failure, ending.culprits = describe_crash(
            watch, proc.returncode, settings.timing.timeout
        )


def _complete_record(
    opened: _Opened,
    watch: Watch,
    launch: LaunchOptions,
    probe_info: dict[str, Any],
    ending: _Ending,
    started: float,
) -> None:
    """Everything run.json learns at the end (the workers' context, the other nodes' health,
    the watch's cost, where the rows are), gathered in one place before anything is written."""
    record, context = opened.record, opened.context
    writer = bool(watch.worker_context)
    if watch.control is not None:
        watch.control.stop()
        _add_watch(record, watch.control)
    record.holds_results = writer or launch.nnodes == 1
    if not record.holds_results:
        _say_where_results_are(record, opened.run_dir)
    _add_workers(context, watch.worker_context)
    _add_node_health(context, watch.node_health)
    context.probe = probe_info
    record.failed_ranks = ending.culprits
    record.points_done = len(watch.rows)
    record.duration_s = round(time.monotonic() - started, 3)
    record.finished_at = now()
    if watch.reader.torn:
        record.warnings.append(
            f"{watch.reader.torn} line(s) of the journal (events.jsonl) were cut short, "
            "by a writer killed while writing them, and skipped"
        )
    # the values refused on read, the watch's and the cross-node watch's: each kind once
    record.warnings.extend(watch.skips.warnings)


def _write_results(opened: _Opened, watch: Watch, ending: _Ending) -> str | None:
    """The rows, then run.json; what could not be written, or None.

    The rows first: a run.json that says the run ended vouches for them, and one that could
    not have them written says so."""
    unwritable = None
    try:
        if opened.record.holds_results:
            opened.life.dir.write_rows(watch.rows)
        else:  # no file without rows that could pass for a result
            opened.life.dir.remove_rows()
    except UserError as exc:  # not bad input: the run's own directory failed under it
        unwritable = str(exc)
        if ending.status == RunStatus.COMPLETE:
            ending.status, ending.failure = RunStatus.FAILED, unwritable
    try:
        opened.life.finish(ending.status, ending.failure)
    except UserError as exc:
        unwritable = unwritable or str(exc)
    return unwritable


def _outcome(
    opened: _Opened,
    watch: Watch,
    ending: _Ending,
    gone: str | None,
    unwritable: str | None,
    stop_requested: bool,
) -> Outcome:
    """What the caller gets: the Outcome, or, for a run whose record could not be written
    (its directory went, or a write failed), an error said once instead of an Outcome that
    nothing on disk vouches for."""
    if gone is not None:  # nothing was written: say why once
        if ending.launcher_failed:  # a write that failed while the directory was being deleted
            why = f"stopped the run: {gone}"
        else:
            why = "; ".join(x for x in (ending.failure, gone) if x)
        if ending.status == RunStatus.INTERRUPTED:
            raise Interrupted(why)
        raise RunFailed(why, stop_requested=stop_requested)
    failure = ending.failure
    if unwritable is not None:
        why = (
            unwritable if failure == unwritable else f"{failure or ending.status}; and {unwritable}"
        )
        raise RunFailed(why, stop_requested=stop_requested)
    return Outcome(
        run_dir=opened.run_dir,
        status=ending.status,
        rows=watch.rows,
        points_total=len(watch.points),
        failure=failure,
        failed_ranks=ending.culprits,
        record=opened.record,
        stop_requested=stop_requested,
    )


def _say_where_results_are(record: RunRecord, run_dir: Path) -> None:
    """On a node that did not run global rank 0: name, in run.json, the host and directory
    that hold the rows, as this node's workers learnt them (`ResultsAt`), in `launch` and in
    the note."""
    at = None
    with contextlib.suppress(OSError, ProtocolError):
        at = ResultsAt.from_json(
            (run_dir / RESULTS_AT_FILE).read_bytes()[: ResultsAt.MAX_BYTES + 1]
        )
    where = "the run directory on global rank 0's node"
    if at is not None:
        where = f"{at.run_dir} on host {at.host} (node {at.node})"
        if record.launch is not None:
            record.launch["results_at"] = {"node": at.node, "host": at.host, "run_dir": at.run_dir}
    notes = [f"this node did not run global rank 0: the rows are in {where}", record.note]
    record.note = "; ".join(n for n in notes if n)


def _add_watch(record: RunRecord, control: ControlPlane) -> None:
    """What the cross-node watch cost and whether it was degraded, into run.json."""
    watch = control.record()
    if watch is None:
        return
    if record.launch is not None:
        record.launch["watch"] = watch
    for episode in watch["degraded"]:
        until = f" until {_clock(episode['until'])}" if episode["until"] else ""
        record.warnings.append(
            f"the cross-node watch was degraded from {_clock(episode['since'])}{until}: "
            f"{episode['reason']} (the run went on; this node's own watchdog kept working)"
        )


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _add_workers(context: RunContext, reported: dict[str, Any]) -> None:
    """What rank 0 reported of the workers (versions, world, every rank) into the context."""
    workers = RunContext.from_dict(reported, "the workers' context")
    for name in ("torch", "cuda", "nccl", "backend", "device", "world_size", "group_size"):
        setattr(context, name, getattr(workers, name))
    context.nnodes = workers.nnodes
    context.ranks = workers.ranks
    context.hosts = (
        sorted({str(r["host"]) for r in workers.ranks})
        if workers.ranks
        else ([context.host] if context.host else [])
    )
    context.device_names = sorted({str(r["device_name"]) for r in workers.ranks})
    context.driver = context.topology.host.driver_version if context.topology else None


def run_request(request: CollectivesRun, plot: Callable[[Path], str]) -> Run:
    """`run_collectives`' work: launch, then the `Run` whatever happened to it, with its plots
    (`plot(run_dir)`: report's, above this package) when it measured what it should."""
    from commbench.results.runs import Run
    from commbench.results.store import check_parent

    out = Path(request.out)
    check_parent(out)
    launch = resolve_launch(request)
    settings = request.settings(request.placement())
    on_progress, on_warning = request.on_progress, request.on_warning
    no_plot = request.no_plot
    outcome = run_collectives(
        settings, out, launch=launch, on_progress=on_progress, on_warning=on_warning
    )
    run = Run(
        path=outcome.run_dir,
        record=outcome.record,
        rows=outcome.rows,
        stopped=outcome.stop_requested,
    )
    verdict = outcome.verdict
    # A run that measured what it should is plotted; a stop request leaves that to `plot`.
    if not no_plot and outcome.rows and not verdict.stopped and verdict.message is None:
        try:
            run.plots = plot(outcome.run_dir)
        except KeyboardInterrupt:  # the record is whole: say so, not just "interrupted"
            raise Interrupted(
                f"interrupted while plotting; every point was measured and is in {outcome.run_dir}"
            ) from None
    return run


def check_wrapped(request: CollectivesRun, job: MultiNodeJob) -> None:
    """What `slurm-script` and `k8s-manifest` check of the `collectives` they wrap: the
    settings every node will build, placed on the job's nodes, and the ranks they name."""
    settings = request.settings(job.place(request.device, request.nproc, request.backend))
    job.check_gpus(settings.placement.device, settings.placement.nproc)
    validate_ranks(settings, job.nodes * settings.placement.nproc)
