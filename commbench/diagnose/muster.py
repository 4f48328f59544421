"""Who came: the nodes sign in before a multi-node diagnosis starts.

torchrun's rendezvous waits for every node and, when one never comes, ends after minutes
with nothing that says which. A diagnosis must name it. So before launching, every node signs
in with its host name at a small store that node rank 0 keeps on the rendezvous port + 1
(torch's public `TCPStore`), and each waits up to `wait` seconds for the others. A node that
does not sign in is missing: named by its host when SLURM's node list says which host it is,
else by its node rank. If the store never answers, node rank 0 (the endpoint's host) is the
one missing.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from commbench.errors import UserError
from commbench.launch.launcher import LaunchOptions
from commbench.launch.protocol import MUSTER_HOSTS, PREFIX, MusterResult, MusterSignIn, Skips
from commbench.launch.roll_call import connect_spread
from commbench.launch.store_link import StoreDown, StoreLink, peek, store_class

POLL = 0.2
MAX_PORT = 65535
READ_WAIT = 10.0
"""How long node rank 0 keeps the store up, once it published who came, for the others to
read it (on a thread of its own: node rank 0 goes on at once)."""


@dataclass(slots=True)
class Muster:
    expected: int
    joined: dict[int, str | None] = field(default_factory=dict)
    """Node rank -> host name of every node that signed in (None where only node rank 0,
    which read the roll, knows it)."""
    names: list[str] | None = None
    """The job's host names by node rank (SLURM's node list), where known."""
    store_unreachable: bool = False
    skipped: list[str] = field(default_factory=list)
    """Values refused on read (`Skips`): what another program left under the sign-in's keys."""

    @property
    def missing(self) -> list[int]:
        """The nodes known not to have come (only the store's own when it never answered:
        of the others nothing is known then)."""
        if self.store_unreachable:
            return [0]
        return [n for n in range(self.expected) if n not in self.joined]

    def name(self, node: int) -> str:
        if (host := self.joined.get(node)) is not None:
            return host
        if self.names and node < len(self.names):
            return self.names[node]
        return f"node rank {node}"

    def account(self) -> str:
        missing = self.missing
        who = ", ".join(self.name(n) for n in missing)
        if self.store_unreachable:
            return f"the rendezvous host ({who}) did not answer: it is down, not started or unreachable"
        return f"{len(missing)} of {self.expected} node(s) did not join within the wait: {who}"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send what C++ code writes to fd 2 to /dev/null for the block (Python's own stderr is
    untouched: an exception still reaches the caller)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def muster(launch: LaunchOptions, wait: float, names: list[str] | None = None) -> Muster:
    """Sign this node in and wait up to `wait` s for the others (a multi-node launch only)."""
    tcp_store = store_class()  # its C++ log held, as the watch's

    host, _, rdzv_port = (launch.rdzv_endpoint or "").rpartition(":")
    host = host.strip("[]")
    port = int(rdzv_port) + 1
    if port > MAX_PORT:
        raise UserError(
            f"--rdzv-endpoint port {rdzv_port}: a diagnosis keeps its sign-in on the next port, "
            f"and there is none past {MAX_PORT}: choose a lower one"
        )
    master = launch.node_rank == 0
    if not master:  # srun starts every node at once: their connects spread at CONNECT_RATE
        time.sleep(random.uniform(0.0, min(connect_spread(launch.nnodes), wait / 2)))
    try:
        with _quiet_stderr():  # c10d logs every failed connect with a C++ stack
            store = tcp_store(
                host,
                port,
                is_master=master,
                wait_for_workers=False,
                timeout=timedelta(seconds=wait),
            )
    except Exception as exc:  # RuntimeError/DistNetworkError: nobody listens there
        if master:  # its own port: taken, or not an address of this host
            raise UserError(
                f"node rank 0 cannot keep the diagnosis's sign-in on {host}:{port} (the "
                f"rendezvous port + 1): {_reason(exc)}; free that port or choose another "
                "--rdzv-endpoint port"
            ) from None
        result = Muster(expected=launch.nnodes, names=names, store_unreachable=True)
        result.joined = {launch.node_rank: socket.gethostname()}
        return result
    if not master:  # its read waits for node rank 0's result: at most its wait, and the read's
        store.set_timeout(timedelta(seconds=wait + READ_WAIT))
    roll = MusterRoll(StoreLink(lambda: store, slow_after=None), launch.rdzv_id, launch.nnodes)
    try:
        with _quiet_stderr():
            answer = roll.run(launch.node_rank, socket.gethostname(), wait, master=master)
    except StoreDown:
        answer = None
    if master:
        _keep_up(store, READ_WAIT)
    result = Muster(expected=launch.nnodes, names=names, store_unreachable=answer is None)
    result.skipped = list(roll.skips.warnings)
    if answer is None:
        result.joined = {launch.node_rank: socket.gethostname()}
    elif master:
        result.joined = dict(roll.hosts)
    else:
        result.joined = {n: None for n in range(launch.nnodes) if n not in answer.missing}
        result.joined.update({j.node: j.host for j in answer.joined})
        result.joined[launch.node_rank] = socket.gethostname()
    return result


def _reason(exc: BaseException) -> str:
    """c10d's one line of why a store could not listen (its message runs on for lines, the
    errno's name in the middle: `... code: -98, name: EADDRINUSE, message: address already
    in use`)."""
    text = " ".join(str(exc).split())
    at = text.find("message: ")
    if at >= 0:
        return text[at + len("message: ") :][:200]
    return text[:200] or type(exc).__name__


def _keep_up(store: object, seconds: float) -> None:
    """Keep node rank 0's store up `seconds` more, on a thread, for the others to read."""
    timer = threading.Timer(seconds, lambda held: None, args=[store])  # then let go of it
    timer.daemon = True
    timer.start()


class MusterRoll:
    """The sign-in's protocol, two requests per node: each node appends its `MusterSignIn`;
    node rank 0 reads the roll (one request per POLL) until every node is on it or the wait
    is over and publishes a `MusterResult` (who is missing); each other node reads that key
    in one request, which waits for it. Nobody says it has read it: node rank 0 keeps its
    store up READ_WAIT seconds more in the background (`muster`) and goes on at once.
    Before, a node waited for the result, then read it, then counted itself as having read
    it, and node rank 0 polled that count: 4 requests per node, 1.2 to 4.2 times the store's
    time at 8,192 nodes in a second (benchmarks/control_plane.py)."""

    def __init__(self, link: StoreLink, rdzv_id: str, nnodes: int) -> None:
        self.link = link
        self.nnodes = nnodes
        self.key = f"{PREFIX}muster/{rdzv_id}"
        self.skips = Skips()
        self.hosts: dict[int, str | None] = {}
        """Who signed in, with their hosts, as node rank 0 read the roll."""

    def sign_in(self, node: int, host: str) -> None:
        line = MusterSignIn(node=node, host=host[:200]).to_json() + b"\n"
        self.link.call("append", f"{self.key}/roll", line)

    def roll(self) -> dict[int, str]:
        raw = peek(self.link, f"{self.key}/roll") or b""
        joined: dict[int, str] = {}
        for line in raw.split(b"\n"):
            entry = self.skips.decode(MusterSignIn, line) if line.strip() else None
            if entry is not None and entry.node < self.nnodes:
                joined.setdefault(entry.node, entry.host)
        return joined

    def publish(self, wait: float) -> MusterResult:
        """Node rank 0's part: read the roll until every node is on it or `wait` is over
        (one request per POLL), publish who came, and keep the store up until all who came
        have read it (one request per POLL, at most READ_WAIT seconds)."""
        deadline = time.monotonic() + wait
        joined = self.roll()
        while time.monotonic() < deadline and len(joined) < self.nnodes:
            time.sleep(POLL)
            joined = self.roll()
        self.hosts = dict(joined)
        # the others only need who is missing: a few bytes each when all came
        missing = tuple(n for n in range(self.nnodes) if n not in joined)
        named = sorted(joined.items())[:MUSTER_HOSTS] if missing else []
        result = MusterResult(
            expected=self.nnodes,
            missing=missing,
            joined=tuple(MusterSignIn(node=n, host=h) for n, h in named if h is not None),
        )
        self.link.call("set", f"{self.key}/result", result.to_json())
        return result

    def read(self) -> MusterResult | None:
        """Every other node's part: one request, which waits for the result (as long as the
        store's timeout) and reads it."""
        return self.skips.decode(MusterResult, self.link.call("get", f"{self.key}/result"))

    def run(self, node: int, host: str, wait: float, *, master: bool) -> MusterResult | None:
        self.sign_in(node, host)
        return self.publish(wait) if master else self.read()
