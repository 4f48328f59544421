"""What one request costs the job's c10d store, by how it arrives: the figures behind
docs/scale.md's "a steady request costs the store its wake-up more than its bytes".

A real `torch.distributed.TCPStore` server in its own process; one client in this one. The
store's CPU is read from /proc/<pid>/task/*/schedstat (nanoseconds, every thread):

- back to back: a `multi_get` of 128 values of 64 B to 1.9 KB (an aggregator's read of its
  group's digests), and a `compare_set` of a 1.9 KB value (a node's digest);
- paced: the same `compare_set`, one every 1/rate s, each arriving at an idle store;
- the probe alone: a `get` of 16 B every 10 ms (benchmarks/control_plane.py's probe), against
  the store idle.

    python benchmarks/store_request_cost.py
"""

from __future__ import annotations

import glob
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta

SERVER = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False,
                 timeout=timedelta(seconds=60))
print("ready", flush=True)
sys.stdin.read()
"""


def store_cpu(pid: int) -> float:
    """CPU seconds of every thread of `pid` so far."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with open(path) as f:
            total += int(f.read().split()[0])
    return total / 1e9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def per_request(pid: int, n: int, request: Callable[[int], object]) -> float:
    """The store's CPU microseconds per request, `n` of them back to back."""
    request(0)
    before = store_cpu(pid)
    for i in range(n):
        request(i)
    return (store_cpu(pid) - before) / n * 1e6


def paced(pid: int, rate: float, seconds: float, request: Callable[[int], object]) -> float:
    """The store's CPU share while `request` arrives `rate` times a second."""
    n = int(rate * seconds)
    before, start = store_cpu(pid), time.perf_counter()
    for i in range(n):
        while (wait := start + i / rate - time.perf_counter()) > 0:
            time.sleep(min(wait, 0.001))
        request(i)
    return (store_cpu(pid) - before) / (time.perf_counter() - start)


def main() -> int:
    from torch.distributed import TCPStore

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    server.stdout.readline()
    try:
        client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
        pid = server.pid
        print("back to back (store CPU per request):")
        for size in (64, 600, 1100, 1900):
            keys = [f"digest{size}/{i}" for i in range(128)]
            for key in keys:
                client.set(key, b"x" * size)
            us = per_request(pid, 1000, lambda _, keys=keys: client.multi_get(keys))
            print(
                f"  multi_get of 128 x {size:>4} B: {us:6.1f} us ({us / (128 * size) * 1e3:.2f} ns/B)"
            )
        values = [b"a" * 1900, b"b" * 1900]
        client.set("digest", values[0])

        def swap(i: int) -> object:
            return client.compare_set("digest", values[i % 2], values[(i + 1) % 2])

        print(f"  compare_set of 1.9 KB: {per_request(pid, 4000, swap):6.1f} us")
        print("paced (store CPU share; per request):")
        for rate in (250.0, 500.0, 1000.0):
            share = paced(pid, rate, 6.0, swap)
            print(
                f"  compare_set of 1.9 KB, {rate:.0f}/s: {share:.3f} ({share / rate * 1e6:.0f} us)"
            )
        client.set("probe", b"x" * 16)
        idle_before = store_cpu(pid)
        time.sleep(3.0)
        idle = (store_cpu(pid) - idle_before) / 3.0
        share = paced(pid, 100.0, 6.0, lambda _: client.get("probe"))
        print(
            f"the probe alone (a 16 B get every 10 ms): {share:.4f} of the store "
            f"({(share - idle) / 100 * 1e6:.0f} us a get; idle {idle:.4f})"
        )
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
