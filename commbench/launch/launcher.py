"""Launch a sweep through torchrun, watch it, and keep what it measured.

The launcher is the only writer of the result files: it tails rank 0's journal and rewrites
`results.csv` / `results.json` atomically after every point, so whatever happens to the
workers, every point measured so far is on disk. It never waits on a worker blindly: if no
rank makes progress for `timeout` seconds, it names the rank(s) that stopped, stops them all
and returns.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.collectives.settings import CollectivesSettings, Point, plan_points
from commbench.context import env_knobs, host_context, topology_snapshot
from commbench.errors import CommbenchError, RunFailed, UserError
from commbench.launch import procs
from commbench.launch.protocol import (
    EVENTS_FILE,
    HEARTBEAT_INTERVAL,
    LAUNCHER_PID_ENV,
    LOGS_DIR,
    SETTINGS_FILE,
    STARTUP_TIMEOUT,
    JournalReader,
    read_heartbeats,
)
from commbench.results.schema import CHECK_FAILED, ResultRow
from commbench.results.store import atomic_write, new_run_dir, write_results, write_run_meta
from commbench.sizes import format_amount, format_size

# A heartbeat older than this means the process is not running (stopped or gone); the
# heartbeat thread writes every HEARTBEAT_INTERVAL, so this leaves room for a loaded machine.
STALE_AFTER = max(5.0, 10 * HEARTBEAT_INTERVAL)
POLL = 0.1
DESCENDANTS_SCAN = 2.0
# Seconds torchrun may take to exit after its workers finished before it is stopped.
AGENT_LINGER = 10.0
PROBE_TIMEOUT = 120.0
# Every process of a run has this in its environment, set to the run directory.
RUN_MARKER = "COMMBENCH_RUN_DIR"

STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"


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
        if self.nnodes < 1:
            raise UserError("--nnodes must be at least 1")
        if not 0 <= self.node_rank < self.nnodes:
            raise UserError(f"--node-rank {self.node_rank} is outside 0..{self.nnodes - 1}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise UserError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
        if self.rdzv_endpoint is not None:
            host, sep, port = self.rdzv_endpoint.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise UserError(f"--rdzv-endpoint must be HOST:PORT, got {self.rdzv_endpoint!r}")


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
            nnodes=nnodes or 1,
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
    status: str
    rows: list[ResultRow]
    points_total: int
    failure: str | None = None
    failed_ranks: list[int] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def checks_failed(self) -> list[ResultRow]:
        return [r for r in self.rows if r.check == CHECK_FAILED]


ProgressFn = Callable[[int, int, ResultRow | None], None]


def _probe_cache_key(settings: CollectivesSettings) -> str:
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "?"
    fields = [
        socket.gethostname(),  # a shared $HOME across nodes with different GPUs
        torch_version,
        settings.backend,
        settings.device,
        settings.dtype,
        settings.reduce_op,
        ",".join(sorted(settings.ops)),
        ",".join(sorted(settings.strategies)),
        str(settings.in_place),
        str(settings.async_op),
        os.environ.get("CUDA_VISIBLE_DEVICES", "*"),
    ]
    return "|".join(fields)


def _probe_cache() -> Path:
    base = os.environ.get("COMMBENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "commbench"
    )
    return Path(base) / "probe-v1.json"


def probe(settings: CollectivesSettings) -> dict[str, Any]:
    """Validate the settings against the installed torch in a throw-away process.

    A successful probe is cached per torch version and combination, so repeated runs (a
    suite, a CI job) pay for it once.
    """
    key = _probe_cache_key(settings)
    cache_path = _probe_cache()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    result = cache.get(key) if isinstance(cache, dict) else None
    if result is None:
        result = _run_probe(settings)
        cache[key] = result
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(cache_path, json.dumps(cache))
        except (OSError, UserError):
            pass  # a read-only home only costs the next run a probe
    if settings.device == "cuda" and settings.nproc > result.get("device_count", 0):
        raise UserError(
            f"--nproc {settings.nproc} asks for more GPUs than are visible ({result.get('device_count', 0)})"
        )
    return result


def _run_probe(settings: CollectivesSettings) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [sys.executable, "-W", "ignore", "-m", "commbench.collectives.probe"],
            input=json.dumps(settings.to_dict()),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"probing the {settings.backend} backend took over {PROBE_TIMEOUT:.0f} s"
        ) from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"could not probe torch.distributed: {tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    if not result.get("ok"):
        raise UserError(str(result.get("error")))
    return result


def validate_ranks(settings: CollectivesSettings, world_size: int) -> None:
    if settings.ranks is None:
        return
    if len(set(settings.ranks)) != len(settings.ranks):
        raise UserError(f"--ranks lists a rank twice: {settings.ranks}")
    bad = [r for r in settings.ranks if not 0 <= r < world_size]
    if bad:
        raise UserError(f"--ranks: rank {bad[0]} is outside the world (0..{world_size - 1})")


def torchrun_command(
    run_dir: Path, settings: CollectivesSettings, launch: LaunchOptions
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
        ]
    cmd += ["-m", "commbench.launch.worker", str(run_dir)]
    return cmd


def _worker_env(run_dir: Path, launch: LaunchOptions) -> dict[str, str]:
    env = dict(os.environ)
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


class _Watch:
    """The state the poll loop keeps between iterations."""

    def __init__(self, run_dir: Path, points: list[Point]) -> None:
        self.run_dir = run_dir
        self.points = points
        self.reader = JournalReader(run_dir / EVENTS_FILE)
        self.rows: list[ResultRow] = []
        self.worker_context: dict[str, Any] = {}
        self.done = False
        self.failed_checks: list[int] = []
        self.pids: set[int] = set()
        self.last_signature: Any = None
        self.last_progress = time.monotonic()
        self.heartbeats: dict[int, dict[str, Any]] = {}

    def poll(self, on_row: Callable[[ResultRow], None]) -> None:
        for event in self.reader.read():
            kind = event.get("type")
            if kind == "context":
                self.worker_context = {k: v for k, v in event.items() if k != "type"}
            elif kind == "row":
                row = ResultRow.from_dict(event["row"])
                self.rows.append(row)
                self.failed_checks.extend(event.get("failed_ranks", []))
                write_results(self.run_dir, self.rows)
                on_row(row)
            elif kind == "done":
                self.done = True
        self.heartbeats = read_heartbeats(self.run_dir)
        for beat in self.heartbeats.values():
            if not beat.get("remote"):  # a remote rank's pid means nothing on this node
                self.pids.add(int(beat["pid"]))
        signature = (
            len(self.rows),
            tuple(
                sorted(
                    (r, b.get("point"), b.get("phase"), b.get("iteration"), b.get("ticks"))
                    for r, b in self.heartbeats.items()
                )
            ),
        )
        if signature != self.last_signature:
            self.last_signature = signature
            self.last_progress = time.monotonic()

    def local_workers_alive(self) -> bool:
        """Whether any of this node's workers is still running (not a zombie)."""
        return any(
            procs.alive(int(b.get("pid", -1)))
            for b in self.heartbeats.values()
            if not b.get("remote")
        )

    @property
    def started(self) -> bool:
        """Whether any rank has begun measuring (reached its first point)."""
        return bool(self.rows) or any(b.get("point", -1) >= 0 for b in self.heartbeats.values())

    def allowance(self, timeout: float) -> float:
        """Seconds without progress that mean a hang, now: at least STARTUP_TIMEOUT until
        the first point starts, `timeout` after."""
        return timeout if self.started else max(timeout, STARTUP_TIMEOUT)

    def where(self, beat: dict[str, Any]) -> str:
        index = beat.get("point", -1)
        if not isinstance(index, int) or not 0 <= index < len(self.points):
            return f"phase {beat.get('phase')}"
        p = self.points[index]
        what = p.strategy or p.op
        size = "" if p.op == "barrier" else f" {format_size(p.requested_bytes)}"
        return f"{what}{size} ({beat.get('phase')}, iteration {beat.get('iteration')})"


REMOTE_SILENT = "stopped responding (no heartbeat through the job's store)"


def _silent_remotes(watch: _Watch, silent_after: float) -> list[int]:
    """Other nodes' ranks that went silent.

    They are known only through this node's local rank 0, which copies their heartbeats from
    the job's store whenever they change. A remote rank is silent if that copier went on
    running for a while after the rank's last change (even if the copier has died since,
    e.g. because the other node's launcher stopped its peer).
    """
    beats = watch.heartbeats
    mirror_times = [
        b["mtime"] for b in beats.values() if not b.get("remote") and b.get("local_rank", 0) == 0
    ]
    if not mirror_times:
        return []
    mirror_time = max(mirror_times)
    return sorted(
        r
        for r, b in beats.items()
        if b.get("remote") and mirror_time - b.get("mtime", mirror_time) > silent_after
    )


def _describe_hang(watch: _Watch, timeout: float) -> tuple[str, list[int]]:
    """Name the rank(s) that stopped the run: stopped processes first, then silent ones, then
    ranks that are gone, then ranks behind the others; if every rank waits at the same
    place, say so."""
    now = time.time()
    beats = watch.heartbeats
    silent_after = min(STALE_AFTER, timeout / 2)
    dead: dict[int, tuple[int, str]] = {}
    for r, b in beats.items():
        if b.get("remote"):
            continue  # judged below, once we know this node's mirror is alive
        state = procs.state(int(b.get("pid", -1)))
        if state in ("T", "t"):
            dead[r] = (0, "is stopped (SIGSTOP or a debugger)")
        elif state in (None, "Z", "X"):
            dead[r] = (2, "is gone" + (f" ({b['error']})" if b.get("error") else ""))
        elif now - b.get("mtime", now) > silent_after:
            dead[r] = (1, "stopped responding")
    for r in _silent_remotes(watch, silent_after):
        dead[r] = (1, REMOTE_SILENT)
    live = {r: b for r, b in beats.items() if r not in dead}
    behind: dict[int, dict[str, Any]] = {}
    if live:
        furthest = max((b.get("point", -1), b.get("iteration", 0)) for b in beats.values())
        behind = {
            r: b for r, b in live.items() if (b.get("point", -1), b.get("iteration", 0)) < furthest
        }
    parts = []
    culprits = []
    for r, (_, how) in sorted(dead.items(), key=lambda kv: (kv[1][0], kv[0])):
        b = beats[r]
        culprits.append(r)
        parts.append(
            f"rank {r} (host {b.get('host')}, pid {b.get('pid')}) {how}: last heartbeat "
            f"{now - b.get('mtime', now):.0f} s ago, at {watch.where(b)}"
        )
    for r, b in sorted(behind.items()):
        culprits.append(r)
        parts.append(
            f"rank {r} (host {b.get('host')}, pid {b.get('pid')}) is behind the others at {watch.where(b)}"
        )
    if not parts:
        where = (
            watch.where(next(iter(beats.values()))) if beats else "start-up (no worker reported in)"
        )
        parts.append(f"all ranks are waiting at {where}: a backend or network hang")
    return f"no progress for {timeout:.0f} s; " + "; ".join(parts), culprits


_PEER_LOST = re.compile(r"Connection (reset|closed)|peer|Broken pipe|Timed out waiting", re.I)
_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_TRACE_RE = re.compile(r"^\s*traceback\s*:\s*(.*)$")


def _describe_crash(watch: _Watch, returncode: int, timeout: float) -> tuple[str, list[int]]:
    """Name the failed ranks from the heartbeats and torchrun's failure summary, the root
    cause first: a rank killed by a signal, else one that raised an error of its own; ranks
    that only lost their peer or got torchrun's SIGTERM come last, marked as consequences.
    When this node's ranks only lost their peers, a rank on another node that had gone
    silent is named first: the other node's watchdog may have stopped it before this one's
    fired."""
    failures: dict[int, dict[str, str]] = {}
    log = watch.run_dir / "launcher.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    current: int | None = None
    for line in text.splitlines():
        if m := _RANK_RE.match(line):
            current = int(m.group(1))
            failures.setdefault(current, {})
        elif current is not None and (m := _EXIT_RE.match(line)):
            failures[current]["exitcode"] = m.group(1)
        elif current is not None and (m := _TRACE_RE.match(line)):
            failures[current]["traceback"] = m.group(1).strip()
    for r, beat in watch.heartbeats.items():
        if beat.get("error"):
            failures.setdefault(r, {})["error"] = str(beat["error"])
    if not failures:
        if returncode < 0:
            with contextlib.suppress(ValueError):
                how = signal.Signals(-returncode).name
                return f"torchrun (the agent, not a worker) was killed by {how}", []
        tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or [
            f"torchrun exited with {returncode}"
        ]
        return f"the launcher failed: {tail[0].strip()}", []

    def exitcode(info: dict[str, str]) -> int:
        try:
            return int(info.get("exitcode") or 1)
        except ValueError:
            return 1

    def is_consequence(info: dict[str, str]) -> bool:
        code = exitcode(info)
        if code < 0 and code != -signal.SIGTERM:
            return False
        message = info.get("error", "") + " " + info.get("traceback", "")
        return code == -signal.SIGTERM or bool(_PEER_LOST.search(message)) or not info.get("error")

    def cause_first(item: tuple[int, dict[str, str]]) -> tuple[int, int]:
        r, info = item
        code = exitcode(info)
        signalled = code < 0 and code != -signal.SIGTERM
        return (0 if signalled else 2 if is_consequence(info) else 1, r)

    ordered = sorted(failures.items(), key=cause_first)
    parts = []
    culprits = []
    if all(is_consequence(info) for info in failures.values()):
        now = time.time()
        for r in _silent_remotes(watch, min(STALE_AFTER, timeout / 2)):
            b = watch.heartbeats[r]
            culprits.append(r)
            parts.append(
                f"rank {r} (host {b.get('host')}) {REMOTE_SILENT}: last heartbeat "
                f"{now - b.get('mtime', now):.0f} s ago, at {watch.where(b)}"
            )
    for r, info in ordered:
        beat = watch.heartbeats.get(r, {})
        code = exitcode(info)
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = (info.get("error") or info.get("traceback") or f"exited with {code}")[:300]
        if is_consequence(info) and len(ordered) > 1:
            how += " (a consequence: it lost its peer or was stopped by torchrun)"
        host = f"host {beat.get('host')}, " if beat else ""
        at = f" at {watch.where(beat)}" if beat else ""
        parts.append(f"rank {r} ({host}exit {code}) {how}{at}")
    return "worker failure: " + "; ".join(parts), culprits + [r for r, _ in ordered]


# More CPU ranks per core than this time the scheduler, not the backend (and a typo like
# --nproc 100000 must not start spawning).
MAX_CPU_RANKS_PER_CORE = 8
# A rank holds about this many buffers of the largest size at once: input, output (all_to_all,
# sendrecv, the ring's scratch) and the expected result of the check.
BUFFERS_PER_RANK = 3


def check_resources(settings: CollectivesSettings, probe_info: dict[str, Any]) -> None:
    """Refuse, before launching, what this node cannot hold: too many ranks for its cores,
    buffers larger than its memory (host memory for CPU ranks, one GPU's for GPU ranks)."""
    cores = os.cpu_count() or 1
    if settings.device == "cpu" and settings.nproc > MAX_CPU_RANKS_PER_CORE * cores:
        raise UserError(
            f"--nproc {settings.nproc} is more than {MAX_CPU_RANKS_PER_CORE} CPU ranks per core "
            f"({cores} cores here)"
        )
    need = BUFFERS_PER_RANK * max(settings.sizes)
    if settings.device == "cpu":
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        need *= settings.nproc
        where = f"this node's {format_amount(have)} of memory ({settings.nproc} ranks)"
    else:
        have = int(probe_info.get("memory_bytes") or 0)
        where = f"one GPU's {format_amount(have)}"
    if have and need > have:
        raise UserError(
            f"--sizes up to {format_size(max(settings.sizes))} needs about {format_amount(need)} "
            f"of buffers ({BUFFERS_PER_RANK} per rank), more than {where}"
        )


def run_collectives(
    settings: CollectivesSettings,
    out_parent: Path,
    launch: LaunchOptions | None = None,
    on_progress: ProgressFn | None = None,
) -> Outcome:
    """Validate, launch torchrun, watch it, and return what was measured."""
    launch = launch or LaunchOptions()
    validate_ranks(settings, settings.nproc * launch.nnodes)
    probe_info = probe(settings)
    check_resources(settings, probe_info)
    points = plan_points(
        settings, len(settings.ranks) if settings.ranks else settings.nproc * launch.nnodes
    )
    run_dir = new_run_dir(out_parent, "collectives")
    atomic_write(run_dir / SETTINGS_FILE, json.dumps(settings.to_dict(), indent=2))
    worker_env = _worker_env(run_dir, launch)
    # the knobs the workers ran with (--debug's included), not only the launcher's own
    context: dict[str, Any] = {
        **host_context(),
        "env": env_knobs(worker_env),
        "topology": topology_snapshot(),
    }
    meta: dict[str, Any] = {
        "kind": "collectives",
        "run_id": run_dir.name,
        "status": STATUS_RUNNING,
        "settings": settings.to_dict(),
        "launch": {
            "nnodes": launch.nnodes,
            "node_rank": launch.node_rank,
            "rdzv_endpoint": launch.rdzv_endpoint,
            "rdzv_id": launch.rdzv_id,
            "source": launch.source,
            "debug": launch.debug,
        },
        "context": context,
        "points_total": len(points),
        "points_done": 0,
        "failure": None,
    }
    write_run_meta(run_dir, meta)
    write_results(run_dir, [])

    watch = _Watch(run_dir, points)
    progress = on_progress or (lambda done, total, row: None)
    progress(0, len(points), None)

    def on_row(row: ResultRow) -> None:
        progress(len(watch.rows), len(points), row)

    started = time.monotonic()
    status, failure = STATUS_COMPLETE, None
    culprits: list[int] = []
    with open(run_dir / "launcher.log", "wb") as log, procs.termination_as_interrupt():
        proc = subprocess.Popen(
            torchrun_command(run_dir, settings, launch),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=worker_env,
            start_new_session=True,  # our Ctrl-C is ours to handle: stop everything, keep data
        )
        watch.pids.add(proc.pid)
        next_scan = 0.0
        finished = 0.0
        agent_stuck = False
        try:
            while True:
                returncode = proc.poll()
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
                if time.monotonic() - watch.last_progress > allowance:
                    failure, culprits = _describe_hang(watch, allowance)
                    status = STATUS_FAILED
                    watch.pids |= procs.descendants(proc.pid)
                    procs.stop_all(watch.pids, grace=2.0)
                    procs.wait_or_kill(proc, 30)
                    break
                time.sleep(POLL)
        except KeyboardInterrupt:
            with procs.interrupts_ignored():
                watch.pids |= procs.descendants(proc.pid)
                procs.stop_all(watch.pids | {proc.pid}, grace=5.0)
                procs.wait_or_kill(proc, 30)
            status, failure = STATUS_INTERRUPTED, "interrupted"
        except CommbenchError as exc:  # the launcher itself cannot go on (results unwritable)
            with procs.interrupts_ignored():
                watch.pids |= procs.descendants(proc.pid)
                procs.stop_all(watch.pids | {proc.pid}, grace=2.0)
                procs.wait_or_kill(proc, 30)
            status, failure = STATUS_FAILED, f"stopped the run: {exc}"
        with procs.interrupts_ignored(), contextlib.suppress(CommbenchError):
            watch.poll(on_row)  # rows journalled just before the end
        leftover = {p for p in watch.pids if procs.alive(p)}
        leftover |= procs.marked(RUN_MARKER, str(run_dir.resolve()))
        with procs.interrupts_ignored():
            procs.stop_all(leftover, grace=1.0)
    # a second Ctrl-C or a SIGTERM now would leave run.json saying "running": it waits
    with procs.interrupts_ignored():
        writer = bool(watch.worker_context)  # this node runs global rank 0, which journals the rows
        if agent_stuck:
            meta["note"] = (
                f"torchrun (pid {proc.pid}) did not exit {AGENT_LINGER:.0f} s after its workers "
                "finished and was stopped; every point was measured"
            )
        elif status == STATUS_COMPLETE and (proc.returncode != 0 or (writer and not watch.done)):
            status = STATUS_FAILED
            failure, culprits = _describe_crash(watch, proc.returncode, settings.timeout)
        meta["holds_results"] = writer
        if not writer and launch.nnodes > 1:
            meta["note"] = (
                "this node did not run global rank 0: the results are in the run directory on rank 0's node"
            )
        ctx = watch.worker_context
        context.update({k: v for k, v in ctx.items() if k != "ranks"})
        context["ranks"] = ctx.get("ranks", [])
        context["hosts"] = (
            sorted({r["host"] for r in context["ranks"]}) if context["ranks"] else [context["host"]]
        )
        context["device_names"] = (
            sorted({r["device_name"] for r in context["ranks"]}) if context["ranks"] else []
        )
        context["driver"] = (context.get("topology") or {}).get("host", {}).get("driver_version")
        context["probe"] = probe_info
        meta.update(
            status=status,
            failure=failure,
            failed_ranks=culprits,
            points_done=len(watch.rows),
            duration_s=round(time.monotonic() - started, 3),
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            context=context,
        )
        try:
            write_run_meta(run_dir, meta)
            write_results(run_dir, watch.rows)
        except UserError as exc:  # not bad input: the run's own directory failed under it
            raise RunFailed(f"{failure or status}; and {exc}") from None
        return Outcome(
            run_dir=run_dir,
            status=status,
            rows=watch.rows,
            points_total=len(points),
            failure=failure,
            failed_ranks=culprits,
            meta=meta,
        )
