"""The worker torchrun starts for `diagnose`: `python -m commbench.diagnose.worker RUN_DIR`.

It is the collectives worker (process group, heartbeats the watchdog reads, the context)
running the diagnosis's stages instead of a sweep. Each round, every test runs at once on
its own subgroup: warm-up, a barrier, timed all_reduces, the per-iteration maximum over
the test's ranks. One world all_reduce then gives every rank every test's samples, so each
runs the same planner on the same numbers and they agree on the next round without a word.
Each node's local rank 0 journals the tests into that node's run directory, so every node
holds the evidence and reaches the verdict, whichever node fails.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import busbw_factor
from commbench.diagnose.journal import PEER_ADDRESS, RecordedTest
from commbench.diagnose.plan import Result, Test
from commbench.diagnose.settings import DEFAULT_ITERS, DEFAULT_WARMUP, DiagnoseSettings
from commbench.diagnose.stages import Layout, Stage, plan_stages
from commbench.launch.protocol import EVENTS_FILE, RANKS_DIR, Journal, RollCallView
from commbench.launch.roll_call import RollCall, connect_spread, open_link
from commbench.launch.store_link import Keys, StoreDown, StoreLink, tcp_store_factory
from commbench.launch.worker import Worker, run_worker
from commbench.results.schema import CHECK_NA, ResultRow

ROLLCALL_WAIT = 8.0
"""Seconds the survivors of a failed round wait for each other at the roll call."""
ANSWER_GRACE = 1.0
"""Seconds a node's other ranks leave its local rank 0 to answer the roll call first: it holds
the node's roll-call link, opened at its start; another rank would open a new connection in
the failure's burst (`_roll_call`)."""


def bus_gbps(size_bytes: int, time_us: float, n: int) -> float:
    """All-reduce bus bandwidth (nccl-tests' convention): algbw x 2(n-1)/n."""
    if time_us <= 0:
        return 0.0
    return size_bytes / (time_us * 1e3) * (busbw_factor("all_reduce", n) or 1.0)


class DiagnoseWorker(Worker):
    def __init__(self, run_dir: Path, settings: CollectivesSettings, d: DiagnoseSettings) -> None:
        super().__init__(run_dir, settings)
        self.d = d
        self.groups: dict[tuple[int, ...], Any] = {}
        self.round_index = -1
        self.iters = settings.timing.iters or DEFAULT_ITERS
        self.warmup = DEFAULT_WARMUP if settings.timing.warmup is None else settings.timing.warmup
        self.rollcall_link: StoreLink | None = None
        """Local rank 0's link to the job's store for the roll call, opened at its start."""
        self._link_lock = threading.Lock()
        self._link_wanted = threading.Event()

    def init(self) -> None:
        super().init()
        if self.local_rank == 0 and "MASTER_ADDR" in os.environ:
            self._open_rollcall_link()
        if self.local_rank == 0 and self.journal is None:  # every node keeps the evidence
            self.journal = Journal(self.run_dir / EVENTS_FILE)
            self.journal.write({"type": "context", **self._context(self.ranks_info)})
            self.journal_health("before", self.health_before)

    def _groups(self, members: list[list[int]]) -> None:
        """The subgroups of a round's tests, made by every rank in the same order (new_group
        is a world call; torch's member-only creation deadlocked here once a rank had made
        other groups before), each once per run."""
        for ranks in members:
            key = tuple(ranks)
            if key not in self.groups:
                self.groups[key] = dist.new_group(ranks)

    def _time(self, members: list[int]) -> list[float]:
        handle = self.groups[tuple(members)]
        count = max(1, self.d.size_bytes // 4)
        buf = torch.ones(count, dtype=torch.float32, device=self.device)

        def call() -> None:
            dist.all_reduce(buf, group=handle)

        self.hb.phase = "warmup"
        self._timer(call, self.warmup)
        dist.barrier(group=handle)
        self.hb.phase = "timed"
        samples = self._timer(call, self.iters).samples
        return self._agree_max(samples, handle)

    def _round(self, stage: Stage, tests: list[Test]) -> list[Result]:
        self.round_index += 1
        self.hb.point, self.hb.iteration = self.round_index, 0
        self.hb.phase = "setup"
        members = [stage.ranks_of(t) for t in tests]
        self._groups(members)
        mine = next((i for i, m in enumerate(members) if self.rank in m), None)
        samples: list[float] = []
        if mine is not None:
            samples = self._time(members[mine])
        self.hb.phase = "exchange"
        buf = torch.zeros(len(tests) * self.iters, dtype=torch.float64, device=self.device)
        if mine is not None and self.rank == min(members[mine]):
            buf[mine * self.iters : (mine + 1) * self.iters] = torch.tensor(
                samples, dtype=torch.float64
            )
        dist.all_reduce(buf)
        values = buf.tolist()
        results = []
        for i, test in enumerate(tests):
            us = values[i * self.iters : (i + 1) * self.iters]
            n = len(members[i])
            gbps = tuple(bus_gbps(self.d.size_bytes, t, n) for t in us)
            results.append(Result(test, gbps))
            self._journal(stage, test, members[i], us, gbps)
        return results

    def _journal(
        self, stage: Stage, test: Test, ranks: list[int], us: list[float], gbps: tuple[float, ...]
    ) -> None:
        if self.journal is None:
            return
        who = ", ".join(stage.unit_name(u) for u in test.units)
        row = ResultRow.measured(
            op="all_reduce",
            strategy="",
            dtype="float32",
            reduce_op="sum",
            world_size=len(ranks),
            size_bytes=max(1, self.d.size_bytes // 4) * 4,
            count=max(1, self.d.size_bytes // 4),
            in_place=True,
            requested_bytes=self.d.size_bytes,
            samples_us=us,
            busbw_factor=busbw_factor("all_reduce", len(ranks)),
            check=CHECK_NA,
            warmup=self.warmup,
            note=f"{stage.name} round {test.round + 1}: {who}",
        )
        self.journal.write({"type": "row", "point": self.round_index, "row": row.to_dict()})
        self.journal.write(
            RecordedTest(
                stage=stage.name,
                round=test.round,
                probe=test.probe,
                fillers=test.fillers,
                ranks=tuple(ranks),
                samples_gbps=gbps,
            ).to_dict()
        )

    def _open_rollcall_link(self) -> None:
        """Open the node's roll-call link now, at a random moment of `connect_spread` (on a
        thread: the run goes on). c10d's store looks up every new peer's name on its event
        loop (docs/scale.md); opened here, the roll call's answers travel on connections
        that exist, and the job's start spreads their connects at CONNECT_RATE."""
        nnodes = len({int(r["node"]) for r in self.ranks_info})
        link = StoreLink(
            tcp_store_factory(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        )
        self.rollcall_link = link
        delay = random.uniform(0.0, connect_spread(nnodes))

        def opener() -> None:
            if self._link_wanted.wait(delay):
                return  # the roll call came first: it connects itself
            # a store that fails it: the roll call reconnects (after RECONNECT_AFTER)
            with self._link_lock, contextlib.suppress(StoreDown):
                open_link(link, Keys())

        threading.Thread(target=opener, name="commbench-rollcall-link", daemon=True).start()

    def _link_for_roll_call(self) -> StoreLink:
        """The node's open roll-call link where this rank holds it, else a new one."""
        self._link_wanted.set()
        with self._link_lock:  # an opener inside its connect finishes first
            link = self.rollcall_link
        if link is not None:
            return link
        return StoreLink(
            tcp_store_factory(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        )

    def _roll_call(self, exc: Exception) -> None:
        """Which nodes are still alive, asked through the job's store after a failed round.

        A peer's death reaches each survivor as an error naming whichever connection broke
        first, often another survivor that failed a moment before; each survivor alone
        cannot tell. So each surviving node answers once (its first rank to get here, by an
        exclusive file in the node's run directory) and the first node to answer counts
        (`control.RollCall`): the nodes that never answer are the lost ones. If the store
        itself is gone, so is the node that hosted it (the rendezvous endpoint's). Every
        rank journals what it saw; the one that answered adds the result."""
        self.hb.phase = "roll call"
        answered: tuple[int, ...] | None = None
        store_lost = None
        if self._answers_for_node():
            nnodes = len({int(r["node"]) for r in self.ranks_info})
            try:
                link = self._link_for_roll_call()
                result = RollCall(link, Keys(), nnodes).run(
                    self.node, self.host, self.rank, ROLLCALL_WAIT
                )
                answered = result.answered
            except StoreDown:  # the store went with the node that hosted it
                store_lost = os.environ.get("MASTER_ADDR")
        view = RollCallView(
            rank=self.rank,
            error=" ".join(str(exc).split())[:300],
            peers=tuple(PEER_ADDRESS.findall(str(exc))[:64]),
            answered=answered,
            store_lost=store_lost,
        )
        # any rank may be the one that failed (torchrun then stops its siblings): each
        # appends its view to the node's journal itself (one write per line: never torn)
        journal = self.journal or Journal(self.run_dir / EVENTS_FILE)
        journal.write(view)

    def _answers_for_node(self) -> bool:
        """Whether this rank is its node's first to reach the roll call, local rank 0 (which
        holds the node's open link) given ANSWER_GRACE seconds' start over the others."""
        if self.local_rank != 0:
            time.sleep(ANSWER_GRACE)
        try:
            fd = os.open(
                self.run_dir / RANKS_DIR / f"rollcall.node{self.node}",
                os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                0o644,
            )
        except FileExistsError:
            return False
        except OSError:  # the directory is unwritable: answer rather than stay silent
            return True
        os.close(fd)
        return True

    def run(self) -> None:
        layout = Layout.from_ranks(self.ranks_info)
        try:
            for stage in plan_stages(layout, self.d):
                while tests := stage.iso.next_round():
                    stage.iso.record(self._round(stage, tests))
        except Exception as exc:  # a peer died or was cut off: find out who, then fail
            self._roll_call(exc)
            raise
        self.finish()


@record
def main(argv: list[str] | None = None) -> None:
    run_worker(
        argv,
        lambda run_dir, data: DiagnoseWorker(
            run_dir,
            CollectivesSettings.from_dict(data),
            DiagnoseSettings.from_dict(data["diagnose"]),
        ),
    )


if __name__ == "__main__":
    main()
