"""The gate's power, measured: real runs of known truth pooled, then each detector judged on them.

    python benchmarks/gate_power.py collect  [--pool /tmp/gate-power] [--min-time 0.3]
    python benchmarks/gate_power.py evaluate [--pool /tmp/gate-power] [--pairs 50] [--trials 100]

Issue 42, item 4. Two phases, so the detectors can change while the runs stay:

**collect** makes the pool: real `commbench collectives` runs (the console script, one torchrun
launch each; `RUN_ARGS`) under conditions whose truth is known (`CONDITIONS`):

- `shaped-base`: inside a network namespace of this script's own, whose loopback is shaped by
  `tc tbf rate 2gbit` (both directions of every connection share lo's one egress queue, so the
  two ranks share 2 Gbit/s); `shaped-95`, `shaped-90`, `shaped-75`: the rate 5%, 10%, 25%
  lower; `shaped-netem`: the base rate plus a fixed delay on every packet, which hurts the
  latency-bound sizes only (a size-specific regression). This machine's kernel has no
  sch_netem (nor fq, etf or codel), so the delay is netem's in effect but not in name: an
  iptables NFQUEUE rule hands every TCP packet lo sends to `nfq_delay` (benchmarks/
  nfq_delay.c, compiled into the pool), which accepts each `DELAY_US` after it arrived, in
  order; it runs in a namespace of its own, so no other condition's packets go near it;
- `loop-base`: plain loopback, no namespace, no shaping: the machine's own load is the noise;
  `loop-2x`: plain loopback with commbench (and so its torchrun workers) in a cgroup v1 CPU
  quota of this script's own, sized so the points come out about 2x slower.

Every run launches the package as committed (`git archive` of HEAD, unpacked into
`POOL/src-<commit>/` and put first on PYTHONPATH; a resumed pool keeps its commit): others edit
the checkout while the pool is made, and one half-edited module would fail or change every run
after it. Conditions are interleaved round-robin (`ROUND`), so a change in the machine's load
over the hour hits each alike; each run's condition, start, duration and load averages go into
`POOL/pool.json` (rewritten after every run). Rerunning `collect` adds what is missing. A run
that fails is kept out of the pool, moved under `POOL/failed/` and listed in the manifest's
`failures`. Every namespace and cgroup has a name unique to this process (pid + random) and is
removed on exit, on an exception, on SIGINT/SIGTERM (a handler) and at interpreter exit
(atexit); nothing it did not make is touched. Root, iproute2's `ip` and `tc`, and the cgroup v1
CPU controller are needed.

**evaluate** reads the pool and starts nothing, writes nothing: it prints a markdown report.
For each detector, the pairs of runs it failed: A/B pairs (a base run, then a run of a slower
condition) give its power, A/A pairs (two runs of the same condition) its false-failure rate.
Pairs are drawn with a fixed seed (`--seed`), distinct unordered pairs where the pool allows,
so 50 pairs reuse runs: the report says how many distinct runs are under them.

- the pairwise gate: `compare_runs(load_run(a), load_run(b))` with `GateSettings()`; a pair
  fails when the comparison's `exit_code` is not 0;
- the gate with a 5-run history: `history_gate` below, the hook for the new API (until it is
  wired, reported as not available);
- change points: `commbench.history.changes.detect(values)` on 30-run series made of real pool
  runs, runs 0..k-1 from shaped-base and k..29 from shaped-90 (or -75) at a random k in
  [3, 27], one draw of runs for every point; the values are each point's busbw from its
  samples. Precision, recall (a change within +-1 run of k), false positives on series
  without a step, and the location error.

It also prints the issue's own checks on the pool: how many base->75 pairs the current gate
fails and the verdicts it gives, and each baseline's noise band as the issue measured it (the
5th-95th percentiles of its iterations over their point's median, pooled).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # evaluate imports commbench when it runs: collect never does (see freeze_source)
    from commbench.compare import Comparison, PointKey
    from commbench.results.runs import Run
    from tests.change_series import Score

ROOT = Path(__file__).resolve().parents[1]

POOL = Path("/tmp/gate-power")
MANIFEST = "pool.json"
SCHEMA_VERSION = 1
RUN_ARGS = (
    "--ops",
    "all_reduce,all_gather,broadcast",
    "--sizes",
    "64K-16M:x4",
    "--nproc",
    "2",
    "--device",
    "cpu",
    "--no-plot",
)
"""The issue's settings, but --min-time, which `collect --min-time` sets (0.3 by default)."""
RUN_TIMEOUT_S = 300.0
"""A run still going after this is killed and logged as failed (a pilot run takes ~20 s)."""

BASE_RATE_MBIT = 2000.0
TBF_BURST = "256kb"
"""Above lo's 64 KiB MTU: a bucket smaller than one segment drops it instead of pacing it."""
TBF_LATENCY = "50ms"
DELAY_US = 200
"""One way, on every packet lo sends (data and ACKs alike): a TCP ping-pong's round trip
went from 13 us to 480 us in the namespace."""
NFQUEUE = 7
"""The queue number in the delay's namespace (its own: no other rule can use it)."""
DELAYER = Path(__file__).with_name("nfq_delay.c")
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
CFS_PERIOD_US = 10_000
"""Short periods spread the throttling over every iteration instead of a few long stalls."""
LOOP_2X_CPUS = 0.4
"""CPUs the loop-2x cgroup gets, together (commbench, torchrun and both workers). A quota
slows a point by its CPU demand over the quota, so it cannot slow every size alike: in the
pilots 1.0 CPU slowed the points 0.6x-1.2x (median 0.75), 0.5 CPU 0.17x-0.98x (median 0.68),
0.3 CPU 0.05x-0.75x; the small, waiting sizes least."""


@dataclass(frozen=True, slots=True)
class Condition:
    """One known truth: where a run happens and how its link or CPU is degraded."""

    name: str
    runs: int
    """How many runs of it the pool wants."""
    rate_mbit: float | None = None
    """The tbf rate on the namespace's loopback; None: plain loopback, no namespace."""
    delay_us: float | None = None
    """A delay on every packet (one way; `nfq_delay`), in front of the tbf."""
    cpus: float | None = None
    """A CPU quota (CPUs, together) on commbench and its workers; None: none."""
    truth: str = ""
    """What a detector should say about it against its base, in words."""


CONDITIONS = {
    c.name: c
    for c in (
        Condition(name="shaped-base", runs=60, rate_mbit=BASE_RATE_MBIT, truth="the base"),
        Condition(name="shaped-95", runs=30, rate_mbit=BASE_RATE_MBIT * 0.95, truth="5% slower"),
        Condition(name="shaped-90", runs=30, rate_mbit=BASE_RATE_MBIT * 0.90, truth="10% slower"),
        Condition(name="shaped-75", runs=30, rate_mbit=BASE_RATE_MBIT * 0.75, truth="25% slower"),
        Condition(
            name="shaped-netem",
            runs=30,
            rate_mbit=BASE_RATE_MBIT,
            delay_us=DELAY_US,
            truth="latency-bound sizes slower",
        ),
        Condition(name="loop-base", runs=60, truth="the noisy base"),
        Condition(name="loop-2x", runs=30, cpus=LOOP_2X_CPUS, truth="about 2x slower"),
    )
}
ROUND = (
    "shaped-base",
    "shaped-95",
    "shaped-90",
    "shaped-75",
    "shaped-netem",
    "loop-base",
    "loop-2x",
    "shaped-base",
    "loop-base",
)
"""The interleave's order: the base conditions twice a round, the others once (60 and 30 runs
after 30 rounds); `schedule` spreads each condition's runs evenly, in this order at a tie."""


def schedule(done: set[tuple[str, int]], only: set[str] | None = None) -> list[tuple[str, int]]:
    """The (condition, index) runs the pool is missing, interleaved: each condition's missing
    runs spread evenly over the collection (the j-th of m at (j + 1/2) / m), ties in `ROUND`'s
    order. On a fresh pool every stretch of 9 runs holds each condition once, the base ones
    twice; on a resumed one, a condition added late is spread over what is left instead of run
    back to back."""
    first = {name: ROUND.index(name) for name in CONDITIONS}
    keyed = []
    for name, cond in CONDITIONS.items():
        if only is not None and name not in only:
            continue
        missing = [i for i in range(cond.runs) if (name, i) not in done]
        for j, i in enumerate(missing):
            keyed.append(((j + 0.5) / len(missing), first[name], name, i))
    return [(name, i) for _, _, name, i in sorted(keyed)]


# --- the manifest ------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class PoolRun:
    """One run in the pool."""

    condition: str
    index: int
    """Its number within its condition (0-based)."""
    path: str
    """The run directory, relative to the pool."""
    started: float
    """Unix time it was launched."""
    seconds: float
    """Wall time of the whole `commbench collectives` (start-up included)."""
    load_before: list[float]
    """The 1-, 5- and 15-minute load averages as it started."""
    load_after: list[float]
    """The same as it ended."""
    setting: str
    """The degradation, as applied (tc and cgroup settings), in words."""


@dataclass(kw_only=True, slots=True)
class Failure:
    """A run that failed: kept out of the pool, never silently."""

    condition: str
    index: int
    started: float
    seconds: float
    reason: str
    """The exit code or timeout, and the last lines of its output."""
    path: str | None
    """Where its directory was moved (under failed/), if it made one."""


@dataclass(kw_only=True, slots=True)
class Manifest:
    """`POOL/pool.json`: what the pool holds and how it was made."""

    schema_version: int = SCHEMA_VERSION
    command: list[str] = field(default_factory=list)
    """The run's arguments (`commbench collectives ...` without -o)."""
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    commit: str = ""
    """The commit whose package (frozen under POOL/src-<commit>/) made the runs."""
    runs: list[PoolRun] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    collect_seconds: float = 0.0
    """Wall time of every `collect` so far, together."""

    @classmethod
    def read(cls, pool: Path) -> Manifest:
        path = pool / MANIFEST
        if not path.exists():
            return cls()
        data = json.loads(path.read_text())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise SystemExit(
                f"{path}: schema_version {data.get('schema_version')!r}, this script reads "
                f"{SCHEMA_VERSION}"
            )
        return cls(
            command=data["command"],
            conditions=data["conditions"],
            commit=data["commit"],
            runs=[PoolRun(**r) for r in data["runs"]],
            failures=[Failure(**f) for f in data["failures"]],
            collect_seconds=data["collect_seconds"],
        )

    def write(self, pool: Path) -> None:
        tmp = pool / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1, allow_nan=False) + "\n")
        tmp.replace(pool / MANIFEST)

    def done(self) -> set[tuple[str, int]]:
        return {(r.condition, r.index) for r in self.runs}


# --- collect: the degradations, made and removed ------------------------------------------------


class Degrader:
    """The namespaces, the cgroup and the delayer this process made, and their removal.

    Two namespaces (the shaped one, its loopback's tbf set per run; the delayed one, with the
    NFQUEUE rule) and one cgroup for the whole collection, each named with the pid and a
    random suffix. `close` is idempotent and never raises; it runs from `with`, atexit and the
    signal handler alike, and kills what is left in them (only runs of ours can be)."""

    def __init__(self, pool: Path, *, delay: bool) -> None:
        tag = f"gp{os.getpid()}{uuid.uuid4().hex[:6]}"
        self.netns = f"{tag}ns"
        self.delay_netns = f"{tag}nd" if delay else None
        self.cgroup = CGROUP_CPU / f"commbench-gate-power-{tag}"
        self.delayer_bin = pool / "nfq_delay"
        self._made: list[str] = []
        self._made_cgroup = False
        self._closed = False
        self.child: subprocess.Popen[bytes] | None = None
        """The run in flight (its own session): killed, with its workers, on the way out."""
        self.delayer: subprocess.Popen[str] | None = None

    def __enter__(self) -> Degrader:
        atexit.register(self.close)
        problem = self._unavailable()
        if problem:
            raise SystemExit(f"collect: {problem}")
        for ns in filter(None, (self.netns, self.delay_netns)):
            _sh(["ip", "netns", "add", ns])
            self._made.append(ns)
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        if self.delay_netns:
            self._build_delayer()
            rule = ["-A", "OUTPUT", "-o", "lo", "-p", "tcp", "-j", "NFQUEUE"]
            # no --queue-bypass: with the delayer gone, packets are dropped and the run fails
            # (logged), never measured undelayed
            _sh(["ip", "netns", "exec", self.delay_netns, "iptables-legacy", *rule,
                 "--queue-num", str(NFQUEUE)])  # fmt: skip
        self.cgroup.mkdir()
        self._made_cgroup = True
        (self.cgroup / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unavailable(self) -> str | None:
        if os.geteuid() != 0:
            return "needs root (a network namespace, tc, a cgroup)"
        tools = ["ip", "tc", "commbench"]
        if self.delay_netns:
            tools += ["iptables-legacy", "gcc"]  # Debian: apt-get install iptables gcc
        missing = [t for t in tools if shutil.which(t) is None]
        if missing:
            return f"needs {', '.join(missing)} on PATH"
        if not (CGROUP_CPU / "cpu.cfs_quota_us").exists():
            return f"needs the cgroup v1 CPU controller at {CGROUP_CPU}"
        return None

    def _build_delayer(self) -> None:
        out = self.delayer_bin
        if out.exists() and out.stat().st_mtime >= DELAYER.stat().st_mtime:
            return
        _sh(["gcc", "-O2", "-Wall", "-o", str(out), str(DELAYER)])

    def apply(self, cond: Condition) -> tuple[list[str], str]:
        """Set the condition up; the argv prefix its run goes under, and the setting in words."""
        if cond.cpus is not None:
            quota = max(1000, round(cond.cpus * CFS_PERIOD_US))
            (self.cgroup / "cpu.cfs_quota_us").write_text(str(quota))
            procs = shlex.quote(str(self.cgroup / "cgroup.procs"))
            prefix = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]
            return prefix, f"cgroup v1 cpu quota {quota}/{CFS_PERIOD_US} us ({cond.cpus:g} CPU)"
        if cond.rate_mbit is None:
            return [], "plain loopback"
        netns = self.netns
        if cond.delay_us is not None:
            if self.delay_netns is None:
                raise RuntimeError("a delayed condition needs Degrader(delay=True)")
            netns = self.delay_netns
        ns = ["ip", "netns", "exec", netns]
        _sh([*ns, "tc", "qdisc", "del", "dev", "lo", "root"], check=False)
        rate = f"{round(cond.rate_mbit * 1000)}kbit"
        tbf = ["tbf", "rate", rate, "burst", TBF_BURST, "latency", TBF_LATENCY]
        _sh([*ns, "tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", *tbf])
        setting = f"netns lo: tbf rate {rate} burst {TBF_BURST} latency {TBF_LATENCY}"
        if cond.delay_us is not None:
            setting += f", every TCP packet delayed {cond.delay_us:g} us (nfq_delay)"
        shown = _sh([*ns, "tc", "qdisc", "show", "dev", "lo"]).stdout.strip()
        return [*ns, "env", "GLOO_SOCKET_IFNAME=lo"], f"{setting} [{shown}]"

    def start_delayer(self, delay_us: float) -> None:
        """The delayer, bound to the delayed namespace's queue (it says "ready")."""
        assert self.delay_netns is not None
        argv = ["ip", "netns", "exec", self.delay_netns, str(self.delayer_bin)]
        self.delayer = subprocess.Popen(
            [*argv, str(NFQUEUE), f"{delay_us:g}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.delayer.stdout is not None
        line = self.delayer.stdout.readline().strip()
        if line != "ready":
            self.delayer.kill()
            _, err = self.delayer.communicate()
            self.delayer = None
            raise RuntimeError(f"nfq_delay did not start: {line} {err.strip()}")

    def stop_delayer(self) -> str:
        """Stop the delayer; what it says it did (packets, how late its verdicts were)."""
        delayer, self.delayer = self.delayer, None
        if delayer is None:
            return ""
        if delayer.poll() is not None:
            _, err = delayer.communicate()
            return f"nfq_delay exited {delayer.returncode} during the run: {err.strip()}"
        delayer.send_signal(signal.SIGTERM)
        try:
            out, err = delayer.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            delayer.kill()
            out, err = delayer.communicate()
        return f"nfq_delay: {out.strip()}{' ' + err.strip() if err.strip() else ''}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        with contextlib.suppress(Exception):
            self.kill_child()
        with contextlib.suppress(Exception):
            self.stop_delayer()
        for ns in self._made:  # its qdisc and iptables rule go with it
            with contextlib.suppress(Exception):
                for pid in _sh(["ip", "netns", "pids", ns], check=False).stdout.split():
                    with contextlib.suppress(OSError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                if ns in _sh(["ip", "netns", "list"]).stdout.split():
                    _sh(["ip", "netns", "del", ns], check=False)
        if self._made_cgroup:
            for _ in range(100):
                try:
                    self.cgroup.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # a member left: only what `apply`'s prefix started can be
                    with contextlib.suppress(OSError):
                        for pid in (self.cgroup / "cgroup.procs").read_text().split():
                            with contextlib.suppress(OSError):
                                os.kill(int(pid), signal.SIGKILL)
                    time.sleep(0.1)

    def kill_child(self) -> None:
        """The run in flight, its launcher's process group (commbench passes SIGTERM on to
        torchrun, which stops its workers), then SIGKILL after 10 s."""
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=10)


def _sh(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{shlex.join(argv)}` failed: {proc.stderr.strip()}")
    return proc


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def freeze_source(pool: Path, commit: str) -> tuple[str, Path]:
    """The package as committed at `commit` ('' for HEAD), unpacked under the pool: every run
    of the pool launches the same code, whatever the checkout's working tree holds meanwhile."""
    commit = commit or _sh(["git", "-C", str(ROOT), "rev-parse", "HEAD"]).stdout.strip()
    src = pool / f"src-{commit[:12]}"
    if not (src / "commbench" / "__init__.py").exists():
        tmp = pool / f".src-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "commbench"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
        tmp.replace(src)
    return commit, src


def run_one(
    deg: Degrader, cond: Condition, index: int, pool: Path, command: list[str], src: Path
) -> PoolRun | Failure:
    """One real run of `cond`, its directory under POOL/runs/<condition>/<index>/."""
    parent = pool / "runs" / cond.name / f"{index:03d}"
    if parent.exists():  # a run cut short by an earlier collect: not in the manifest
        shutil.rmtree(parent)
    parent.mkdir(parents=True)
    prefix, setting = deg.apply(cond)
    argv = [*prefix, *command, "-o", str(parent)]
    if cond.delay_us is not None:
        deg.start_delayer(cond.delay_us)
    load_before = list(os.getloadavg())
    started = time.time()
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(src)}
    deg.child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    try:
        out, _ = deg.child.communicate(timeout=RUN_TIMEOUT_S)
        reason = None if deg.child.returncode == 0 else f"exit {deg.child.returncode}"
    except subprocess.TimeoutExpired:
        deg.kill_child()
        out, reason = b"", f"timed out after {RUN_TIMEOUT_S:g} s"
    deg.child = None
    seconds = time.monotonic() - t0
    if cond.delay_us is not None:
        said = deg.stop_delayer()
        setting += f"; {said}"
        if reason is None and not said.startswith("nfq_delay: packets"):
            reason = said
    dirs = [d for d in parent.iterdir() if d.is_dir()]
    if reason is None and len(dirs) != 1:
        reason = f"exit 0 but {len(dirs)} run directories in {parent}"
    if reason is not None:
        tail = " | ".join(out.decode(errors="replace").strip().splitlines()[-8:])
        moved = None
        if dirs:
            target = pool / "failed" / cond.name / f"{index:03d}-{int(started)}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(parent), target)
            moved = str(target.relative_to(pool))
        else:
            shutil.rmtree(parent)
        return Failure(
            condition=cond.name,
            index=index,
            started=started,
            seconds=seconds,
            reason=f"{reason}: {tail}",
            path=moved,
        )
    return PoolRun(
        condition=cond.name,
        index=index,
        path=str(dirs[0].relative_to(pool)),
        started=started,
        seconds=seconds,
        load_before=load_before,
        load_after=list(os.getloadavg()),
        setting=setting,
    )


def collect(args: argparse.Namespace) -> int:
    pool: Path = args.pool.resolve()
    if pool == ROOT or ROOT in pool.parents:
        raise SystemExit(f"collect: the pool {pool} is inside the repository {ROOT}")
    pool.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.read(pool)
    command = ["commbench", "collectives", *RUN_ARGS, "--min-time", f"{args.min_time:g}"]
    if manifest.runs and manifest.command != command:
        raise SystemExit(
            f"collect: the pool was collected with {shlex.join(manifest.command)}, not "
            f"{shlex.join(command)}: use another --pool"
        )
    CONDITIONS["loop-2x"] = replace(CONDITIONS["loop-2x"], cpus=args.loop_2x_cpus)
    conditions = {n: asdict(c) for n, c in CONDITIONS.items()}
    if manifest.runs and manifest.conditions != conditions:
        raise SystemExit(
            f"collect: the pool's conditions differ from these (was --loop-2x-cpus "
            f"{manifest.conditions['loop-2x']['cpus']:g}?): use another --pool"
        )
    commit, src = freeze_source(pool, manifest.commit if manifest.runs else "")
    manifest.command = command
    manifest.conditions = conditions
    manifest.commit = commit
    only = set(args.only.split(",")) if args.only else None
    unknown = sorted((only or set()) - set(CONDITIONS))
    if unknown:
        raise SystemExit(f"collect: --only: no condition {', '.join(unknown)}")
    todo = schedule(manifest.done(), only)
    if args.limit is not None:
        todo = todo[: args.limit]
    _log(f"collect: {len(manifest.runs)} runs in {pool}, {len(todo)} to go, commit {commit[:12]}")
    t_start = time.monotonic()
    delay = any(CONDITIONS[name].delay_us is not None for name, _ in todo)
    with Degrader(pool, delay=delay) as deg:

        def stop(signum: int, frame: FrameType | None) -> None:
            _log(
                f"collect: {signal.Signals(signum).name}: the run in flight is dropped, cleaning up"
            )
            deg.close()
            raise SystemExit(128 + signum)

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, stop)
        try:
            for n, (name, index) in enumerate(todo):
                got = run_one(deg, CONDITIONS[name], index, pool, command, src)
                if isinstance(got, Failure):
                    manifest.failures.append(got)
                    _log(f"[{n + 1}/{len(todo)}] {name} #{index} FAILED: {got.reason}")
                else:
                    manifest.runs.append(got)
                    _log(
                        f"[{n + 1}/{len(todo)}] {name} #{index}: {got.seconds:.1f} s, "
                        f"load {got.load_before[0]:.2f} -> {got.path}"
                    )
                manifest.collect_seconds += time.monotonic() - t_start
                t_start = time.monotonic()
                manifest.write(pool)
        finally:
            manifest.collect_seconds += time.monotonic() - t_start
            manifest.write(pool)
    failed = len(manifest.failures)
    _log(f"collect: done, {len(manifest.runs)} runs in the pool, {failed} failures so far")
    return 0


# --- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="phase", required=True)
    c = sub.add_parser("collect", help="add the runs the pool is missing (real launches)")
    c.add_argument("--pool", type=Path, default=POOL)
    c.add_argument("--min-time", type=float, default=0.3)
    c.add_argument(
        "--loop-2x-cpus",
        type=float,
        default=LOOP_2X_CPUS,
        help="CPUs (together) the loop-2x cgroup gives commbench and its workers",
    )
    c.add_argument("--only", help="comma list of conditions to collect (a pilot)")
    c.add_argument("--limit", type=int, help="at most this many runs (a pilot)")
    e = sub.add_parser("evaluate", help="judge the detectors on the pool (starts nothing)")
    e.add_argument("--pool", type=Path, default=POOL)
    e.add_argument("--pairs", type=int, default=50)
    e.add_argument("--trials", type=int, default=100, help="change-point series per step")
    e.add_argument("--series", type=int, default=SERIES_RUNS, help="runs in a change-point series")
    e.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if args.phase == "collect":
        return collect(args)
    return evaluate(args)


# --- evaluate: the detectors on the pool -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pairing:
    """Pairs of runs judged by a detector: a baseline from `base`, a new run from `new`."""

    label: str
    base: str
    new: str
    target: str
    """The issue's goal for the pairwise or history gate, in words ('' where it sets none)."""

    @property
    def same(self) -> bool:
        """A/A: both runs of one condition (the detector should pass them)."""
        return self.base == self.new


PAIRINGS = (
    Pairing("shaped A/A", "shaped-base", "shaped-base", "<= 1 of 50 fail"),
    Pairing("shaped -5%", "shaped-base", "shaped-95", ">= 40 of 50 (5-run history)"),
    Pairing("shaped -10%", "shaped-base", "shaped-90", ">= 48 of 50"),
    Pairing("shaped -25%", "shaped-base", "shaped-75", "50 of 50"),
    Pairing("shaped +200us delay", "shaped-base", "shaped-netem", ""),
    Pairing("loopback A/A", "loop-base", "loop-base", "report (<= 1 of 50 with --confirm 3)"),
    Pairing("loopback 2x", "loop-base", "loop-2x", "report (>= 45 of 50 with --confirm 3)"),
)
HISTORY_RUNS = 5
"""Runs of the baseline's condition the history gate gets besides the baseline."""
STEPS = (("-10%", "shaped-90"), ("-25%", "shaped-75"))
"""The steps the change-point series get, after shaped-base runs."""
SERIES_RUNS = 30
EDGE = 3
"""A step's first index is drawn from [EDGE, series - EDGE]: [3, 27] in 30 runs."""
LOCATED = 1
"""A change found within this many runs of the step's index is the step."""


class PoolView:
    """The pool as `evaluate` reads it: its manifest, each condition's runs, each run loaded
    once (a run is read, never written)."""

    def __init__(self, pool: Path) -> None:
        if not (pool / MANIFEST).exists():
            raise SystemExit(f"evaluate: no {MANIFEST} in {pool} (run `collect` first)")
        self.path = pool
        self.manifest = Manifest.read(pool)
        self.runs = {
            name: sorted((r for r in self.manifest.runs if r.condition == name), key=_index)
            for name in CONDITIONS
        }
        self._loaded: dict[str, Run] = {}
        self.clock: dict[str, float] = {"loading runs": 0.0, "the pairwise gate": 0.0}
        """Seconds spent in each part of the evaluation (`timed`)."""

    @contextlib.contextmanager
    def timed(self, part: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.clock[part] = self.clock.get(part, 0.0) + time.monotonic() - t0

    def load(self, run: PoolRun) -> Run:
        from commbench.results.runs import load_run

        if run.path not in self._loaded:
            with self.timed("loading runs"):
                self._loaded[run.path] = load_run(self.path / run.path)
        return self._loaded[run.path]

    def values(self, run: PoolRun) -> dict[PointKey, float]:
        """Each measured point's busbw from its samples: what the history judges a run by."""
        out = {}
        for row in self.load(run).rows:
            busbw = row.sample_busbw_gbps() if row.samples_us else None
            if busbw is not None and busbw > 0:
                out[row.key] = busbw
        return out


def _index(run: PoolRun) -> int:
    return run.index


def _start(run: PoolRun) -> float:
    return run.started


@dataclass(kw_only=True, slots=True)
class Tally:
    """One detector on one pairing: how many pairs it failed, over which runs."""

    pairs: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    """Pairs the detector refused (UserError): counted apart, never as passed or failed."""
    runs: set[str] = field(default_factory=set)
    verdicts: dict[str, int] = field(default_factory=dict)
    """How often each verdict came, with its counts of points blurred into a shape."""
    failing: dict[str, list[float]] = field(default_factory=dict)
    """Each point the detector failed (op and size), with its busbw ratio in each pair."""
    available: bool | None = None
    """Whether the detector answered; None while it was never asked (too few runs)."""

    def rate(self) -> str:
        if self.available is False:
            return "not available"
        return f"{self.failed / self.pairs:.2f}" if self.pairs else "too few runs"


def draw_pairs(
    rng: random.Random, base: list[PoolRun], new: list[PoolRun], count: int, same: bool
) -> list[tuple[PoolRun, PoolRun]]:
    """`count` distinct pairs (fewer where the pool holds fewer): two different runs of one
    condition in a random order (A/A), or a base run and a new one (A/B)."""
    if same:
        combos = [(a, b) for i, a in enumerate(base) for b in base[i + 1 :]]
        drawn = rng.sample(combos, min(count, len(combos)))
        return [(b, a) if rng.random() < 0.5 else (a, b) for a, b in drawn]
    combos = [(a, b) for a in base for b in new]
    return rng.sample(combos, min(count, len(combos)))


def pairwise_gate(baseline: Run, new: Run) -> Comparison:
    """The gate as `commbench compare BASE NEW` runs it: default settings."""
    from commbench.compare import GateSettings, compare_runs

    return compare_runs(baseline, new, GateSettings())


CONFIRM = 3
"""Confirmations the `--confirm` detectors get: other runs of the new run's condition."""


def confirmed(first: Comparison, again: list[Comparison]) -> Comparison:
    """`run --confirm`'s rule (`commbench.suites.confirm.confirm`) on a comparison and its
    confirmations' comparisons."""
    from commbench.suites.confirm import confirm

    return confirm(first, again)


class Histories:
    """A real history (`commbench.history`, SQLite in a temporary directory, removed at the
    end) of each base condition's runs, added in the order they were made; a run is judged
    as `run --gate --history` judges it: against the `HISTORY_RUNS` runs of its machine's
    series that started before it (`History.reference`), with `compare_history`."""

    def __init__(self, view: PoolView, bases: list[str]) -> None:
        import tempfile

        from commbench.history.store import History

        self._tmp = tempfile.TemporaryDirectory(prefix="gate-power-history-")
        self.dbs: dict[str, Path] = {}
        for base in bases:
            db = Path(self._tmp.name) / f"{base}.db"
            runs = [view.load(r) for r in sorted(view.runs[base], key=lambda r: r.started)]
            with History.open(db, write=True) as store:
                store.add([(run, None, None) for run in runs])
            self.dbs[base] = db

    def reference(self, base: str, run: Run) -> tuple[dict[PointKey, list[float]], list[str]]:
        from commbench.history.store import History

        with History.open(self.dbs[base]) as store:
            found = store.reference(run, limit=HISTORY_RUNS)
        return found.medians_us, found.run_ids

    def close(self) -> None:
        self._tmp.cleanup()


def history_gate(
    histories: Histories, base: str, new: Run
) -> tuple[Comparison, dict[PointKey, list[float]], list[str]] | None:
    """The gate against a 5-run history: None where fewer than `HISTORY_RUNS` runs of the
    base condition started before `new` (the history is too short to judge against)."""
    from commbench.compare import compare_history

    history, runs = histories.reference(base, new)
    if len(runs) < HISTORY_RUNS:
        return None
    return compare_history(new, history, runs), history, runs


def _shape(verdict: str) -> str:
    """A verdict with its numbers replaced, so that like verdicts are counted together."""
    return re.sub(r"\d+", "N", verdict)


def _count(t: Tally, comparison: Comparison, runs: set[str]) -> None:
    t.available = True
    t.pairs += 1
    t.failed += comparison.exit_code != 0
    t.runs |= runs
    for point in comparison.regressions:
        ratio = point.ratio if point.ratio is not None else math.nan
        t.failing.setdefault(f"{point.op} {_size(point.size_bytes)}", []).append(ratio)
    shape = _shape(comparison.verdict)
    t.verdicts[shape] = t.verdicts.get(shape, 0) + 1


DETECTORS = (
    "pairwise gate",
    f"pairwise gate, --confirm {CONFIRM}",
    "gate + 5-run history",
    f"gate + 5-run history, --confirm {CONFIRM}",
)


def judge_pairs(view: PoolView, rng: random.Random, count: int) -> dict[str, dict[str, Tally]]:
    """Every pairing through each detector. The pairwise ones judge `count` pairs; the
    history ones each run of the new condition with a history of 5 before it (at most
    `count`). A confirmation is another run of the new run's condition, judged against the
    same reference (the baseline, or the history) as the run it confirms."""
    from commbench.compare import compare_history
    from commbench.errors import UserError

    out: dict[str, dict[str, Tally]] = {d: {} for d in DETECTORS}
    histories = Histories(view, sorted({p.base for p in PAIRINGS}))
    try:
        for pairing in PAIRINGS:
            base, new = view.runs[pairing.base], view.runs[pairing.new]
            flat, flat_c, hist, hist_c = (Tally() for _ in DETECTORS)
            for a, b in draw_pairs(rng, base, new, count, pairing.same):
                try:
                    baseline, candidate = view.load(a), view.load(b)
                    comparison = pairwise_gate(baseline, candidate)
                except UserError as exc:
                    flat.errors.append(f"{a.path} vs {b.path}: {exc}")
                    continue
                _count(flat, comparison, {a.path, b.path})
                others = [r for r in new if r is not a and r is not b]
                again = rng.sample(others, min(CONFIRM, len(others)))
                if comparison.exit_code and again:
                    comparison = confirmed(
                        comparison, [pairwise_gate(baseline, view.load(r)) for r in again]
                    )
                _count(flat_c, comparison, {a.path, b.path, *(r.path for r in again)})
            candidates = list(new)
            rng.shuffle(candidates)
            judged = 0
            for b in candidates:
                if judged >= count:
                    break
                found = history_gate(histories, pairing.base, view.load(b))
                if found is None:
                    continue
                comparison, history, runs = found
                judged += 1
                _count(hist, comparison, {b.path})
                others = [r for r in new if r is not b]
                again = rng.sample(others, min(CONFIRM, len(others)))
                if comparison.exit_code and again:
                    comparison = confirmed(
                        comparison,
                        [compare_history(view.load(r), history, runs) for r in again],
                    )
                _count(hist_c, comparison, {b.path, *(r.path for r in again)})
            for detector, tally in zip(DETECTORS, (flat, flat_c, hist, hist_c), strict=True):
                out[detector][pairing.label] = tally
    finally:
        histories.close()
    return out


@dataclass(kw_only=True, slots=True)
class StepScore:
    """The change-point detector on one kind of series: `Score` (tests/change_series.py, as
    benchmarks/change_points.py scores its synthetic series) over all of them and per point."""

    total: Score
    per_point: dict[PointKey, Score] = field(default_factory=dict)
    trials: int = 0
    distances: list[int] = field(default_factory=list)
    """|nearest change - step| for each series with a change, within `LOCATED` or not."""
    steps_at: tuple[int, int] = (0, 0)
    """The range k was drawn from (narrower than [EDGE, length - EDGE] in a small pool)."""


def score_changes(
    view: PoolView, rng: random.Random, trials: int, length: int
) -> tuple[dict[str, StepScore], str | None]:
    """`trials` series per step (and without a step) of `length` real runs per point; the
    scores, or why there are none. A series' true ratio, for the interval's coverage, is the
    point's median busbw over the step's runs over its median over the base's."""
    if str(ROOT) not in sys.path:  # tests.change_series: the scoring change_points.py uses
        sys.path.insert(0, str(ROOT))
    try:
        from commbench.history.changes import detect
        from tests.change_series import Score
    except ImportError as exc:
        return {}, f"the change-point detector or its scoring is not importable: {exc}"
    base = view.runs["shaped-base"]
    conds = ("shaped-base", *(c for _, c in STEPS))
    values = {r.path: view.values(r) for c in conds for r in view.runs[c]}
    keys = sorted(set.intersection(*(set(v) for v in values.values()))) if values else []
    base_medians = _medians(view, base, keys)
    scores: dict[str, StepScore] = {}
    notes = []
    for label, cond in (*STEPS, ("none", None)):
        step = view.runs[cond] if cond else []
        truth = _medians(view, step, keys) if cond else {}
        # k runs of the base, then length - k of the step, each run once
        low, high = (
            (max(EDGE, length - len(step)), min(length - EDGE, len(base))) if cond else (0, 0)
        )
        if low > high or (cond is None and len(base) < length):
            notes.append(f"{label}: too few runs for {length}-run series")
            continue
        score = scores[label] = StepScore(total=Score(tolerance=LOCATED), steps_at=(low, high))
        for _ in range(trials):
            k = rng.randint(low, high)
            runs = (
                rng.sample(base, length)
                if cond is None
                else rng.sample(base, k) + rng.sample(step, length - k)
            )
            score.trials += 1
            for key in keys:
                with view.timed("change points (detect)"):
                    changes = detect([values[r.path][key] for r in runs])
                found = [c.index for c in changes]
                bounds = [(c.ratio_low, c.ratio_high) for c in changes]
                steps = [k] if cond else []
                ratios = [truth[key] / base_medians[key]] if cond else []
                for tally in (
                    score.total,
                    score.per_point.setdefault(key, Score(tolerance=LOCATED)),
                ):
                    tally.add(steps, found, ratios=ratios, intervals=bounds)
                if cond and found:
                    score.distances.append(min(abs(i - k) for i in found))
    return scores, "; ".join(notes) or None


def _medians(view: PoolView, runs: list[PoolRun], keys: list[PointKey]) -> dict[PointKey, float]:
    points = _point_values(view, runs)
    return {key: statistics.median(points[key]) for key in keys if points.get(key)}


def _robust_cv(values: list[float]) -> float:
    """The spread of values' logs, MAD-based (about the CV for small spreads)."""
    logs = [math.log(v) for v in values]
    med = statistics.median(logs)
    return 1.4826 * statistics.median(abs(x - med) for x in logs)


def _band(run: Run) -> tuple[float, float, float]:
    """The baseline noise band the issue quotes: the 5th and 95th percentiles of every
    iteration over its point's median, pooled over the run's points; and the share of
    iterations at 2x their point's median or more."""
    ratios = sorted(
        s / row.time_us
        for row in run.rows
        if row.samples_us and row.time_us > 0
        for s in row.samples_us
    )
    if not ratios:
        return math.nan, math.nan, math.nan
    q = statistics.quantiles(ratios, n=20, method="inclusive")
    return q[0], q[-1], sum(r >= 2 for r in ratios) / len(ratios)


def _fmt_range(values: list[float], fmt: str = ".2f") -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def pool_section(view: PoolView) -> list[str]:
    """What the pool holds, and the truth it measured: each condition's runs, its busbw per
    point against its base's, and how far a point's busbw moves between runs."""
    m = view.manifest
    span = 0.0
    if m.runs:
        span = max(r.started + r.seconds for r in m.runs) - min(r.started for r in m.runs)
    lines = [
        "## The pool",
        "",
        f"`{view.path}`: {len(m.runs)} runs, {len(m.failures)} failed and kept out; made by "
        f"`{shlex.join(m.command)}` at commit {m.commit[:12]}; its runs span "
        f"{span / 60:.0f} min from the first start to the last end.",
        "",
        "| condition | runs | failed | run s, median | load 1-min at start | busbw / its base's, per point: median (min-max) | between-run spread per point: median (max) | setting |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in CONDITIONS:
        runs = view.runs[name]
        failed = sum(f.condition == name for f in m.failures)
        if not runs:
            lines.append(f"| {name} | 0 | {failed} | - | - | - | - | - |")
            continue
        base_name = "loop-base" if name.startswith("loop") else "shaped-base"
        per_point = _point_values(view, runs)
        base_points = _point_values(view, view.runs[base_name])
        ratios = [
            statistics.median(v) / statistics.median(base_points[k])
            for k, v in per_point.items()
            if base_points.get(k)
        ]
        spreads = [_robust_cv(v) for v in per_point.values() if len(v) >= 3]
        spread = f"{statistics.median(spreads):.3f} ({max(spreads):.3f})" if spreads else "-"
        seconds = statistics.median(r.seconds for r in runs)
        loads = [r.load_before[0] for r in runs]
        setting = runs[0].setting.split(" [")[0]
        lines.append(
            f"| {name} | {len(runs)} | {failed} | {seconds:.1f} | {min(loads):.1f}-{max(loads):.1f} "
            f"| {_fmt_range(ratios)} | {spread} | {setting} |"
        )
    lines += [
        "",
        "Between-run spread: the MAD of log busbw over the condition's runs x 1.4826 (about the "
        "CV), per point; busbw is each point's from its samples (`sample_busbw_gbps`).",
    ]
    if m.failures:
        lines += ["", "Failed runs (kept out of the pool):", ""]
        lines += [f"- {f.condition} #{f.index}: {f.reason[:300]}" for f in m.failures]
    return lines


def _point_values(view: PoolView, runs: list[PoolRun]) -> dict[PointKey, list[float]]:
    out: dict[PointKey, list[float]] = {}
    for r in runs:
        for key, v in view.values(r).items():
            out.setdefault(key, []).append(v)
    return out


def detectors_section(tallies: dict[str, dict[str, Tally]], count: int) -> list[str]:
    lines = [
        "## Detectors",
        "",
        "| detector | pairs | A/B or A/A | pairs judged | distinct runs | failed | rate | issue's target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for detector, by_pairing in tallies.items():
        for pairing in PAIRINGS:
            t = by_pairing[pairing.label]
            kind = "A/A (false failures)" if pairing.same else "A/B (power)"
            if t.available is False:
                lines.append(
                    f"| {detector} | {pairing.label} | {kind} | - | - | - | not available | "
                    f"{pairing.target} |"
                )
                continue
            lines.append(
                f"| {detector} | {pairing.label} | {kind} | {t.pairs} | {len(t.runs)} | "
                f"{t.failed} | {t.rate()} | {pairing.target} |"
            )
    lines += [
        "",
        f"Pairs: {count} distinct pairs per row where the pool allows, drawn with a fixed seed, "
        "so a run is in several pairs (the distinct runs column); an A/A pair is two different "
        "runs of one condition in a random order. The history gate judges each run of the new "
        "condition (at most "
        f"{count}) against a real history (`commbench.history`, SQLite) of the base "
        f"condition's runs: the {HISTORY_RUNS} that started before it (`History.reference`), "
        "as `run --gate --history` does (`compare_history`); its pairs judged are those runs. "
        f"`--confirm {CONFIRM}`: a failed comparison's worse points judged again in "
        f"{CONFIRM} other runs of the new run's condition against the same reference; a "
        "point stays worse when it is worse in every one of them (`commbench.suites.confirm`).",
    ]
    errors = [e for by in tallies.values() for t in by.values() for e in t.errors]
    if errors:
        lines += ["", f"Pairs the gate refused ({len(errors)}):", ""]
        lines += [f"- {e[:300]}" for e in errors[:10]]
    return lines


STEP_SIZES = {"-10%": 0.10, "-25%": 0.25}


def _quiet_score(
    s: StepScore, spreads: dict[PointKey, float], step: float
) -> tuple[int, float, float]:
    """Precision and recall over the points whose own between-run spread (on shaped-base) is
    under a third of the step: a step smaller than three spreads of its series is not one a
    30-run series can show. Returns (points, precision, recall)."""
    quiet = [k for k in s.per_point if spreads.get(k, math.inf) < step / 3]
    hits = sum(s.per_point[k].hits for k in quiet)
    found = sum(s.per_point[k].found for k in quiet)
    steps = sum(s.per_point[k].steps for k in quiet)
    return len(quiet), (hits / found if found else 1.0), (hits / steps if steps else math.nan)


def changes_section(
    scores: dict[str, StepScore],
    why_not: str | None,
    length: int,
    spreads: dict[PointKey, float] | None = None,
) -> list[str]:
    lines = ["## Change points (`commbench.history.changes.detect`)", ""]
    if not scores:
        return [*lines, f"Not measured: {why_not}."]
    lines += [
        "| step | trials | series | changes found | precision | recall (within +-1 run) | "
        "mean location error of a hit | nearest change: median, p90, max runs off | "
        "series with a false change | interval holds the step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, s in scores.items():
        t = s.total
        if label == "none":
            lines.append(
                f"| none | {s.trials} | {t.series} | {t.found} | - | - | - | - | "
                f"{t.alarmed} ({t.false_alarm_rate:.3f}) | - |"
            )
            continue
        d = sorted(s.distances)
        off = f"{statistics.median(d):g}, {d[int(0.9 * (len(d) - 1))]}, {d[-1]}" if d else "-"
        lines.append(
            f"| {label} | {s.trials} | {t.series} | {t.found} | {t.precision:.3f} | "
            f"{t.recall:.3f} | {_num(t.location_error)} | {off} | "
            f"{t.alarmed} ({t.false_alarm_rate:.3f}) | {_num(t.coverage)} |"
        )
    lines += [
        "",
        f"Series: {length} real runs per trial, runs 0..k-1 drawn from shaped-base and "
        f"k..{length - 1} from the step's condition (each run once), k uniform in "
        f"[{EDGE}, {length - EDGE}]; the same draw for every point, one series per point "
        f"(busbw from its samples). Scored as benchmarks/change_points.py scores its synthetic "
        f"series (`Score` in tests/change_series.py): the step takes the nearest change within "
        f"{LOCATED} run, every other change is false; the interval column is how often a hit's "
        "95% interval holds the point's measured step (its median busbw over the step's runs "
        "over its median over the base's).",
    ]
    for label, s in scores.items():
        if label == "none" or not s.per_point:
            continue
        worst = sorted(s.per_point.items(), key=lambda kv: kv[1].recall)[:3]
        shown = ", ".join(f"{_point_name(k)} {sc.recall:.2f}" for k, sc in worst)
        low, high = s.steps_at
        lines.append(
            f"- {label}: k in [{low}, {high}]; the points found least often (recall): {shown}"
        )
        if spreads and label in STEP_SIZES:
            n, precision, recall = _quiet_score(s, spreads, STEP_SIZES[label])
            lines.append(
                f"  - over the {n} of {len(s.per_point)} points whose own between-run spread "
                f"is under a third of the step: precision {precision:.3f}, recall {recall:.3f}"
            )
    noisy = (
        sorted(scores["none"].per_point.items(), key=lambda kv: -kv[1].alarmed)[:3]
        if "none" in scores
        else []
    )
    if noisy:
        shown = ", ".join(f"{_point_name(k)} {sc.alarmed}/{sc.series}" for k, sc in noisy)
        lines.append(f"- none: the points with most false changes: {shown}")
    if why_not:
        lines.append(f"- not measured: {why_not}")
    return lines


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _point_name(key: PointKey) -> str:
    from commbench.compare import KEY_FIELDS

    named: dict[str, Any] = dict(zip(KEY_FIELDS, key))
    return f"{named['op']} {_size(int(named['size_bytes']))}"


def _size(n: int) -> str:
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def checks_section(view: PoolView, tallies: dict[str, dict[str, Tally]]) -> list[str]:
    """The issue's own checks, on the pool: the -25% pairs and the baselines' noise."""
    from commbench.compare import noise_index

    lines = ["## The issue's checks, with the gate as it is", ""]
    t = tallies["pairwise gate"]["shaped -25%"]
    if t.pairs:
        lines.append(
            f"- shaped-base -> shaped-75 (the issue saw `PASS with warnings: 13 of 15 points too "
            f"noisy to judge`): {t.failed} of {t.pairs} pairs fail. Verdicts:"
        )
        lines += [f"  - {n} x `{v}`" for v, n in sorted(t.verdicts.items(), key=lambda kv: -kv[1])]
    for name in ("shaped-base", "loop-base"):
        runs = view.runs[name]
        if not runs:
            continue
        bands = [_band(view.load(r)) for r in runs]
        noise = [x for r in runs if (x := noise_index(view.load(r).rows)) is not None]
        lines.append(
            f"- {name} as a baseline ({len(runs)} runs), median (min-max) over its runs: "
            f"iteration noise band (5th-95th percentile of iterations / their point's median, "
            f"pooled) {_fmt_range([b[0] for b in bands])} to {_fmt_range([b[1] for b in bands])}; "
            f"iterations at 2x their median or more {_fmt_range([b[2] for b in bands], '.3f')}; "
            f"the gate's noise index (median robust spread of iterations) {_fmt_range(noise, '.3f')}."
        )
    for pairing in PAIRINGS:
        t = tallies["pairwise gate"][pairing.label]
        if t.pairs and pairing.label != "shaped -25%":
            common = sorted(t.verdicts.items(), key=lambda kv: -kv[1])[:3]
            shown = "; ".join(f"{n} x `{v}`" for v, n in common)
            lines.append(f"- {pairing.label}: {shown}")
        if t.failing and pairing.same:
            often = sorted(t.failing.items(), key=lambda kv: -len(kv[1]))[:6]
            shown = ", ".join(
                f"{name} {len(r)} ({_fmt_range([x for x in r if math.isfinite(x)])})"
                for name, r in often
            )
            lines.append(
                f"  - the points failed most often in its A/A pairs, with their busbw ratio "
                f"median (min-max): {shown}"
            )
    return lines


def evaluate(args: argparse.Namespace) -> int:
    started = time.monotonic()
    view = PoolView(args.pool.resolve())
    rng = random.Random(args.seed)
    tallies = judge_pairs(view, rng, args.pairs)
    scores, why_not = score_changes(view, random.Random(args.seed + 1), args.trials, args.series)
    took = time.monotonic() - started
    lines = [
        "# The gate's power, measured (benchmarks/gate_power.py)",
        "",
        *pool_section(view),
        "",
        *detectors_section(tallies, args.pairs),
        "",
        *changes_section(
            scores,
            why_not,
            args.series,
            {k: _robust_cv(v) for k, v in _point_values(view, view.runs["shaped-base"]).items()},
        ),
        "",
        *checks_section(view, tallies),
        "",
        "## Method",
        "",
        "Real `commbench collectives` runs (the console script, a torchrun launch each, 2 gloo "
        "ranks on CPU) under conditions of known truth, interleaved round-robin so that the "
        "machine's load over the collection hits each alike: loopback in a network namespace "
        "shaped by `tc tbf` (2 Gbit/s, then 5%, 10% and 25% lower, and a 200 us delay on every "
        "packet), and plain loopback, alone and in a CPU-quota cgroup. The module docstring has "
        "the details; `pool.json` each run's condition, start, duration and load average.",
        "",
        f"Evaluation took {took:.1f} s ("
        + ", ".join(f"{part} {secs:.1f} s" for part, secs in view.clock.items())
        + f"), seed {args.seed}; it starts nothing and writes nothing.",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
