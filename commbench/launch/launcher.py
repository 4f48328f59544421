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
from typing import Any

from commbench.collectives.settings import MAX_NODES, CollectivesSettings, Point, plan_points
from commbench.context import env_knobs, host_context, topology_snapshot
from commbench.errors import CommbenchError, Interrupted, RunFailed, UserError, quoted
from commbench.fields import Fields
from commbench.health.record import NodeHealth
from commbench.launch import procs
from commbench.launch.control import ControlPlane
from commbench.launch.preflight import check_resources, probe, validate_ranks
from commbench.launch.protocol import (
    LAUNCHER_PID_ENV,
    LOGS_DIR,
)
from commbench.launch.pythonpath import with_package_path
from commbench.launch.rendezvous import host_store_args
from commbench.launch.watchdog import Watch, describe_crash, describe_hang
from commbench.numbers import check_range, is_digits
from commbench.results.lifecycle import INTERRUPTED, now, start_run
from commbench.results.record import RunContext, RunKind, RunRecord, RunStatus
from commbench.results.schema import ResultRow
from commbench.results.verdict import Verdict, judge, wrong_points
from commbench.topology.sysfs import check_sysfs_root
from commbench.torch_version import require_torch

POLL = 0.1
DESCENDANTS_SCAN = 2.0
# Seconds torchrun may take to exit after its workers finished before it is stopped.
AGENT_LINGER = 10.0
# Every process of a run has this in its environment, set to the run directory.
RUN_MARKER = "COMMBENCH_RUN_DIR"


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


def resolve_launch(
    *,
    nnodes: int | None,
    node_rank: int | None,
    rdzv_endpoint: str | None,
    rdzv_id: str | None,
    debug: bool,
    environ: dict[str, str] | None = None,
) -> LaunchOptions:
    """Explicit flags win; inside a SLURM job step the job's nodes make the rendezvous."""
    from commbench.launch.slurm import from_env

    if node_rank is not None and nnodes is None:
        raise UserError("--node-rank needs --nnodes (and --rdzv-endpoint)")
    if nnodes is not None or rdzv_endpoint is not None:
        return LaunchOptions(
            nnodes=1 if nnodes is None else nnodes,  # `--nnodes 0` is refused, not taken as 1
            node_rank=node_rank or 0,
            rdzv_endpoint=rdzv_endpoint,
            rdzv_id=rdzv_id or "commbench",
            debug=debug,
        )
    job = from_env(dict(os.environ) if environ is None else environ)
    if job is None or (job.nnodes == 1 and job.tasks_per_node == 1):
        return LaunchOptions(debug=debug, source="single")
    if job.tasks_per_node != 1:
        raise UserError(
            f"SLURM started {job.tasks_per_node} commbench tasks per node: use srun --ntasks-per-node=1 "
            "(commbench starts one worker per GPU itself)"
        )
    return LaunchOptions(
        nnodes=job.nnodes,
        node_rank=job.node_rank,
        rdzv_endpoint=job.rdzv_endpoint,
        rdzv_id=rdzv_id or f"slurm-{job.job_id}",
        debug=debug,
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
        str(settings.nproc),
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
    validate_ranks(settings, settings.nproc * launch.nnodes)
    probe_info = probe(settings)
    check_resources(settings, probe_info)
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
) -> Outcome:
    """Validate, launch torchrun, watch it, and return what was measured.

    `name` names the run directory (`<timestamp>-<name>`) instead of the kind: a suite's
    entry (`strategies-float32`), so that nobody has to open run.json to tell them apart.

    Another run kind that times collectives over the same launch (`diagnose`) passes its
    `kind`, its `worker` module, its own settings (written beside these in settings.json;
    the collectives settings read past them), its `points` (what the watchdog names a hang
    by) and `on_event` for the journal events of its own types."""
    launch = launch or LaunchOptions()
    probe_info = preflight(settings, launch)
    if points is None:
        points = plan_points(
            settings, len(settings.ranks) if settings.ranks else settings.nproc * launch.nnodes
        )
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
        launch={
            "nnodes": launch.nnodes,
            "node_rank": launch.node_rank,
            "rdzv_endpoint": launch.rdzv_endpoint,
            "rdzv_id": launch.rdzv_id,
            "source": launch.source,
            "debug": launch.debug,
        },
        points_total=len(points),
        points_done=0,
    )
    record, run_dir = life.record, life.path
    life.dir.write_settings(all_settings)
    life.dir.write_rows([])
    worker_env = _worker_env(run_dir, launch)
    # the knobs the workers ran with (--debug's included), not only the launcher's own
    context.env = env_knobs(worker_env)

    watch = Watch(run_dir, points, on_event=on_event)
    progress = on_progress or (lambda done, total, row: None)
    progress(0, len(points), None)

    def on_row(row: ResultRow) -> None:
        progress(len(watch.rows), len(points), row)

    started = time.monotonic()
    status, failure = RunStatus.COMPLETE, None
    launcher_failed = False  # the launcher stopped the run itself (it could not write)
    culprits: list[int] = []
    signals = procs.StopSignals()
    with open(run_dir / "launcher.log", "wb") as log, signals.installed():
        proc = subprocess.Popen(
            torchrun_command(run_dir, settings, launch, worker),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=worker_env,
            start_new_session=True,  # our Ctrl-C is ours to handle: stop everything, keep data
        )
        watch.pids.add(proc.pid)
        watch.agent_pid = proc.pid
        if launch.nnodes > 1:  # the cross-node watch, on its own thread
            watch.control = ControlPlane(run_dir)
            watch.control.start()

        def stop_run(grace: float) -> None:
            """torchrun and every process it was seen to start (scanned once more now)."""
            watch.pids |= procs.descendants(proc.pid)
            procs.stop_all(watch.pids, grace=grace)
            procs.wait_or_kill(proc, 30)

        next_scan = 0.0
        finished = 0.0
        agent_stuck = False
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
                if watch.done and not watch.local_workers_alive():
                    # every row is in and the workers have exited, but torchrun lingers
                    # (stopped, wedged): the measurement is whole, only the agent is stuck
                    finished = finished or time.monotonic()
                    if time.monotonic() - finished > AGENT_LINGER:
                        agent_stuck = True
                        procs.stop_all({proc.pid} | procs.descendants(proc.pid), grace=2.0)
                        procs.wait_or_kill(proc, 10)
                        break
                    time.sleep(POLL)
                    continue
                allowance = watch.allowance(settings.timeout)
                stalled = time.monotonic() - watch.last_progress > allowance
                # a worker stopped for --timeout is no slow start-up, whatever the allowance
                if stalled or watch.stopped_ranks(longer_than=settings.timeout):
                    failure, culprits = describe_hang(
                        watch, allowance if stalled else settings.timeout
                    )
                    status = RunStatus.FAILED
                    stop_run(grace=2.0)
                    break
                time.sleep(POLL)
        except KeyboardInterrupt:  # the signal handler now holds any further ones
            stop_run(grace=5.0)
            status, failure = RunStatus.INTERRUPTED, INTERRUPTED
        except CommbenchError as exc:  # the launcher itself cannot go on (results unwritable)
            signals.hold()
            stop_run(grace=2.0)
            # a write that failed because the directory went is said as such, like a deletion
            # the poll saw first: one cause, one wording
            status, failure = RunStatus.FAILED, f"stopped the run: {watch.run_dir_problem() or exc}"
            launcher_failed = True
        # from here to the return, a Ctrl-C or SIGTERM would leave run.json saying "running":
        # it is held, and reported as `stop_requested`
        signals.hold()
        with contextlib.suppress(CommbenchError):  # RunDirGone included
            watch.poll(on_row)  # rows journalled just before the end
        leftover = {p for p in watch.pids if procs.alive(p)}
        leftover |= procs.marked(RUN_MARKER, worker_env[RUN_MARKER])  # run_dir may be gone
        procs.stop_all(leftover, grace=1.0)
        writer = bool(watch.worker_context)  # this node runs global rank 0, which journals the rows
        if agent_stuck:
            record.note = (
                f"torchrun (pid {proc.pid}) did not exit {AGENT_LINGER:.0f} s after its workers "
                "finished and was stopped; every point was measured"
            )
        elif status == RunStatus.COMPLETE and (proc.returncode != 0 or (writer and not watch.done)):
            status = RunStatus.FAILED
            if watch.control is not None:  # what the other nodes saw of the crash
                watch.refresh_remote(wait=3 * watch.control.interval + 1)
            failure, culprits = describe_crash(watch, proc.returncode, settings.timeout)
        if watch.control is not None:
            watch.control.stop()
            _add_watch(record, watch.control)
        record.holds_results = writer
        if not writer and launch.nnodes > 1:
            record.note = "this node did not run global rank 0: the results are in the run directory on rank 0's node"
        _add_workers(context, watch.worker_context)
        _add_node_health(context, watch.node_health)
        context.probe = probe_info
        record.failed_ranks = culprits
        record.points_done = len(watch.rows)
        record.duration_s = round(time.monotonic() - started, 3)
        record.finished_at = now()
        gone = watch.run_dir_problem()
        unwritable = None
        if gone is None:  # never write into a directory that replaced ours
            try:
                life.finish(status, failure)
                life.dir.write_rows(watch.rows)
            except UserError as exc:  # not bad input: the run's own directory failed under it
                unwritable = str(exc)
    # out of `installed()`: a stop signal from here on is the command's (KeyboardInterrupt),
    # and one that came while the record was written is in `held`, read after the last one
    # could land there
    stop_requested = bool(signals.held)
    if gone is not None:  # nothing was written: say why once
        if launcher_failed:  # a write that failed while the directory was being deleted
            why = f"stopped the run: {gone}"
        else:
            why = "; ".join(x for x in (failure, gone) if x)
        if status == RunStatus.INTERRUPTED:
            raise Interrupted(why)
        raise RunFailed(why, stop_requested=stop_requested)
    if unwritable is not None:
        raise RunFailed(f"{failure or status}; and {unwritable}", stop_requested=stop_requested)
    return Outcome(
        run_dir=run_dir,
        status=status,
        rows=watch.rows,
        points_total=len(points),
        failure=failure,
        failed_ranks=culprits,
        record=record,
        stop_requested=stop_requested,
    )


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
    record.warnings.extend(watch["skipped"])


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
