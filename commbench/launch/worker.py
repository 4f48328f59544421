"""The worker torchrun starts: `python -m commbench.launch.worker RUN_DIR`.

Every rank runs the same sweep. Per point: warm up, agree on the iteration count (the
maximum estimate over ranks, so every rank calls the op equally often), barrier, time each
iteration, check the result, then reduce the samples to their per-iteration maximum over
ranks (the slowest rank finishes the collective) and let rank 0 journal the row. After the
timed loop, never inside it, one more small reduction brings rank 0 each member's own median,
95th percentile and slack (`RankTimes`): which rank the others waited for.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from commbench.collectives import pattern
from commbench.collectives.ops import TORCH_DTYPES, Collective, Group
from commbench.collectives.registry import collective
from commbench.collectives.settings import CollectivesSettings, plan_points
from commbench.collectives.specs import plan_size
from commbench.launch.gather import gather_ranks, gather_sparse
from commbench.launch.heartbeat import Heartbeat
from commbench.launch.protocol import (
    EVENTS_FILE,
    LAUNCHER_PID_ENV,
    RESULTS_AT_FILE,
    STARTUP_TIMEOUT,
    Done,
    Failed,
    Health,
    HealthGathered,
    Journal,
    ResultsAt,
    heartbeat_path,
)
from commbench.launch.ranks import COMPACT_KEY, RankTable, rank_record
from commbench.results.schema import (
    CHECK_FAILED,
    CHECK_NA,
    CHECK_OK,
    CHECK_SKIPPED,
    MAX_ISSUE_RATE,
    RankTimes,
    ResultRow,
)
from commbench.results.store import RunDir, atomic_write
from commbench.stats import quantile
from commbench.timing import (
    Timed,
    device_prequeue,
    host_waits,
    time_cpu,
    time_cuda,
    time_cuda_graph,
)

# Adaptive warm-up: about this much time, within [2, 20] iterations. The first iteration pays
# for connection setup (NCCL/gloo connect lazily on first use), so the count is planned from the
# second one's time, which is the device's pace.
WARMUP_TIME_US = 50_000.0
WARMUP_MIN, WARMUP_MAX = 2, 20
# The run's first point also brings the device out of idle: clocks ramp and lazy state fills
# only under sustained load. Timed after a few calls only, a 1 KiB all_reduce on an idle H100
# read 86 us where the same run's later points read 25 us (results/reference/nvidia-h100-80gb-hbm3,
# 2026-11-26). So it warms for about this long, up to FIRST_WARMUP_MAX iterations.
FIRST_WARMUP_TIME_US = 250_000.0
FIRST_WARMUP_MAX = 20_000
PROFILE_ITERS = 3
PROFILE_DIR = "profile"


def plan_warmup(pace_us: float, *, first_point: bool = False) -> int:
    """Total warm-up iterations given one warm iteration's time (max over ranks): about
    WARMUP_TIME_US of them, or FIRST_WARMUP_TIME_US on the run's first point."""
    budget, most = (
        (FIRST_WARMUP_TIME_US, FIRST_WARMUP_MAX) if first_point else (WARMUP_TIME_US, WARMUP_MAX)
    )
    if pace_us <= 0:
        return most
    return max(WARMUP_MIN, min(most, math.ceil(budget / pace_us)))


def plan_iterations(settings: CollectivesSettings, estimate_us: float) -> int:
    """Timed iterations for a point: `--iters`, else enough to fill `min_time`."""
    if settings.timing.iters is not None:
        return settings.timing.iters
    if estimate_us <= 0:
        return settings.timing.max_iters
    wanted = math.ceil(settings.timing.min_time * 1e6 / estimate_us)
    return max(settings.timing.min_iters, min(settings.timing.max_iters, wanted))


def own_address() -> str | None:
    """The IPv4 address this rank's peers reach it at, as gloo picks it: the interface
    GLOO_SOCKET_IFNAME names, else what the host name resolves to. A peer's error names the
    address it lost ("Connection reset by peer [10.0.0.4]"): this turns it back into a host."""
    ifname = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0].strip()
    try:
        if ifname:
            import fcntl
            import struct

            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                packed = struct.pack("256s", ifname.encode()[:15])
                return socket.inet_ntoa(
                    fcntl.ioctl(s.fileno(), 0x8915, packed)[20:24]
                )  # SIOCGIFADDR
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class Measured:
    """One member rank's point: its samples (the timer's `Timed`), warm-up, check, note."""

    samples: list[float]
    warmup: int
    ok: bool
    note: str
    timed: Timed

    @classmethod
    def nothing(cls) -> Measured:
        """A rank outside the point's group: nothing timed, nothing failed."""
        return cls([], 0, True, "", Timed())


@dataclass(frozen=True, slots=True)
class Exchanged:
    """A point as every rank agreed it (`Worker._exchange`)."""

    samples: list[float]
    """Per iteration, the maximum over ranks."""
    failed: list[int]
    """Ranks whose check failed."""
    issue_rate: float | None
    """Ops per second the slowest rank's host issued (`Timed.issue_rate`)."""
    uncovered: int
    """The most batches any rank's hold did not cover (`Timed.uncovered`)..."""
    batches: int
    """... of this many."""

    @property
    def behind(self) -> str:
        """The row's note where a hold fell short: those batches' samples may hold host time."""
        if not self.uncovered:
            return ""
        return (
            f"the host fell behind the device in {self.uncovered} of {self.batches} batches "
            "(their samples may hold host time)"
        )


class Worker:
    def __init__(self, run_dir: Path, settings: CollectivesSettings) -> None:
        self.run_dir = run_dir
        self.s = settings
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.node = int(os.environ.get("GROUP_RANK", "0"))
        """This node's rank in the job (torchrun's group rank)."""
        self.host = socket.gethostname()
        launcher = os.environ.get(LAUNCHER_PID_ENV)
        self.hb = Heartbeat(
            heartbeat_path(run_dir, self.rank),
            self.rank,
            self.host,
            self.local_rank,
            launcher_pid=int(launcher) if launcher else None,
            node=self.node,
        )
        if settings.placement.device == "cuda":
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        self.journal: Journal | None = None
        pattern.progress = self.hb.tick
        self.profile_parts: list[Path] = []
        self.warmed = False
        """Whether a point of this run has had the device's first, longer warm-up."""
        self.splits = settings.splits
        """How the ops that take a skew split (`--skew`, `--seed`)."""

    # -- setup ------------------------------------------------------------------------------

    def init(self) -> None:
        # The backend's own timeout is set well past commbench's watchdog, so a hang is
        # diagnosed from the heartbeats (which rank stopped, where) before gloo or NCCL
        # abort every rank with a generic timeout.
        backstop = 2 * max(self.s.timing.timeout, STARTUP_TIMEOUT) + 30
        kwargs: dict[str, Any] = {"timeout": timedelta(seconds=backstop)}
        if self.device.type == "cuda":
            kwargs["device_id"] = self.device
        dist.init_process_group(self.s.placement.backend, **kwargs)
        members = self.s.ranks if self.s.ranks else list(range(self.world))
        handle = dist.new_group(members) if self.s.ranks else None  # every rank must call new_group
        self.group = None
        # the group's order as every rank (rank 0 too, member or not) can know it: new_group
        # sorts its ranks
        self.members = sorted(members)
        if self.rank in members:
            # Group order and this rank's place in it come from the process group itself:
            # new_group sorts its ranks, so `--ranks 2,0` is the group [0, 2], whatever the
            # order typed.
            order = dist.get_process_group_ranks(handle) if handle is not None else members
            self.group = Group(handle=handle, ranks=list(order), rank=dist.get_rank(handle))
        self.group_size = len(members)
        # where object collectives run: gloo's on the CPU, NCCL's on this rank's GPU
        self.object_device = torch.device("cpu") if dist.get_backend() == "gloo" else self.device
        info = rank_record(
            rank=self.rank,
            local_rank=self.local_rank,
            host=self.host,
            node=self.node,
            pid=os.getpid(),
            address=own_address(),
            device=str(self.device),
            device_name=torch.cuda.get_device_name(self.device)
            if self.device.type == "cuda"
            else "cpu",
        )
        self.ranks_info: RankTable = gather_ranks(info, self.world, self.object_device)
        """Every rank's host, node and device, in global rank order (as dicts, read as a
        sequence; held as columns, so 131,072 ranks take megabytes, not 55 MB)."""
        self.tell_where_results_are()
        self.health_before = self.gather_health(nics=True)
        if self.rank == 0:
            self.journal = Journal(self.run_dir / EVENTS_FILE)
            self.journal.write({"type": "context", **self._context(self.ranks_info)})
            self.journal_health("before", self.health_before)

    def tell_where_results_are(self) -> None:
        """On a multi-node run, global rank 0 sends its run directory to every rank (a world
        collective), and local rank 0 of every other node writes it, with rank 0's node and
        host, for its launcher (`ResultsAt`): that node's run.json then says where the rows
        are, whichever node the rendezvous made group rank 0."""
        writer = self.ranks_info[0]
        if self.ranks_info.nnodes < 2:
            return
        where: list[Any] = [str(self.run_dir.resolve()) if self.rank == 0 else None]
        dist.broadcast_object_list(where, src=0)
        if self.local_rank != 0 or self.node == writer["node"]:
            return
        at = ResultsAt(node=writer["node"], host=str(writer["host"]), run_dir=str(where[0]))
        atomic_write(self.run_dir / RESULTS_AT_FILE, at.to_json())

    def gather_health(self, *, nics: bool = False) -> list[Health]:
        """On a multi-node run, every node's link health snapshot, taken by its local rank 0
        and gathered to global rank 0 only, the one process that writes them (a world
        collective: every rank calls it, in the same place; the others send nothing and get
        nothing back, and rank 0 holds the snapshots and a bounded buffer, not a slot per
        rank: `gather.gather_sparse`). Each launcher snapshots its own node; this is how the
        record's writer learns the others'.
        Empty on one node, where the launcher's own snapshots say it all, and on every rank
        but 0. Taking one never raises (a part it cannot read is named in the snapshot's
        errors). With `nics`, each node sends its NICs too: the network bound is the slowest
        node's."""
        table = self.ranks_info
        if table.nnodes < 2:
            return []
        own = None
        if self.local_rank == 0:
            from commbench.health.capture import take

            own = Health(
                phase="before" if nics else "after",
                node=self.node,
                host=self.host,
                snapshot=take().to_dict(),
                nics=_own_nics() if nics else None,
            ).to_json()
        leaders = [r for r, local in enumerate(table.local_rank) if local == 0]
        gathered = gather_sparse(own, leaders, self.rank, self.object_device, dst=0)
        if gathered is None:
            return []
        return [Health.from_json(g) for g in gathered]

    def journal_health(self, phase: str, nodes: list[Health]) -> None:
        """Journal the other nodes' snapshots (`phase` before or after) for this node's
        launcher, which adds them to the record as `context.health.nodes`."""
        if self.journal is None or not nodes:
            return
        self.journal.write(
            HealthGathered(
                phase=phase,
                node=self.node,
                nodes=tuple(n for n in nodes if n.node != self.node),
            )
        )

    def _context(self, ranks: RankTable) -> dict[str, Any]:
        """The journal's context line (less its type): versions, world and the rank table,
        compact (`ranks.context_ranks` reads it back into run.json's `ranks`)."""
        nccl = None
        if torch.cuda.is_available():
            try:
                nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
            except Exception:  # NCCL absent from this build
                nccl = None
        return {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": nccl,
            "backend": self.s.placement.backend,
            "device": self.s.placement.device,
            "world_size": self.world,
            "group_size": self.group_size,
            "nnodes": ranks.nnodes,
            COMPACT_KEY: ranks.to_compact(),
        }

    # -- measuring -------------------------------------------------------------------------

    def _agree_max(self, values: list[float], group: Any) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return t.tolist()

    def _timer(
        self, call: Any, iters: int, *, hold: bool = True, lead: Callable[[], None] | None = None
    ) -> Timed:
        """`call` timed `iters` times; on CUDA behind holds (`timing.PreQueue`) and `lead`
        unless `hold` is False (an op that makes the host wait for the device)."""
        if iters <= 0:
            return Timed()

        def tick(i: int) -> None:
            self.hb.iteration = i

        if self.device.type == "cuda":
            prequeue = device_prequeue(self.device) if hold else None
            return time_cuda(call, iters, tick, prequeue=prequeue, lead=lead)
        return time_cpu(call, iters, tick)

    def _lead(self, group: Any) -> Callable[[], None]:
        """The untimed op after each hold: a one-element all_reduce over the point's group,
        which ends on every member only once every member's hold has (an op's own first call
        would not: a broadcast's root, a ring's sender, can finish before a peer starts)."""
        one = torch.zeros(1, dtype=torch.float32, device=self.device)
        return lambda: dist.all_reduce(one, group=group)

    def _measure(
        self,
        entry: Collective,
        count: int,
        dtype: str,
        in_place: bool,
        reduce_op: str | None = None,
    ) -> Measured:
        """Time one point on this member rank, with `reduce_op` (a point's, `--reduce-op all`
        giving several) or else the settings'."""
        assert self.group is not None
        grp, s, spec = self.group, self.s, entry.spec
        reduce_op = s.reduce_op if reduce_op is None else reduce_op
        self.hb.phase = "setup"  # allocating a large buffer takes a while: a phase of its own
        bufs = entry.buffers(count, TORCH_DTYPES[dtype], self.device, grp, in_place)
        call = entry.call(bufs, grp, reduce_op, s.async_op)
        note = ""
        waits = host_waits(spec.op, s.placement.backend) if self.device.type == "cuda" else ""
        lead = self._lead(grp.handle) if self.device.type == "cuda" else None

        def timer(n: int) -> Timed:
            return self._timer(call, n, hold=not waits, lead=lead)

        self.hb.phase = "warmup"
        if s.timing.warmup is None:
            first = timer(WARMUP_MIN).samples
            # a rank's first point warms longer; the group agrees on whether this is one, or
            # a rank that has already measured (another row of a replay) stops short of its
            # peer and the next collective gets its message
            pace, cold = self._agree_max([first[-1], 0.0 if self.warmed else 1.0], grp.handle)
            warmup = plan_warmup(pace, first_point=cold > 0)
            rest = timer(warmup - WARMUP_MIN).samples or first[-1:]
            self.warmed = True
        else:
            warmup = s.timing.warmup
            rest = timer(warmup).samples
            if s.timing.iters is None and not rest:
                rest = timer(1).samples  # the count needs an estimate
                warmup, note = 1, "one warm-up iteration to size the count"
        estimate = statistics.median(rest) if rest else 0.0
        (estimate,) = self._agree_max([estimate], grp.handle)
        iters = plan_iterations(s, estimate)
        dist.barrier(group=grp.handle)
        self.hb.phase = "timed"
        if s.graph and not spec.graph_capturable:
            timed = timer(iters)
            note = f"{spec.name} cannot be captured in a CUDA graph: timed eagerly"
        elif s.graph:
            timed, per_graph = time_cuda_graph(
                call,
                iters,
                lambda i: setattr(self.hb, "iteration", i),
                min_samples=s.timing.min_iters,
                prequeue=None if waits else device_prequeue(self.device),
                lead=lead,
            )
            note = f"CUDA graph: {per_graph} ops per replay, samples are replay time / {per_graph}"
        else:
            timed = timer(iters)
        if waits:
            note = "; ".join(x for x in (note, f"timed without a hold: {waits}") if x)
        ok = True
        if s.check:
            self.hb.phase = "check"
            ok = entry.check(bufs, call, grp, reduce_op)
        if s.profile:
            self.hb.phase = "profile"
            self._profile(call, f"{spec.name} {count} x {dtype}")
        return Measured(timed.samples, warmup, ok, note, timed)

    def _profile(self, call: Any, label: str) -> None:
        """Trace PROFILE_ITERS untimed iterations; traces are merged per rank at the end."""
        from torch.profiler import ProfilerActivity, profile, record_function

        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as prof:
            with record_function(f"commbench: {label}"):
                for _ in range(PROFILE_ITERS):
                    call()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        part = self.run_dir / PROFILE_DIR / f".rank{self.rank}.part{len(self.profile_parts)}.json"
        part.parent.mkdir(exist_ok=True)
        prof.export_chrome_trace(str(part))
        self.profile_parts.append(part)

    def merge_profile(self) -> None:
        """One Chrome trace per rank: the parts' events in one file (chrome://tracing, Perfetto)."""
        if not self.profile_parts:
            return
        events: list[Any] = []
        for part in self.profile_parts:
            match json.loads(part.read_text()):  # torch.profiler's Chrome trace
                case {"traceEvents": list(found)}:
                    events.extend(found)
            part.unlink()
        out = self.run_dir / PROFILE_DIR / f"rank{self.rank}.json"
        out.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))

    def _exchange(self, own: Measured) -> Exchanged:
        """Every rank (members and waiting ranks alike) joins two small world reductions:
        the sample count, then per-iteration max over ranks, a failure flag per rank, and
        the slowest host's issue time and most uncovered batches (`Timed`)."""
        self.hb.phase = "exchange"
        samples, timed = own.samples, own.timed
        (n,) = self._agree_max([float(len(samples))], None)
        at = int(n) + self.world  # the issue time's slot, the uncovered batches', the batches'
        buf = torch.zeros(at + 3, dtype=torch.float64, device=self.device)
        if samples:
            buf[: len(samples)] = torch.tensor(samples, dtype=torch.float64)
        if not own.ok:
            buf[int(n) + self.rank] = 1.0
        issue = timed.issue_us if math.isfinite(timed.issue_us) else -1.0
        buf[at : at + 3] = torch.tensor(
            [issue, float(timed.uncovered), float(timed.batches)], dtype=torch.float64
        )
        dist.all_reduce(buf, op=dist.ReduceOp.MAX)
        values = buf.tolist()
        failed = [r for r in range(self.world) if values[int(n) + r] > 0]
        rate = Timed(issue_us=values[at]).issue_rate  # the slowest host's; -1: none timed
        return Exchanged(
            samples=values[: int(n)],
            failed=failed,
            # a rate past any host's (a clock that did not move) is none, as a file holds it
            issue_rate=rate if rate is not None and rate <= MAX_ISSUE_RATE else None,
            uncovered=int(values[at + 1]),
            batches=int(values[at + 2]),  # a rank outside the group timed none
        )

    def _rank_times(self, own: list[float], maxima: list[float]) -> RankTimes | None:
        """Each member's median, p95 and median slack (max over ranks - own time, per
        iteration), brought to rank 0 by one world reduction of a world x 3 buffer in which
        every rank fills its own row; a rank without samples (outside a `--ranks` subgroup)
        leaves -1 there and gets no entry. Rank 0 gets the record, the others None."""
        buf = torch.full((self.world, 3), -1.0, dtype=torch.float64, device=self.device)
        if own:
            # maxima are own's very floats where this rank was slowest: each slack is exactly
            # 0 there and > 0 elsewhere, never negative
            slack = sorted(m - t for m, t in zip(maxima[: len(own)], own, strict=True))
            ordered = sorted(own)
            mine = [quantile(ordered, 0.5), quantile(ordered, 0.95), quantile(slack, 0.5)]
            buf[self.rank] = torch.tensor(mine, dtype=torch.float64)
        dist.all_reduce(buf, op=dist.ReduceOp.MAX)
        if self.rank != 0:
            return None
        values = buf.tolist()
        ranks = [r for r in self.members if values[r][0] >= 0]
        if not ranks:
            return None
        return RankTimes(
            ranks=ranks,
            median_us=[values[r][0] for r in ranks],
            p95_us=[values[r][1] for r in ranks],
            wait_us=[values[r][2] for r in ranks],
        )

    def run(self) -> None:
        s = self.s
        for index, point in enumerate(plan_points(s, self.group_size)):
            self.hb.point, self.hb.iteration = index, 0
            entry = collective(point.op, point.strategy).for_skew(self.splits)
            spec = entry.spec
            plan = plan_size(spec.op, point.requested_bytes, point.dtype, self.group_size)
            common: dict[str, Any] = {
                "op": spec.op,
                "strategy": spec.strategy,
                "dtype": point.dtype,
                "reduce_op": point.reduce_op if spec.reduces else "",
                "world_size": self.group_size,
                "size_bytes": plan.size_bytes,
                "count": plan.count,
                # torch's all_reduce, broadcast and reduce write into their input: in-place in
                # nccl-tests' terms, so they join nccl-tests' in-place column in `compare`
                "in_place": point.in_place,
                "requested_bytes": plan.requested_bytes,
                "skew": self.splits.label if spec.skewed else "",
            }
            too_few = spec.too_few_ranks(self.group_size)
            if too_few:
                row = ResultRow.not_run(check=CHECK_SKIPPED, note=too_few, **common)
                self._emit(index, row, [])
                continue
            own = Measured.nothing()
            if self.group is not None:
                own = self._measure(entry, plan.count, point.dtype, point.in_place, point.reduce_op)
            got = self._exchange(own)
            samples, failed = got.samples, got.failed
            ranks = self._rank_times(own.samples, samples)
            if self.rank == 0:
                if spec.latency_only:
                    check = CHECK_NA
                elif not s.check:
                    check = CHECK_SKIPPED
                else:
                    check = CHECK_FAILED if failed else CHECK_OK
                notes = "; ".join(
                    x
                    for x in (plan.note, own.note, spec.no_bandwidth(self.group_size), got.behind)
                    if x
                )
                if failed:
                    notes = "; ".join(x for x in (notes, f"wrong result on rank(s) {failed}") if x)
                # ranks that move unequal amounts: algbw from the busiest one's bytes
                ratio = self.splits.ratio(plan.count, self.group_size) if spec.skewed else None
                row = ResultRow.measured(
                    samples_us=samples,
                    busbw_factor=spec.busbw_factor(self.group_size),
                    skew_ratio=ratio,
                    check=check,
                    warmup=own.warmup,
                    note=notes,
                    ranks=ranks,
                    issue_ops_per_s=got.issue_rate,
                    **common,
                )
                self._emit(index, row, failed)
        self.finish()

    def finish(self) -> None:
        """The end every run kind shares: the profile merged, the links' health after the
        run, every rank at one barrier, then the journal's Done (the launcher's sign that
        every row is in)."""
        self.hb.phase = "finishing"
        self.merge_profile()
        self.journal_health("after", self.gather_health())
        dist.barrier()
        if self.journal is not None:
            self.journal.write(Done())

    def _emit(self, index: int, row: ResultRow, failed: list[int]) -> None:
        if self.journal is not None:
            self.journal.write(
                {"type": "row", "point": index, "row": row.to_dict(), "failed_ranks": failed}
            )

    def failed(self, exc: BaseException) -> None:
        """Say why this rank stops: in its heartbeat, and in the journal where it keeps one."""
        error = (
            f"{type(exc).__name__}: {exc}".splitlines()[0][:500] if str(exc) else type(exc).__name__
        )
        if self.journal is not None:
            with contextlib.suppress(Exception):
                self.journal.write(Failed(rank=self.rank, error=error))
        self.hb.stop(error=error)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self.hb.stop()
        if self.journal is not None:
            self.journal.close()


def _own_nics() -> list[dict[str, Any]] | None:
    """This node's NICs for the record's writer (None if sysfs could not be read at all)."""
    from commbench.topology.network import discover_nics

    try:
        return [n.to_dict() for n in discover_nics()]
    except Exception:  # the network bound then assumes this node like the writer's
        return None


def serve(worker: Worker) -> None:
    """Run a worker of any run kind to its end: a rank that fails says why (heartbeat,
    journal) before the error reaches torchrun, whose `record` writes the error file."""
    try:
        worker.init()
        worker.run()
    except BaseException as exc:
        worker.failed(exc)
        raise
    worker.close()


def run_worker(argv: list[str] | None, make: Callable[[Path, dict[str, Any]], Worker]) -> None:
    """A worker's entry point, for every run kind: its run directory from the command line,
    its settings from that directory's settings file, the worker `make` builds of them,
    served to its end."""
    args = sys.argv[1:] if argv is None else argv
    run_dir = Path(args[0])
    serve(make(run_dir, json.loads(RunDir(run_dir).settings_file.read_text())))


@record
def main(argv: list[str] | None = None) -> None:
    run_worker(argv, lambda run_dir, data: Worker(run_dir, CollectivesSettings.from_dict(data)))


if __name__ == "__main__":
    main()
