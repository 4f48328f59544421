"""The worker torchrun starts for `replay`: `python -m commbench.replay.worker RUN_DIR`.

It is the collectives worker (process group, heartbeats, context, the point's warm-up,
iteration planning, check and max over ranks: `Worker._measure`, `_exchange`,
`_rank_times`) running a trace's program (`replay.program`) instead of a sweep:

1. every rank makes the program's subgroups, in the same order;
2. rows: each (op, S, dtype, group) timed as a collectives point, on all its (disjoint)
   instances at once; rank 0 journals a row each, with its recorded `calls`;
3. sequence: each rank issues its recorded calls step by step, a world barrier before each
   step, the whole sequence `repeats + 1` times (the first a warm-up); a step's time is
   measured as the recording's was (the union of each call's [issued, completed]),
   the maximum over ranks, its median over the passes; with `pace`, each call is issued at its
   recorded offset from the step's start. The async
   rule: a call recorded async is issued async and waited at the end of its step (the trace
   does not say which later call needs its result); a call recorded sync is waited at once;
4. the bucket advisor, when asked: per cap, DDP's buckets as all-reduces issued async and
   waited at the end (DDP overlaps them with the backward), `repeats` times.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from commbench.collectives.ops import TORCH_DTYPES, Buffers, Collective, Group
from commbench.collectives.registry import collective
from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import DTYPES, SizePlan, plan_size
from commbench.completion import Completions
from commbench.launch.worker import Measured, Worker, run_worker
from commbench.ops import traced
from commbench.replay import compiled
from commbench.replay.buckets import Reducer
from commbench.replay.events import CapTimes, SequenceTimes
from commbench.replay.program import (
    WORLD,
    Issue,
    RowSpec,
    covered,
    run_dtype,
)
from commbench.replay.settings import ReplaySettings
from commbench.replay.uneven import UnevenAllToAll
from commbench.results.schema import CHECK_FAILED, CHECK_NA, CHECK_OK, CHECK_SKIPPED, ResultRow
from commbench.traces.names import P2P_OPS

ADVISOR_ROUNDS = 15
"""Rounds of the bucket advisor (each bucket list once a round) unless --iters asks more."""
POLL_S = 50e-6
"""The finest sleep of a paced step waiting for its next call's offset."""
COMPUTE_N_CPU = 64
COMPUTE_N = 1024
"""`--pace-compute`'s products: n x n float32 matrices (64 on a CPU: about 6 us a product,
so a gap ends within that of its time; 1024 on a GPU: tens of microseconds each)."""


def _root(group: Group, recorded: int | None) -> int:
    """The global rank a rooted op is issued from: the recorded root, else the group's first."""
    return group.root if recorded is None else recorded


def _issue(bufs: Buffers, group: Group, issue: Issue) -> Any:
    """Issue one traced call asynchronously, so that the async rule (the module's) decides
    when it is waited: its op's own entry issues it (`Collective.issue`: the call a sweep
    times), from the recorded root or to the recorded peer. The rows phase times the
    registry's own calls."""
    spec, _ = traced()[issue.op]
    splits = None
    if issue.in_splits is not None and issue.out_splits is not None:  # an all_to_allv
        splits = (issue.in_splits, issue.out_splits)
    peer = issue.peer if issue.op in P2P_OPS else _root(group, issue.peer)
    assert peer is not None  # the program gives every send and recv its peer
    return collective(spec.op).issue(bufs, group, peer, splits, half=issue.op)


def _p2p_run(issues: Sequence[Issue], i: int) -> list[Issue]:
    """The sends and receives of the batch `issues[i]` begins (`Issue.batch`: one
    `dist.batch_isend_irecv`); `issues[i]` alone otherwise."""
    batch = issues[i].batch
    if batch is None:
        return [issues[i]]
    run: list[Issue] = []
    for issue in issues[i:]:
        if issue.batch != batch or issue.op not in P2P_OPS or issue.peer is None:
            break
        run.append(issue)
    return run


class ReplayWorker(Worker):
    def __init__(self, run_dir: Path, settings: CollectivesSettings, r: ReplaySettings) -> None:
        super().__init__(run_dir, settings)
        self.r = r
        self.handles: list[Any] = []
        self.program: compiled.Compiled | None = None
        self.stamps = threading.Lock()
        self._operands: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._product: float | None = None
        self.completions: Completions[tuple[list[list[float]], int]] = Completions(
            self._stamped, clock=time.perf_counter_ns
        )

    # -- groups ----------------------------------------------------------------------------

    def _group(self, index: int) -> Group | None:
        """This rank's view of a program group; None when it is not a member."""
        if index == WORLD:
            return Group(handle=None, ranks=list(range(self.world)), rank=self.rank)
        assert self.program is not None
        ranks = list(self.program.groups[index])
        if self.rank not in ranks:
            return None
        return Group(handle=self.handles[index], ranks=ranks, rank=ranks.index(self.rank))

    # -- rows ------------------------------------------------------------------------------

    def _row(self, index: int, row: RowSpec) -> None:
        self.hb.point, self.hb.iteration = index, 0
        entry: Collective = collective(row.op)
        plan = plan_size(row.op, row.size_bytes, row.dtype, row.group_size)
        uneven = ""
        if row.splits is not None:  # an all_to_allv: its recorded splits, its busiest rank's size
            entry = UnevenAllToAll(row.splits)
            count = row.size_bytes // DTYPES[row.dtype]
            plan = SizePlan(
                requested_bytes=row.size_bytes, size_bytes=row.size_bytes, count=count, note=""
            )
            uneven = (
                f"all_to_allv: the recorded uneven splits; size is the mean rank's bytes, the "
                f"busiest rank's {row.size_bytes} B are {row.skew or 1:.2f} x it (algbw: the "
                "busiest rank's bytes over the time, as collectives' all_to_allv)"
            )
            if row.patterns > 1:
                uneven += f"; timed with the first of {row.patterns} splits of this size"
        spec = entry.spec
        assert self.program is not None
        found = self.program.groups.mine(row.shapes, self.rank)
        mine = None if found is None else self._group(found)
        own = Measured.nothing()
        in_place = spec.in_place == "always"
        if mine is not None:
            self.group = mine
            own = self._measure(entry, plan.count, row.dtype, in_place)
        got = self._exchange(own)
        samples, failed = got.samples, got.failed
        ranks = self._rank_times(own.samples, samples)
        if self.rank != 0:
            return
        if spec.latency_only:
            check = CHECK_NA
        elif not self.s.check:
            check = CHECK_SKIPPED
        else:
            check = CHECK_FAILED if failed else CHECK_OK
        where = "" if row.spans_world else f"{row.groups} group(s) of {row.group_size}"
        if not row.spans_world and row.timed < row.groups:
            where += f", {row.timed} timed at once"
        extra = f"traced as {row.traced_dtype}" if row.traced_dtype not in ("", row.dtype) else ""
        notes = "; ".join(x for x in (uneven, where, plan.note, own.note, extra, got.behind) if x)
        if failed:
            notes += f"; wrong result on rank(s) {failed}"
        size, count, skew = plan.size_bytes, plan.count, None
        if row.splits is not None and row.skew:  # S: the mean rank's bytes, as a sweep's
            skew = row.skew
            count = max(1, round(plan.count / skew))
            size = count * DTYPES[row.dtype]
        result = ResultRow.measured(
            op=spec.op,
            strategy="",
            dtype=row.result_dtype,
            reduce_op=self.s.reduce_op if spec.reduces else "",
            world_size=row.group_size,
            size_bytes=size,
            count=count,
            skew_ratio=skew,
            in_place=in_place,
            requested_bytes=row.size_bytes,
            samples_us=samples,
            busbw_factor=spec.busbw_factor(row.group_size),
            check=check,
            warmup=own.warmup,
            note=notes,
            ranks=ranks if ranks is not None and len(ranks.ranks) <= row.group_size else None,
            calls=row.calls,
            issue_ops_per_s=got.issue_rate,
        )
        self._emit(index, result, failed)

    # -- the sequence ----------------------------------------------------------------------

    def _buffers(self, issue: Issue, grp: Group, cache: dict[Any, Buffers]) -> Buffers:
        sums = (sum(issue.in_splits or ()), sum(issue.out_splits or ()))
        key = (issue.op, issue.size_bytes, issue.dtype, issue.group, sums)
        if key not in cache:
            dtype = TORCH_DTYPES[issue.dtype]
            count = max(1, issue.size_bytes // DTYPES[issue.dtype])
            if issue.in_splits is not None:  # an all_to_allv: this rank's own sizes
                cache[key] = Buffers(
                    inp=torch.zeros(sums[0], dtype=dtype, device=self.device),
                    out=torch.zeros(sums[1], dtype=dtype, device=self.device),
                )
            elif issue.op in P2P_OPS or traced()[issue.op][0].latency_only:  # one buffer
                buf = torch.zeros(count, dtype=dtype, device=self.device)
                cache[key] = Buffers(inp=buf, out=buf)
            else:
                count = max(grp.size, count // grp.size * grp.size)  # split ops: n chunks
                in_place = collective(issue.op).spec.in_place == "always"
                cache[key] = collective(issue.op).buffers(count, dtype, self.device, grp, in_place)
        return cache[key]

    def _sequence(self, steps: list[list[Issue]], point: int) -> None:
        """Replay this rank's steps `repeats + 1` times over, the first pass a warm-up
        (connections, buffers), and journal each step's median over the other passes, with
        the passes."""
        self.hb.point, self.hb.iteration = point, 0
        self.hb.phase = "sequence"
        # on file before the first call: a rank the backend aborts at once (a size its peers
        # disagree with) beats no more, and its last beat would name the last row instead
        self.hb.write_now()
        cache: dict[Any, Buffers] = {}
        passes: list[list[float]] = []
        spans: list[list[float]] = []
        n = len(steps)
        for p in range(self.r.repeats + 1):
            own = []
            for i, issues in enumerate(steps):
                self.hb.iteration = p * n + i
                own += self._step(issues, cache)
            both = self._agree_max(own, None) if own else []
            passes.append(both[0::2])
            spans.append(both[1::2])
        timed, spanned = (passes[1:], spans[1:]) if len(passes) > 1 else (passes, spans)
        medians = tuple(statistics.median(s[i] for s in timed) for i in range(n))
        span_medians = tuple(statistics.median(s[i] for s in spanned) for i in range(n))
        if self.journal is not None:
            event = SequenceTimes(
                step_s=medians,
                passes_s=tuple(tuple(s) for s in timed),
                span_s=span_medians,
            )
            self.journal.write(event.to_dict())

    def _step(self, issues: Sequence[Issue], cache: dict[Any, Buffers]) -> list[float]:
        """One step of this rank's calls: [the time covered by the union of each call's
        [issued, completed], the span from the step's start to its last completion]. Timed
        as the recording was (`commbench.completion`): a call waited at once ends when its
        wait returns; an async one when a thread of ours waiting it sees it complete (send
        and recv, which only their caller may wait, when the step's own wait returns). With
        `pace`, each call waits for its recorded offset from the step's start, so the span
        holds the recorded gaps."""
        dist.barrier()
        self._sync()
        if not issues:
            return [0.0, 0.0]
        origin = time.perf_counter()
        spans: list[list[float]] = []
        pending: list[tuple[Any, int]] = []
        i = 0
        while i < len(issues):
            issue = issues[i]
            if self.r.pace and issue.offset_s is not None:
                self._gap(origin + issue.offset_s, issue.busy_s)
            grp = self._group(issue.group)
            assert grp is not None  # the program maps this rank's calls to its groups
            run = _p2p_run(issues, i)
            if len(run) > 1:
                # a batch's sends and receives (batch_isend_irecv's, a pipeline's) go as
                # one batch: one NCCL group, as the job's went
                start = time.perf_counter()
                buffers = [self._buffers(r, grp, cache) for r in run]
                ops = [
                    dist.P2POp(dist.isend, b.inp, r.peer)
                    if r.op == "send"
                    else dist.P2POp(dist.irecv, b.out, r.peer)
                    for r, b in zip(run, buffers, strict=True)
                ]
                works = dist.batch_isend_irecv(ops)
                self.hb.tick()
                first = len(spans)
                for k in range(len(run)):
                    spans.append([start, math.inf])
                    # one Work a call, or one for the whole group (NCCL's coalesced)
                    pending.append((works[k] if len(works) == len(run) else works[-1], first + k))
                i += len(run)
                continue
            start = time.perf_counter()
            work = _issue(self._buffers(issue, grp, cache), grp, issue)
            self.hb.tick()  # a paced step waits between calls: each call issued is progress
            spans.append([start, math.inf])
            index = len(spans) - 1
            if issue.async_op and work is not None:
                pending.append((work, index))
                if self.device.type == "cpu" and issue.op not in P2P_OPS:
                    self.completions.watch(str(issue.group), work, (spans, index))
            else:
                if work is not None:
                    work.wait()
                self._sync()
                spans[index][1] = time.perf_counter()
            i += 1
        # no Work is trusted to say it completed (gloo's send, recv and reduce_scatter never
        # do before they are waited): each is waited, bounded by the process group's timeout
        # (--timeout), oldest first
        for work, index in pending:
            work.wait()
            waited = time.perf_counter()
            with self.stamps:
                spans[index][1] = min(spans[index][1], waited)
        del pending
        self.completions.drain()
        self._sync()
        return [covered(spans), max(end for _, end in spans) - origin]

    def _gap(self, until: float, busy_s: float = 0.0) -> None:
        """Wait for `until` (perf_counter). Idle, except: with `pace_compute`, busy computing
        on the device throughout (on the CPU the products run until then; on a GPU as many
        are queued as fill the gap, the device's rate of them measured once, so that the
        next call, queued behind them in stream order as the job's was behind its compute,
        starts when they end); else, for `busy_s` (the CPU time the job's process recorded
        in the gap, `Issue.busy_s`), computing on the host's CPU first until the process has
        used as much CPU time (its every thread's, as recorded): a CPU job's compute
        competing with its communication for the cores, a gap the job slept or waited
        through replayed idle."""
        if self.r.pace_compute and self.device.type == "cuda":
            left = until - time.perf_counter()
            if left > 0:
                a, out = self._compute_operands()
                for _ in range(int(left / self._product_s())):
                    torch.mm(a, a, out=out)
        elif self.r.pace_compute or busy_s > 0:
            # the job's process spent busy_s of CPU in the gap: so does this one, within the
            # gap (on a loaded machine, busy_s of wall clock would be less CPU than the job's)
            cpu_end = math.inf if self.r.pace_compute else time.process_time() + busy_s
            if until > time.perf_counter():
                a, out = self._compute_operands(host=True)
                while time.perf_counter() < until and time.process_time() < cpu_end:
                    torch.mm(a, a, out=out)
        while (late := until - time.perf_counter()) > 0:
            time.sleep(min(late, POLL_S))

    def _compute_operands(self, host: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The products' operands: on the device, or (`host`) on the CPU."""
        key = "cpu" if host or self.device.type != "cuda" else "device"
        if key not in self._operands:
            n = COMPUTE_N if key == "device" else COMPUTE_N_CPU
            a = torch.rand(n, n, device="cpu" if key == "cpu" else self.device)
            self._operands[key] = (a, torch.empty_like(a))
        return self._operands[key]

    def _product_s(self) -> float:
        """Seconds of one product on the GPU, timed once with events (20 of them)."""
        if self._product is None:
            a, out = self._compute_operands()
            torch.mm(a, a, out=out)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                torch.mm(a, a, out=out)
            end.record()
            end.synchronize()
            self._product = max(1e-6, start.elapsed_time(end) / 1e3 / 20)
        return self._product

    def _stamped(self, token: tuple[list[list[float]], int], ns: int | None) -> None:
        """An async call's completion, from a thread of `commbench.completion`."""
        if ns is not None:
            spans, index = token
            with self.stamps:
                spans[index][1] = min(spans[index][1], ns / 1e9)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- the bucket advisor ----------------------------------------------------------------

    def _rebucket(self, reducer: Reducer, point: int) -> None:
        """Time each distinct list of a step's all-reduces (the buckets, and DDP's local-used
        map when it finds unused parameters) once per round, the lists interleaved round by
        round (drift hits all alike), the first round a warm-up; caps that make the same
        buckets share their samples (DDP behaves the same at each)."""
        self.hb.point, self.hb.iteration = point, 0
        self.hb.phase = "rebucket"
        lists: dict[tuple[tuple[str, int], ...], list[int]] = {}
        for cap in self.r.rebucket:
            lists.setdefault(tuple(reducer.reductions(cap)), []).append(cap)
        buffers = {
            key: [
                torch.zeros(
                    max(1, nbytes // DTYPES[run_dtype(dtype)]),
                    dtype=TORCH_DTYPES[run_dtype(dtype)],
                    device=self.device,
                )
                for dtype, nbytes in key
            ]
            for key in lists
        }
        own: dict[tuple[tuple[str, int], ...], list[float]] = {key: [] for key in lists}
        for i in range(max(self.r.repeats, ADVISOR_ROUNDS) + 1):  # the first is a warm-up
            self.hb.iteration = i
            for key, bufs in buffers.items():
                dist.barrier()
                self._sync()
                start = time.perf_counter()
                works = [dist.all_reduce(buf, async_op=True) for buf in bufs]
                for work in works:
                    if work is not None:
                        work.wait()
                self._sync()
                if i:
                    own[key].append(time.perf_counter() - start)
        for key, caps in lists.items():
            worst = self._agree_max(own[key], None)
            for cap in caps:
                if self.journal is not None:
                    buckets = len(reducer.buckets(cap))
                    event = CapTimes(cap_bytes=cap, buckets=buckets, samples_s=tuple(worst))
                    self.journal.write(event.to_dict())
        del buffers

    def run(self) -> None:
        self.program = compiled.read(Path(self.r.program))
        if self.program.world != self.world:
            raise RuntimeError(
                f"the replay's program is for {self.program.world} ranks, torchrun started "
                f"{self.world}"
            )
        self.hb.phase = "groups"
        # every rank makes every group, in the same order (new_group is a world call)
        self.handles = [dist.new_group(list(g)) for g in self.program.groups]
        for index, row in enumerate(self.program.rows):
            self._row(index, row)
        point = len(self.program.rows)
        self._sequence(self.program.sequence(self.rank), point)
        if self.r.rebucket:
            self._rebucket(self.program.reducer, point + 1)
        self.finish()


@record
def main(argv: list[str] | None = None) -> None:
    run_worker(
        argv,
        lambda run_dir, data: ReplayWorker(
            run_dir, CollectivesSettings.from_dict(data), ReplaySettings.from_dict(data["replay"])
        ),
    )


if __name__ == "__main__":
    main()
