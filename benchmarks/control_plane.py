"""The cross-node watch's load on the job's c10d store, from 8 to 16,384 nodes, with the loop
that runs.

A real cluster of that size is not at hand. So this simulates one (`commbench.launch.simulate`)
in which every node runs what its launcher runs, at the times it would run it: a `Watch`
polled every 0.1 s over its 8 ranks' heartbeats (rewritten every 0.5 s), a `ControlPlane`
stepped when its own pacing (`next_step`) says, and its own connection to a real
`torch.distributed.TCPStore` whose server runs in its own process, as torchrun's agent runs
the job's store. The clock is simulated: the nodes' events run in time order as fast as they
go, and the store's load is reported per second of that clock. A large cluster is run in
parts, one process each (`--procs`), advanced together a poll period at a time.

The share that counts, `store_cpu_share`, is the store process's CPU seconds
(/proc/<pid>/task/*/schedstat) per second of the window, of the one core its event loop runs
on. The simulation runs slower than its clock, and an idle store woken for a request costs
more the longer it slept; so each window's requests are noted as the nodes make them (`Tape`)
and made again afterwards at the pace the loop made them, and the store's CPU is measured
over that replay. What the clients saw (`capacity_share`: their seconds inside requests per
second of the window, round trips and this machine's load included) is kept beside it: it
swings with the load, the store's CPU does not.

Phases, per N:

- **steady**: whole keep-alive periods (a node publishes its digest every KEEPALIVE_INTERVALS
  intervals while its ranks' states hold), at least 1 s, after a first interval in which
  every launcher starts (and the aggregators place their keys).
- **failure**: a failed diagnosis round. Every rank stalls (so every launcher, after
  STALL_AFTER, asks for the fleet summary: its control plane wakes at most once per interval
  to read it), and every surviving node answers the roll call (1 in 512 nodes lost, at least
  one) and polls for its result every `rollcall_poll(N)`, the counter polling the count.
  Window: two poll periods, at whose end the counter reads the answers and publishes
  (pessimistically compressed: in a run it waits for the lost ones first).
- **muster**: diagnose's sign-in before a multi-node run, at node rank 0's own store (a second
  server), one new connection per node (their cost is printed beside the table). Window: 1 s,
  into which every node's sign-in and read are compressed (torchrun's nodes start seconds
  apart in practice): they run 8 at a time.
- **health gather**: the link health snapshots travel to the writer through the process
  group (`gather_object` to rank 0), not the store: no store request, by construction.
- **naming** (`--phases naming`, not a row): one rank's process gets SIGSTOP; when each node's
  launcher names it in its own account of the stall.

Targets at 1,024 and 16,384 nodes: steady <= 0.05 of the store, failure <= 0.5, muster <=
0.5 (exit 1 if one is missed). docs/scale.md keeps a recorded table and the model behind it.

    python benchmarks/control_plane.py                    # 8 to 16,384 nodes
    python benchmarks/control_plane.py --nodes 8,64 --json out.json
    python benchmarks/control_plane.py --nodes 1024 --phases naming --every-poll
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import itertools
import json
import math
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commbench.diagnose.muster import MusterRoll
from commbench.launch.aggregation import KEEPALIVE_INTERVALS, plan_interval
from commbench.launch.roll_call import RollCall, rollcall_poll
from commbench.launch.simulate import POLL, QUICK_DNS, Cluster, host_of
from commbench.launch.store_link import Keys, StoreLink

RANKS_PER_NODE = 8
TARGETS = {"steady": 0.05, "failure": 0.5, "muster": 0.5}
JUDGED = (1024, 16384)
"""The sizes the targets are judged at (issue 35)."""
NODES_PER_PROCESS = 2048
"""Fewest simulated nodes worth a process of their own (each imports torch: ~2 s)."""
STEADY_WINDOW = 1.0
"""The steady window: whole keep-alive periods (KEEPALIVE_INTERVALS intervals: each node's
digest once, each aggregator's read once an interval), at least this long."""
MUSTER_WINDOW = 1.0
ENV = {**os.environ, **QUICK_DNS, "TORCH_CPP_LOG_LEVEL": "FATAL"}

_SERVER = """
import sys
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                 timeout=timedelta(seconds=60))
print(store.port, flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
"""


def process_cpu(pid: int) -> float:
    """CPU seconds of every thread of `pid` so far (nanosecond schedstat, not 10 ms ticks)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(path).read_text().split()[0])
    return total / 1e9


class Server:
    """A TCPStore server in its own process, as the job's store is (torchrun's agent)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            assert self.proc.stdout is not None
            self._port = int(self.proc.stdout.readline())
        return self._port

    def client(self) -> Any:
        from torch.distributed import TCPStore

        return TCPStore(
            "127.0.0.1",
            self.port,
            is_master=False,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
        )

    def cpu(self) -> float:
        """Its CPU seconds so far, once it has served what was sent (a `set` is not
        answered: it may still be reading): until its count stops moving for 20 ms."""
        last = process_cpu(self.proc.pid)
        for _ in range(50):
            time.sleep(0.02)
            now = process_cpu(self.proc.pid)
            if now == last:
                break
            last = now
        return last

    def close(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Totals:
    """What the clients counted: requests, bytes, their seconds inside requests."""

    requests: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.requests + other.requests,
            self.bytes + other.bytes,
            self.seconds + other.seconds,
        )

    def __sub__(self, other: Totals) -> Totals:
        return Totals(
            self.requests - other.requests,
            self.bytes - other.bytes,
            self.seconds - other.seconds,
        )

    @classmethod
    def of(cls, links: list[StoreLink]) -> Totals:
        return cls(
            sum(link.total_requests for link in links),
            sum(link.bytes for link in links),
            sum(link.seconds for link in links),
        )


@dataclass
class Row:
    nodes: int
    ranks: int
    phase: str
    requests: int
    bytes: int
    store_s: float
    """The clients' seconds inside requests."""
    store_cpu_s: float
    """The store process's CPU seconds."""
    window_s: float
    requests_per_s: float = 0.0
    bytes_per_s: float = 0.0
    capacity_share: float = 0.0
    store_cpu_share: float = 0.0

    def __post_init__(self) -> None:
        w = self.window_s
        self.requests_per_s = self.requests / w if w else 0.0
        self.bytes_per_s = self.bytes / w if w else 0.0
        self.capacity_share = self.store_s / w if w else 0.0
        self.store_cpu_share = self.store_cpu_s / w if w else 0.0

    @classmethod
    def of(cls, nodes: int, phase: str, spent: Totals, cpu: float, window: float) -> Row:
        return cls(
            nodes=nodes,
            ranks=nodes * RANKS_PER_NODE,
            phase=phase,
            requests=spent.requests,
            bytes=spent.bytes,
            store_s=round(spent.seconds, 4),
            store_cpu_s=round(cpu, 4),
            window_s=window,
        )


# -- one part of the cluster, in a process of its own ------------------------------------------


def lost_nodes(nnodes: int) -> set[int]:
    """The nodes a failed round lost: 1 in 512, at least one."""
    count = max(1, nnodes // 512)
    return set(range(nnodes - 1, -1, -max(1, nnodes // count))[:count])


class RollCallRun:
    """The roll call of this part's surviving nodes, at the times `RollCall.run` makes its
    requests: each answers, then polls (the counter: the count) every `rollcall_poll`."""

    def __init__(self, cluster: Cluster, nnodes: int, at: float, window: float) -> None:
        self.cluster = cluster
        self.nnodes = nnodes
        self.period = rollcall_poll(nnodes)
        self.counter: int | None = None
        self.rolls: dict[int, RollCall] = {}
        lost = lost_nodes(nnodes)
        rng = random.Random(nnodes)
        starts = [rng.uniform(0, POLL) for _ in range(nnodes)]
        for node in cluster.nodes:
            if node.node in lost:
                continue
            # a worker's own connection in a run; here its node's (one process may hold
            # no more than 20,000)
            link = StoreLink(lambda c=node.client: c, slow_after=None)
            self.rolls[node.node] = RollCall(link, Keys(), nnodes)
            cluster.at(at + starts[node.node], self._answer, node.node)
        cluster.at(at + window - 1e-6, self._publish)

    def links(self) -> list[StoreLink]:
        return [roll.link for roll in self.rolls.values()]

    def _answer(self, node: int) -> None:
        position = self.rolls[node].answer(node, host_of(node), node * RANKS_PER_NODE)
        if position == 1:
            self.counter = node
            self._count(node)
        else:
            self._look(node)

    def _count(self, node: int) -> None:
        if not self.rolls[node].all_answered():
            self.cluster.at(self.cluster.now + self.period, self._count, node)

    def _look(self, node: int) -> None:
        if self.rolls[node].poll() is None:
            self.cluster.at(self.cluster.now + self.period, self._look, node)

    def _publish(self, _: Any) -> None:
        if self.counter is not None:
            roll = self.rolls[self.counter]
            result = roll.counted(self.counter)
            roll.link.call("set", roll.keys.rollcall("result"), result.to_json())


class Tape:
    """The requests of a measured window, as the simulated nodes made them: when (on the
    simulated clock), on which connection, what. The store's CPU for a request depends on how
    it arrives: woken from idle for each one (3,300 a second from 16,384 nodes leave it idle
    between them) a digest's `set` costs it ~13 us here, back to back ~4 us, and after 3 ms
    of idle ~35 us. The simulation runs slower than its clock, so its requests arrive further
    apart than in a cluster: the window is measured again by `replay`, at the loop's pace."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.entries: list[tuple[float, int, Any, str, tuple[Any, ...]]] | None = None
        self._seq = itertools.count()

    def replay(self, since: float, start: float) -> float:
        """Make the window's requests again, each at `start` + its simulated time since
        `since` (real monotonic seconds), or as soon as it can: how late it ran at most."""
        late = 0.0
        for t, _, client, op, args in sorted(self.entries or (), key=lambda e: e[:2]):
            wait = start + (t - since) - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                late = max(late, -wait)
            getattr(client, op)(*args)
        self.entries = None
        return late


class Taped:
    """A node's connection to the store that notes its requests on the `Tape` while it runs."""

    def __init__(self, client: Any, tape: Tape) -> None:
        self._client = client
        self._tape = tape

    def __getattr__(self, op: str) -> Any:
        call = getattr(self._client, op)
        entries = self._tape.entries
        if entries is None:
            return call

        def taped(*args: Any) -> Any:
            entries.append((self._tape.clock(), next(self._tape._seq), self._client, op, args))
            return call(*args)

        return taped


def shard_main(spec: dict[str, Any]) -> int:
    """A part of the cluster (`Shard`'s spec), driven by lines on stdin."""
    import gc

    nnodes, lo, hi, port = spec["nnodes"], spec["lo"], spec["hi"], spec["port"]
    stopped = {int(rank): pid for rank, pid in spec["stopped"].items()}
    tape = Tape(lambda: cluster.now)

    def connect() -> Any:
        from torch.distributed import TCPStore

        client = TCPStore(
            "127.0.0.1",
            port,
            is_master=False,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
        )
        return Taped(client, tape)

    with tempfile.TemporaryDirectory(prefix="commbench-sim-") as tmp:
        cluster = Cluster(
            nnodes,
            connect,
            Path(tmp),
            pid=spec["pid"],
            pids=stopped,
            nodes=range(lo, hi),
            every_poll=spec["every_poll"],
        )
        if lo == 0:
            cluster.time_steps(0)
        gc.collect()
        gc.freeze()  # the nodes live as long as the process: no need to walk them again
        rollcall: RollCallRun | None = None
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            reply: dict[str, Any] = {}
            if cmd["op"] == "until":
                cluster.run_until(cmd["t"])
                reply = {"named": len(cluster.named)}
            elif cmd["op"] == "stop":  # its process was sent SIGSTOP
                cluster.watch_for(cmd["rank"])
                cluster.stop_rank(cmd["rank"])
            elif cmd["op"] == "named":
                mine = {n.node for n in cluster.nodes}
                reply = {
                    "named": cluster.named,
                    "accounts": {n: cluster.account(n) for n in cmd["nodes"] if n in mine},
                }
            elif cmd["op"] == "totals":
                links = cluster.links() + (rollcall.links() if rollcall else [])
                reply = {
                    **asdict(Totals.of(links)),
                    "polls": cluster.polls,
                    "degraded": sum(len(link.episodes) for link in links),
                    "step_cpu": cluster.step_cpu.get(0, []),
                }
            elif cmd["op"] == "tape":
                tape.entries = []
            elif cmd["op"] == "replay":
                reply = {"late": tape.replay(cmd["since"], cmd["start"])}
            elif cmd["op"] == "failure":
                cluster.stall()
                rollcall = RollCallRun(cluster, nnodes, cmd["at"], cmd["window"])
            elif cmd["op"] == "close":
                cluster.close()
                print(json.dumps({}), flush=True)
                break
            print(json.dumps(reply), flush=True)
    return 0


class Shard:
    """The coordinator's end of a part of the cluster."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--shard", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def recv(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"a part of the simulated cluster died (exit {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            self.send(op="close")
            self.recv()
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Fleet:
    """A simulated cluster of `nnodes`, in parts, advanced together."""

    def __init__(self, nnodes: int, procs: int, port: int, pids: Pids, every_poll: bool) -> None:
        parts = max(1, min(procs, nnodes // NODES_PER_PROCESS))
        bounds = [nnodes * i // parts for i in range(parts + 1)]
        self.nnodes = nnodes
        self.shards: list[Shard] = []
        self.named = 0
        self.stopped = stopped_rank(nnodes)
        spec = {
            "nnodes": nnodes,
            "port": port,
            "pid": pids.running,
            "stopped": {self.stopped: pids.stopped},
            "every_poll": every_poll,
        }
        try:
            for lo, hi in itertools.pairwise(bounds):
                self.shards.append(Shard({**spec, "lo": lo, "hi": hi}))
            self._all()
        except BaseException:
            self.close()
            raise
        self.now = 0.0

    def _all(self, **cmd: Any) -> list[dict[str, Any]]:
        if cmd:
            for shard in self.shards:
                shard.send(**cmd)
        return [shard.recv() for shard in self.shards]

    def run_until(self, until: float, *, named: bool = False) -> None:
        """Every part to `until`, a poll period at a time (each waits for the others); with
        `named`, no further than every node naming the stopped rank."""
        while self.now < until:
            self.now = min(until, self.now + POLL)
            self.named = sum(r["named"] for r in self._all(op="until", t=self.now))
            if named and self.named == self.nnodes:
                return

    def stop(self) -> None:
        """The stopped rank's process was stopped: every node from now on looks for it."""
        self._all(op="stop", rank=self.stopped)

    def named_at(self, nodes: list[int]) -> tuple[dict[int, float], dict[int, str]]:
        """When each node named the stopped rank; and how `nodes` account for the stall."""
        named: dict[int, float] = {}
        accounts: dict[int, str] = {}
        for reply in self._all(op="named", nodes=nodes):
            named.update({int(n): t for n, t in reply["named"].items()})
            accounts.update({int(n): a for n, a in reply["accounts"].items()})
        return named, accounts

    def totals(self) -> tuple[Totals, dict[str, Any]]:
        replies = self._all(op="totals")
        spent = Totals()
        for r in replies:
            spent += Totals(r["requests"], r["bytes"], r["seconds"])
        extra = {
            "polls": sum(r["polls"] for r in replies),
            "degraded": sum(r["degraded"] for r in replies),
            "step_cpu": [s for r in replies for s in r["step_cpu"]],
        }
        return spent, extra

    def failure(self, at: float, window: float) -> None:
        self._all(op="failure", at=at, window=window)

    def tape(self) -> None:
        """From now on every part notes its requests (`Tape`)."""
        self._all(op="tape")

    def replay(self, server: Server, since: float) -> tuple[float, float]:
        """The store's CPU seconds for the requests noted since `since`, made again at the
        pace the loop made them; and how late the replay ran at most."""
        start = time.monotonic() + 0.2
        cpu = server.cpu()
        late = max(r["late"] for r in self._all(op="replay", since=since, start=start))
        return server.cpu() - cpu, late

    def close(self) -> None:
        for shard in self.shards:
            shard.close()


# -- the phases ---------------------------------------------------------------------------------


@dataclass
class Naming:
    """How long after its process stopped each node named the stopped rank (the launcher's
    own account of the stall, `describe_hang`), and how some of them put it."""

    nnodes: int
    rank: int
    host: str
    named: dict[int, float]
    accounts: dict[int, str]

    @property
    def worst(self) -> float:
        return max(self.named.values()) if len(self.named) == self.nnodes else float("inf")


@dataclass
class Size:
    """One size's rows and what else it told."""

    rows: list[Row]
    interval: float
    step_cpu: float
    polls: int
    degraded: int
    seconds: float
    naming: Naming | None = None
    connect_cpu: float = 0.0
    """The muster store's CPU seconds for the nodes' connections."""
    late: float = 0.0
    """How late the replay of a window ran at most (seconds): a replay that cannot keep
    the loop's pace sends its requests closer together than the loop did."""


def run_nodes(nnodes: int, args: argparse.Namespace, pids: Pids, rank0: Server) -> Size:
    began = time.monotonic()
    rows: list[Row] = []
    naming = None
    late = 0.0
    extra: dict[str, Any] = {"step_cpu": [], "polls": 0, "degraded": 0}
    if args.phases & {"steady", "naming", "failure"}:
        naming, late = simulate(nnodes, args, pids, rows, extra)
    connect_cpu = 0.0
    if "muster" in args.phases:
        row, connect_cpu = muster(nnodes, rank0)
        rows.append(row)
    if "steady" in args.phases:
        rows.append(Row.of(nnodes, "health gather", Totals(), 0.0, 1.0))
    steps = extra["step_cpu"][1:] or [0.0]
    return Size(
        rows=rows,
        interval=plan_interval(nnodes),
        step_cpu=statistics.median(steps),
        polls=extra["polls"],
        degraded=extra["degraded"],
        seconds=time.monotonic() - began,
        naming=naming,
        late=late,
        connect_cpu=connect_cpu,
    )


def simulate(
    nnodes: int, args: argparse.Namespace, pids: Pids, rows: list[Row], extra: dict[str, Any]
) -> tuple[Naming | None, float]:
    """The phases of a running job, on a simulated cluster: their rows, `extra`'s counts, the
    naming and how late a replay ran."""
    naming = None
    late = 0.0
    interval = plan_interval(nnodes)
    server = Server()
    try:
        fleet = Fleet(nnodes, args.procs, server.port, pids, args.every_poll)
        try:
            fleet.run_until(interval)  # every launcher started; the aggregators placed
            spent, _ = fleet.totals()

            def measure(phase: str, window: float) -> None:
                nonlocal spent, late
                since = fleet.now
                fleet.tape()
                fleet.run_until(since + window)
                now_spent, _ = fleet.totals()
                cpu, behind = fleet.replay(server, since)
                late = max(late, behind)
                rows.append(Row.of(nnodes, phase, now_spent - spent, cpu, window))
                spent = now_spent

            if "steady" in args.phases:
                period = KEEPALIVE_INTERVALS * interval
                measure("steady", math.ceil(STEADY_WINDOW / period) * period)
            if "naming" in args.phases:
                naming = name_stopped(fleet, pids)
                spent, _ = fleet.totals()
            if "failure" in args.phases:
                window = 2 * rollcall_poll(nnodes)
                fleet.failure(fleet.now, window)
                measure("failure", window)
            extra.update(fleet.totals()[1])
        finally:
            fleet.close()
    finally:
        server.close()
    return naming, late


NAMING_LIMIT = 60.0
"""Simulated seconds the naming phase waits for every node at most."""


def name_stopped(fleet: Fleet, pids: Pids) -> Naming:
    """The stopped rank's process gets SIGSTOP; every rank stalls behind it. Until every node
    names it (or NAMING_LIMIT), each node's watch is asked after each poll."""
    node = fleet.stopped // RANKS_PER_NODE
    shown = sorted({0, node, (node + 1) % fleet.nnodes, fleet.nnodes - 1})
    os.kill(pids.stopped, signal.SIGSTOP)
    try:
        stopped_at = fleet.now
        fleet.stop()
        fleet.run_until(stopped_at + NAMING_LIMIT, named=True)
        named, accounts = fleet.named_at(shown)  # while it is still stopped
    finally:
        os.kill(pids.stopped, signal.SIGCONT)
    return Naming(
        nnodes=fleet.nnodes,
        rank=fleet.stopped,
        host=host_of(node),
        named={n: round(t - stopped_at, 3) for n, t in named.items()},
        accounts=accounts,
    )


def stopped_rank(nnodes: int) -> int:
    """The rank whose process the naming phase stops: local rank 2 of a node three fifths in."""
    return nnodes * 3 // 5 * RANKS_PER_NODE + 2


MUSTER_THREADS = 8


def in_parallel(work: Callable[[int], Any], nodes: range) -> None:
    """`work(n)` for every node, MUSTER_THREADS nodes at a time (each its own connection)."""
    errors: list[BaseException] = []

    def part(i: int) -> None:
        try:
            for n in nodes[i::MUSTER_THREADS]:
                work(n)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=part, args=(i,)) for i in range(MUSTER_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def muster(nnodes: int, server: Server) -> tuple[Row, float]:
    """Every node signs in at node rank 0's store (`server`: not the job's, which comes
    later), one new connection each; node 0 publishes who came and every other node reads it
    (`MusterRoll`). The row: the sign-in's requests; beside it, the store's CPU seconds for
    the connections (each node's one, spread over their arrival in a run)."""
    cpu0 = server.cpu()
    clients = [server.client() for _ in range(nnodes)]
    try:
        cpu1 = server.cpu()
        links = [StoreLink(lambda c=c: c, slow_after=None) for c in clients]
        rolls = [MusterRoll(links[n], f"bench{nnodes}", nnodes) for n in range(nnodes)]
        # the nodes come at once (the window is a second), so many at a time
        in_parallel(lambda n: rolls[n].sign_in(n, host_of(n)), range(nnodes))
        master = threading.Thread(target=rolls[0].publish, args=(5.0,))
        master.start()
        in_parallel(lambda n: rolls[n].read(), range(1, nnodes))
        master.join()
        cpu = server.cpu() - cpu1
        spent = Totals.of(links)
    finally:
        clients.clear()  # every connection closed: the next size opens its own
        links = rolls = []
    return Row.of(nnodes, "muster", spent, cpu, MUSTER_WINDOW), cpu1 - cpu0


# -- the report ---------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = [
        "| nodes | ranks | phase | requests_per_s | bytes_per_s | capacity_share | store_cpu_share |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.nodes} | {r.ranks} | {r.phase} | {r.requests_per_s:,.0f} | "
            f"{_bytes(r.bytes_per_s)} | {r.capacity_share:.3f} | {r.store_cpu_share:.3f} |"
        )
    return "\n".join(lines)


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}/s" if unit == "B" else f"{n:,.1f} {unit}/s"
        n /= 1000
    return f"{n:.1f} GB/s"


@dataclass(frozen=True)
class Pids:
    """Live processes for the ranks' heartbeats to name (their state is read from /proc): one
    every rank runs as, one the naming phase stops."""

    running: int
    stopped: int


@contextlib.contextmanager
def helper_processes() -> Iterator[Pids]:
    procs = [subprocess.Popen(["sleep", "3600"]) for _ in range(2)]
    try:
        yield Pids(running=procs[0].pid, stopped=procs[1].pid)
    finally:
        for proc in procs:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--shard"]:
        return shard_main(json.loads(argv[1]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="8,64,256,1024,16384")
    parser.add_argument(
        "--procs",
        type=int,
        default=os.cpu_count() or 1,
        help="processes a large cluster is simulated in (one per core)",
    )
    parser.add_argument(
        "--phases",
        default="steady,failure,muster",
        help="of steady, failure, muster, naming (a stopped rank named by every node: its "
        "time, not a load)",
    )
    parser.add_argument(
        "--every-poll",
        action="store_true",
        help="run every launcher's every poll, also those that would find nothing new",
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    args.phases = set(args.phases.split(","))
    os.environ.update({**QUICK_DNS, "TORCH_CPP_LOG_LEVEL": "FATAL"})  # before torch loads
    nodes = [int(n) for n in args.nodes.split(",")]
    started = time.monotonic()
    print(
        "store_cpu_share: the store's CPU seconds per second of the window, of the one core "
        "its event loop runs on",
        flush=True,
    )
    rank0 = Server()  # node rank 0's store of every size's muster
    rank0.client()  # its first connection readies it (and waits out a DNS lookup)
    sizes: dict[int, Size] = {}
    try:
        with helper_processes() as pids:
            for n in nodes:
                sizes[n] = run_nodes(n, args, pids, rank0)
                print(f"  {n} nodes done ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    finally:
        rank0.close()
    took = time.monotonic() - started
    rows = [r for size in sizes.values() for r in size.rows]
    print(table(rows))
    print("\naggregator CPU outside the store, per interval (median, node 0's launcher):")
    for n, size in sizes.items():
        print(
            f"  {n} nodes: {size.step_cpu * 1e3:.0f} ms every {size.interval:.2f} s "
            f"({size.step_cpu / size.interval:.1%} of a core)"
        )
    for n, size in sizes.items():
        if (naming := size.naming) is not None:
            times = sorted(naming.named.values())
            print(
                f"\n{n} nodes: rank {naming.rank} (host {naming.host}) stopped; named by "
                f"{len(times)} of {n} nodes, the last after {naming.worst:.1f} s (median "
                f"{statistics.median(times) if times else float('nan'):.1f} s)"
            )
    connects = {n: s.connect_cpu for n, s in sizes.items() if s.connect_cpu}
    if connects:
        print("\nmuster: node rank 0's store's CPU for the nodes' connections (not in the row):")
        for n, cpu in connects.items():
            print(f"  {n} nodes: {cpu:.3f} s ({cpu / n * 1e6:.0f} us a node)")
    late = {n: round(s.late, 2) for n, s in sizes.items() if s.late > 0.05}
    if late:
        print(f"\nreplays behind the loop's pace by up to (s): {late}")
    degraded = {n: s.degraded for n, s in sizes.items() if s.degraded}
    if degraded:
        print(f"\nstore requests past their deadline (the watch degraded): {degraded}")
    print(
        f"\n{took:.0f} s on {platform.node()} ({os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}), python {platform.python_version()}"
    )
    if args.json:
        doc = {
            "seconds": took,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "rows": [asdict(r) for r in rows],
            "aggregator_cpu_s": {str(n): s.step_cpu for n, s in sizes.items()},
            "polls": {str(n): s.polls for n, s in sizes.items()},
            "naming": {str(n): asdict(s.naming) for n, s in sizes.items() if s.naming},
        }
        args.json.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    misses = [
        f"{r.phase} at {r.nodes} nodes: {r.store_cpu_share:.3f} > {TARGETS[r.phase]}"
        for r in rows
        if r.nodes in JUDGED and r.phase in TARGETS and r.store_cpu_share > TARGETS[r.phase]
    ]
    if misses:
        print("target missed: " + "; ".join(misses), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
