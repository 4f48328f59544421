"""The cross-node watch's load on the job's c10d store, from 8 to 1,024 (and 8,192) nodes.

A real cluster of that size is not at hand, and a small one on a small machine cannot show
the cost (its heartbeat threads slow themselves down before the store saturates). So this
drives commbench's real control-plane classes (`launch.control`: `StoreLink`, `NodeAgent`,
`Aggregator`, `Follower`, `RollCall`; `diagnose.muster.MusterRoll`) against a real
`torch.distributed.TCPStore`, its server in its own process, with N simulated nodes of 8
ranks each. Every request goes through the counting, timing `StoreLink` the launchers use.

First the store's capacity is measured: requests per second of a plain `get` loop from one
client. Then, per N and phase, the requests that the protocol makes in a window of run time
are executed against the store as fast as they can go, and reported per second of that
window:

- **steady**: each node's digest and the aggregator's read and summary, once per interval
  (`plan_interval(N)`); three intervals, after the first (which places the keys).
- **failure**: a failed diagnosis round (the roll call) while every launcher's ranks are
  stalled. Window: two poll periods (`rollcall_poll(N)`: 0.5 s up to 1,000 nodes, then
  growing with N). In it, pessimistically compressed: every survivor
  answers (1 in 512 nodes lost, at least one), the first counts and publishes, every other
  node polls for the result twice, every non-aggregator launcher reads the fleet summary
  once, and the steady traffic runs on at its rate.
- **muster**: diagnose's sign-in before a multi-node run. Window: 1 s, into which every
  node's sign-in, node 0's read of the roll, its result (who is missing) and every node's
  wait, read and acknowledgement of it are compressed (torchrun's nodes start seconds apart
  in practice).
- **health gather**: the link health snapshots travel to the writer through the process
  group (`gather_object` to rank 0), not the store: no store request, by construction.

`capacity_share` is the store time the phase needs per second of run: the seconds the
requests took (as their client saw them, round trips included: an overestimate of the
server's time) divided by the window's length. Targets at 1,024 nodes: steady <= 0.05,
failure <= 0.5. docs/scale.md keeps a recorded table and the model behind it.

    python benchmarks/control_plane.py                    # 8, 64, 256, 1024, 8192 nodes
    python benchmarks/control_plane.py --nodes 8,64 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commbench.diagnose.muster import MusterRoll
from commbench.launch.control import (
    Aggregator,
    Follower,
    Keys,
    NodeAgent,
    RollCall,
    StoreLink,
    plan_interval,
    rank_states,
    rollcall_poll,
)
from commbench.launch.protocol import RankBeat, Sighting

RANKS_PER_NODE = 8
CLIENTS = 8
"""Client connections the simulated nodes share (each real node has its own)."""
TARGETS = {"steady": 0.05, "failure": 0.5}

_SERVER = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                 timeout=timedelta(seconds=60))
print(store.port, flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
"""


class Server:
    """A TCPStore server in its own process, as the job's store is (torchrun's agent)."""

    def __init__(self) -> None:
        env = {**os.environ, "TORCH_CPP_LOG_LEVEL": "FATAL"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def client(self) -> Any:
        from torch.distributed import TCPStore

        return TCPStore(
            "127.0.0.1",
            self.port,
            is_master=False,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
        )

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def capacity(server: Server, seconds: float = 2.0) -> float:
    """Requests per second of a plain get loop from one client."""
    store = server.client()
    store.set("capacity/probe", b"x" * 64)
    for _ in range(200):
        store.get("capacity/probe")
    n = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(100):
            store.get("capacity/probe")
        n += 100
    return n / elapsed


@dataclass
class Row:
    nodes: int
    ranks: int
    phase: str
    requests: int
    bytes: int
    store_s: float
    window_s: float
    requests_per_s: float = 0.0
    bytes_per_s: float = 0.0
    capacity_share: float = 0.0

    def __post_init__(self) -> None:
        self.requests_per_s = self.requests / self.window_s if self.window_s else 0.0
        self.bytes_per_s = self.bytes / self.window_s if self.window_s else 0.0
        self.capacity_share = self.store_s / self.window_s if self.window_s else 0.0


class Fleet:
    """N simulated nodes: their links (over CLIENTS connections), agents and beats."""

    def __init__(self, server: Server, nnodes: int, job: str) -> None:
        self.nnodes = nnodes
        self.keys = Keys(job)
        clients = [server.client() for _ in range(CLIENTS)]
        self.links = [StoreLink(lambda c=c: c) for c in clients]
        self.agg_link = StoreLink(lambda c=server.client(): c)
        self.agents = [
            NodeAgent(self.links[n % CLIENTS], self.keys, n, f"node{n:05d}.cluster.example")
            for n in range(nnodes)
        ]
        self.interval = plan_interval(nnodes)
        self.aggregator = Aggregator(self.agg_link, self.keys, nnodes, self.interval)
        self.step_no = 0
        self.aggregator_cpu: list[float] = []
        """Seconds of each aggregator step outside its store requests (decoding, summing)."""

    def all_links(self) -> list[StoreLink]:
        return [*self.links, self.agg_link]

    def totals(self) -> tuple[int, int, float]:
        links = self.all_links()
        return (
            sum(link.total_requests for link in links),
            sum(link.bytes for link in links),
            sum(link.seconds for link in links),
        )

    def beats(self, node: int) -> dict[int, Sighting]:
        """What a node's launcher reads from its ranks' heartbeat files."""
        now = time.time()
        return {
            node * RANKS_PER_NODE + i: Sighting(
                RankBeat(
                    rank=node * RANKS_PER_NODE + i,
                    local_rank=i,
                    node=node,
                    host=f"node{node:05d}.cluster.example",
                    pid=100000 + i,
                    point=self.step_no,
                    phase="timed",
                    iteration=17,
                    ticks=3 * self.step_no,
                ),
                mtime=now,
            )
            for i in range(RANKS_PER_NODE)
        }

    def interval_traffic(self) -> None:
        """One interval of the steady watch: every digest, the aggregator's step."""
        self.step_no += 1
        now = time.time()
        for n, agent in enumerate(self.agents):
            states = rank_states(self.beats(n), now, 5.0, state_of=lambda pid: "S")
            agent.publish(states, now)
        link = self.agg_link
        before, started = link.seconds, time.perf_counter()
        self.aggregator.step()
        self.aggregator_cpu.append(time.perf_counter() - started - (link.seconds - before))


def measure(fleet: Fleet, phase: str, window: float, work: Any) -> Row:
    before = fleet.totals()
    work()
    after = fleet.totals()
    return Row(
        nodes=fleet.nnodes,
        ranks=fleet.nnodes * RANKS_PER_NODE,
        phase=phase,
        requests=after[0] - before[0],
        bytes=after[1] - before[1],
        store_s=round(after[2] - before[2], 4),
        window_s=window,
    )


def run_nodes(server: Server, nnodes: int) -> tuple[list[Row], float, float]:
    """The rows of `nnodes`, the aggregator's median CPU seconds per step and the interval."""
    fleet = Fleet(server, nnodes, f"bench{nnodes}")
    fleet.interval_traffic()  # the first interval places every key once
    intervals = 3
    rows = [
        measure(
            fleet,
            "steady",
            intervals * fleet.interval,
            lambda: [fleet.interval_traffic() for _ in range(intervals)],
        )
    ]

    # failure: the roll call, with every launcher reading the summary
    window = 2 * rollcall_poll(nnodes)
    lost = set(range(nnodes - 1, -1, -max(1, nnodes // 512))[: max(1, nnodes // 512)])
    survivors = [n for n in range(nnodes) if n not in lost]

    def failure() -> None:
        steady_share = window / fleet.interval
        for _ in range(math.floor(steady_share)):
            fleet.interval_traffic()
        rolls = [RollCall(fleet.links[n % CLIENTS], fleet.keys, nnodes) for n in range(nnodes)]
        for n in survivors:
            rolls[n].answer(n, f"node{n:05d}", n * RANKS_PER_NODE)
        rolls[survivors[0]].count(survivors[0], wait=0.0)  # all who will answer did
        for _ in range(2):
            for n in survivors[1:]:
                rolls[n].poll()
        for n in range(1, nnodes):  # every stalled launcher reads the summary once
            Follower(fleet.links[n % CLIENTS], fleet.keys).read()

    row = measure(fleet, "failure", window, failure)
    # the fraction of an interval's steady traffic not run whole above, added pro rata
    part = window / fleet.interval - math.floor(window / fleet.interval)
    steady = rows[0]
    rows.append(
        Row(
            nodes=row.nodes,
            ranks=row.ranks,
            phase="failure",
            requests=row.requests + round(part * steady.requests / intervals),
            bytes=row.bytes + round(part * steady.bytes / intervals),
            store_s=round(row.store_s + part * steady.store_s / intervals, 4),
            window_s=window,
        )
    )

    # muster: every node signs in, node 0 publishes, every other node reads
    def muster() -> None:
        rolls = [
            MusterRoll(fleet.links[n % CLIENTS], f"bench{nnodes}", nnodes) for n in range(nnodes)
        ]
        for n in range(nnodes):
            rolls[n].sign_in(n, f"node{n:05d}.cluster.example")
        master = threading.Thread(target=rolls[0].publish, args=(5.0,))
        master.start()
        for n in range(1, nnodes):
            rolls[n].read(5.0)
        master.join()

    rows.append(measure(fleet, "muster", 1.0, muster))

    rows.append(
        Row(
            nodes=nnodes,
            ranks=nnodes * RANKS_PER_NODE,
            phase="health gather",
            requests=0,
            bytes=0,
            store_s=0.0,
            window_s=1.0,
        )
    )
    return rows, statistics.median(fleet.aggregator_cpu[1:]), fleet.interval


def table(rows: list[Row]) -> str:
    lines = [
        "| nodes | ranks | phase | requests_per_s | bytes_per_s | capacity_share |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.nodes} | {r.ranks} | {r.phase} | {r.requests_per_s:,.0f} | "
            f"{_bytes(r.bytes_per_s)} | {r.capacity_share:.3f} |"
        )
    return "\n".join(lines)


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}/s" if unit == "B" else f"{n:,.1f} {unit}/s"
        n /= 1000
    return f"{n:.1f} GB/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="8,64,256,1024,8192")
    parser.add_argument("--json", type=Path, help="also write the rows and the capacity here")
    args = parser.parse_args(argv)
    nodes = [int(n) for n in args.nodes.split(",")]
    started = time.monotonic()
    server = Server()
    try:
        cap = capacity(server)
        print(f"store capacity: {cap:,.0f} requests/s (plain get loop, one client)", flush=True)
        rows: list[Row] = []
        cpu: dict[int, tuple[float, float]] = {}
        for n in nodes:
            got, step_s, interval = run_nodes(server, n)
            rows += got
            cpu[n] = (step_s, interval)
            print(f"  {n} nodes done ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    finally:
        server.close()
    took = time.monotonic() - started
    print(table(rows))
    print("\naggregator CPU outside the store, per interval (median):")
    for n, (step_s, interval) in cpu.items():
        print(
            f"  {n} nodes: {step_s * 1e3:.0f} ms every {interval:.2f} s ({step_s / interval:.1%} of a core)"
        )
    misses = [
        f"{r.phase} at {r.nodes} nodes: {r.capacity_share:.3f} > {TARGETS[r.phase]}"
        for r in rows
        if r.nodes == 1024 and r.phase in TARGETS and r.capacity_share > TARGETS[r.phase]
    ]
    print(
        f"\n{took:.0f} s on {platform.node()} ({os.cpu_count()} CPUs), python {platform.python_version()}"
    )
    if args.json:
        doc = {
            "capacity_requests_per_s": cap,
            "seconds": took,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "rows": [asdict(r) for r in rows],
            "aggregator_cpu_s": {str(n): v[0] for n, v in cpu.items()},
        }
        args.json.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    if misses:
        print("target missed: " + "; ".join(misses), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
