"""A real cluster on one machine: each node a network namespace with its own address, host
name and /etc/hosts, joined by a bridge, with links that can be slowed and CPUs that can be
throttled.

Two processes on loopback share one host name, one address and every port: they cannot show
what goes wrong between machines (a rendezvous address that is not what the host name
resolves to, gloo picking an interface, a slow link, a slow node). A namespace per node can:

    with Cluster(2) as cluster:
        cluster.shape(1, rate_mbit=20)        # node 1's link in both directions
        cluster.cpu_quota(1, 0.25)            # node 1 gets a quarter of a core ...
        proc = cluster.popen(1, argv, slow_cpu=True)   # ... for what is started with slow_cpu

Node i's processes run under `ip netns exec <ns>` (which bind-mounts /etc/netns/<ns>/hosts
over /etc/hosts) and `unshare --uts` (its own host name), with GLOO_SOCKET_IFNAME naming the
namespace's interface. Needs root, iproute2's `ip` and `tc`, util-linux's `unshare` and the
cgroup v1 CPU controller: `netns_available()` says what is missing (tests/conftest.py skips a
`netns` test with it, when the test is set up).

Everything has a name unique to the run (pid and a random suffix), so concurrent runs and
whatever else the machine runs are never touched; `__exit__` (or, failing that, an atexit
hook) kills what the cluster started and removes every namespace, link, qdisc, cgroup and
hosts file it made, and never raises doing so.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import ipaddress
import os
import random
import shlex
import shutil
import signal
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
NETNS_ETC = Path("/etc/netns")
CFS_PERIOD_US = 100_000
IFNAMSIZ = 15  # the kernel's limit on an interface name, without its NUL
TOOLS = ("ip", "tc", "unshare", "hostname", "getent")
COMMAND_TIMEOUT = 30.0
REACH_TIMEOUT = 10.0
"""Seconds `__enter__` waits for every node to answer every other one."""

# An ICMP echo to each address in argv[2:] until all answer or argv[1] seconds pass; prints
# the silent ones. In Python because `ping` is not installed everywhere `ip` is.
_PING = r"""
import os, socket, struct, sys, time

def checksum(data):
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF

ident = os.getpid() & 0xFFFF
pending = set(sys.argv[2:])
deadline = time.monotonic() + float(sys.argv[1])
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
seq = 0
while pending and time.monotonic() < deadline:
    seq = (seq + 1) & 0xFFFF
    for addr in pending:
        head = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"commbench"
        sock.sendto(head[:2] + struct.pack("!H", checksum(head)) + head[4:], (addr, 0))
    until = min(deadline, time.monotonic() + 0.2)
    while pending and time.monotonic() < until:
        sock.settimeout(max(until - time.monotonic(), 0.001))
        try:
            data, (src, _) = sock.recvfrom(2048)
        except OSError:
            break
        start = (data[0] & 0x0F) * 4
        kind, _, _, got = struct.unpack("!BBHH", data[start : start + 6])
        if kind == 0 and got == ident:
            pending.discard(src)
print(" ".join(sorted(pending)))
sys.exit(1 if pending else 0)
"""


class ClusterError(RuntimeError):
    """The cluster could not be built, or is not what it should be."""


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        raise ClusterError(f"`{shlex.join(argv)}` failed: {proc.stderr.strip() or proc.stdout}")
    return proc


def _unique_tag() -> str:
    """A few characters no other run (this pid's earlier ones included) is using."""
    alphabet = string.digits + string.ascii_lowercase
    pid, digits = os.getpid(), ""
    while pid:
        pid, d = divmod(pid, 36)
        digits = alphabet[d] + digits
    return digits + "".join(random.choices(alphabet, k=3))


@functools.cache
def netns_available() -> str | None:
    """Why the harness cannot run here (for `pytest.mark.skipif`), or None when it can.

    Tries what it needs, not only whether the tools exist: a container may have `ip` and
    still refuse a namespace or a veth."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veths, cgroups)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)}"
    if not (CGROUP_CPU / "cpu.cfs_quota_us").exists():
        return f"needs the cgroup v1 CPU controller at {CGROUP_CPU}"
    tag = "cbprobe" + _unique_tag()
    ns, veth = tag, tag[:IFNAMSIZ]
    try:
        _run(["ip", "netns", "add", ns])
        try:
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "p", "netns", ns])
            _run(["ip", "link", "del", veth])
        finally:
            _run(["ip", "netns", "del", ns], check=False)
        probe = CGROUP_CPU / tag
        probe.mkdir()
        probe.rmdir()
    except (ClusterError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot make a network namespace, a veth or a cgroup here: {exc}"
    return None


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine's root namespace has an address or a route in."""
    nets = []
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        for word in _run(argv).stdout.split():
            with contextlib.suppress(ValueError):
                if word[0].isdigit():
                    nets.append(ipaddress.IPv4Network(word, strict=False))
    return nets


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that overlaps nothing in use: a node must never reach past the bridge."""
    used = _used_networks()
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.{random.randrange(100, 255)}.{random.randrange(256)}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise ClusterError("no free 10.x.y.0/24 subnet for the cluster")


class Cluster:
    """`nodes` namespaces on one bridge: see the module docstring."""

    def __init__(self, nodes: int, *, prefix: str = "cb") -> None:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, not {nodes}")
        self.tag = f"{prefix}{_unique_tag()}"
        self.bridge = f"{self.tag}br"
        self.namespaces = [f"{self.tag}ns{i}" for i in range(nodes)]
        self.hosts: list[str] = [f"{self.tag}n{i}" for i in range(nodes)]
        """Host name of node i, unique to this run."""
        self.interfaces: list[str] = [f"{self.tag}e{i}" for i in range(nodes)]
        """The interface in node i's namespace (its veth end)."""
        self.addresses: list[str] = []
        """IPv4 address of node i on the cluster's /24 (set by `__enter__`)."""
        self._outer = [f"{self.tag}h{i}" for i in range(nodes)]  # the veth ends on the bridge
        too_long = [n for n in [self.bridge, *self.interfaces, *self._outer] if len(n) > IFNAMSIZ]
        if too_long:
            raise ValueError(f"interface names over {IFNAMSIZ} characters: {too_long}")
        self._procs: dict[int, list[subprocess.Popen[Any]]] = {i: [] for i in range(nodes)}
        self._cgroups: dict[int, Path] = {}
        self._shaped: set[int] = set()
        self._made_netns_etc = False
        self._closed = False
        self.cleanup_problems: list[str] = []
        """What cleanup could not remove (it never raises): empty after a clean exit."""

    # --- building ------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        atexit.register(self._cleanup)  # a run killed by an exception outside `with` still cleans
        try:
            self._build()
            self._check_reachable()
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._cleanup()

    def _build(self) -> None:
        net = _free_subnet()
        self.addresses = [str(net.network_address + 1 + i) for i in range(len(self.hosts))]
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "link", "set", self.bridge, "up"])
        for i, ns in enumerate(self.namespaces):
            _run(["ip", "netns", "add", ns])
            inner, outer = self.interfaces[i], self._outer[i]
            _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns])
            _run(["ip", "link", "set", outer, "master", self.bridge, "up"])
            address = f"{self.addresses[i]}/{net.prefixlen}"
            _run(["ip", "-n", ns, "addr", "add", address, "dev", inner])
            _run(["ip", "-n", ns, "link", "set", inner, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        if not NETNS_ETC.exists():
            NETNS_ETC.mkdir(exist_ok=True)
            self._made_netns_etc = True
        for i in range(len(self.hosts)):
            (NETNS_ETC / self.namespaces[i]).mkdir(parents=True, exist_ok=True)
            self.map_host(i)

    def map_host(self, node: int, names: dict[str, str] | None = None) -> None:
        """Write node i's /etc/hosts: every node's host name to its address, then `names`
        (host name -> address) over them. Processes started afterwards see it.

        `map_host(0, {cluster.hosts[0]: "127.0.1.1"})` makes node 0 a machine whose own name
        resolves to loopback, as Debian's installer writes /etc/hosts."""
        entries = dict(zip(self.hosts, self.addresses)) | (names or {})
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{address}\t{host}" for host, address in entries.items()]
        # written beside, not inside, the namespace's directory: `ip netns exec` mounts every
        # file in there over its namesake in /etc
        tmp = NETNS_ETC / f".{self.namespaces[node]}.hosts"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.hosts_file(node))

    def hosts_file(self, node: int) -> Path:
        """The file `ip netns exec` mounts over /etc/hosts for node i's processes."""
        return NETNS_ETC / self.namespaces[node] / "hosts"

    def _check_reachable(self) -> None:
        """Every node answers every other one, or the cluster is not up."""
        problems = []
        for i in range(len(self.hosts)):
            peers = [a for j, a in enumerate(self.addresses) if j != i] or [self.addresses[i]]
            argv = [*self._in_ns(i), sys.executable, "-c", _PING, str(REACH_TIMEOUT), *peers]
            proc = _run(argv, check=False)
            if proc.returncode != 0:
                silent = proc.stdout.strip() or proc.stderr.strip()
                problems.append(f"node {i} ({self.addresses[i]}) cannot reach {silent}")
        if problems:
            raise ClusterError(
                f"the cluster on bridge {self.bridge} is not up: {'; '.join(problems)} "
                "(a firewall on bridged traffic? see /proc/sys/net/bridge/bridge-nf-call-iptables)"
            )

    def _in_ns(self, node: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[node]]

    # --- running ---------------------------------------------------------------------------

    def popen(
        self,
        node: int,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        slow_cpu: bool = False,
        **popen_kwargs: Any,
    ) -> subprocess.Popen[Any]:
        """Start argv on node i: its namespace, its host name, GLOO_SOCKET_IFNAME set to its
        interface, `env` over os.environ, in a session of its own (so `kill_node` stops it
        and its children). With `slow_cpu`, it joins the node's cgroup (`cpu_quota`) before
        it execs argv, so every process it starts is throttled too."""
        # each shell `exec`s, `unshare` and `ip netns exec` too: the Popen's pid is argv's
        wrapped = self._wrapped(node, argv)
        if slow_cpu:
            if node not in self._cgroups:
                raise ValueError(f"slow_cpu: call cpu_quota({node}, fraction) first")
            # before `ip netns exec`, which mounts a /sys of the namespace's own over the cgroups
            procs = shlex.quote(str(self._cgroups[node] / "cgroup.procs"))
            wrapped = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *wrapped]
        merged = {**os.environ, "GLOO_SOCKET_IFNAME": self.interfaces[node], **(env or {})}
        popen_kwargs["start_new_session"] = True
        proc = subprocess.Popen(wrapped, env=merged, cwd=cwd, **popen_kwargs)
        self._procs[node].append(proc)
        return proc

    def _wrapped(self, node: int, argv: list[str]) -> list[str]:
        """argv in node i's namespace, under its own host name."""
        script = f'hostname {shlex.quote(self.hosts[node])} && exec "$@"'
        return [*self._in_ns(node), "unshare", "--uts", "sh", "-c", script, "sh", *argv]

    def shell_line(self, node: int, argv: list[str]) -> str:
        """argv as `popen` runs it on node i (its namespace, host name and interface), as
        one shell line: for a command that starts every node's processes itself (one
        `commbench record` around both nodes' launchers)."""
        interface = f"GLOO_SOCKET_IFNAME={self.interfaces[node]}"
        return shlex.join(self._wrapped(node, ["env", interface, *argv]))

    def kill_node(self, node: int) -> None:
        """SIGKILL every process group started on node i, and every process left in its
        namespace: one that started a session of its own (commbench's torchrun) too."""
        for proc in self._procs[node]:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while True:
            pids = self._namespace_pids(node)
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if not pids or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for proc in self._procs[node]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def _namespace_pids(self, node: int) -> list[int]:
        proc = _run(["ip", "netns", "pids", self.namespaces[node]], check=False)
        return [int(p) for p in proc.stdout.split() if p.isdigit()]

    # --- degrading -------------------------------------------------------------------------

    def shape(
        self, node: int, rate_mbit: float, *, burst_kb: int = 64, latency_ms: int = 50
    ) -> None:
        """Make node i's link a slow one: a token bucket of `rate_mbit` on both of its veth
        ends, so what it sends and what it receives are limited alike."""
        if rate_mbit <= 0:
            raise ValueError(f"rate_mbit must be positive, not {rate_mbit}")
        tbf = ["root", "tbf", "rate", f"{max(round(rate_mbit * 1000), 1)}kbit"]
        tbf += ["burst", f"{burst_kb}kb", "latency", f"{latency_ms}ms"]
        self._shaped.add(node)
        _run(["tc", "qdisc", "replace", "dev", self._outer[node], *tbf])
        _run([*self._in_ns(node), "tc", "qdisc", "replace", "dev", self.interfaces[node], *tbf])

    def cpu_quota(self, node: int, fraction: float) -> None:
        """Make node i a slow node: its cgroup (made once) gets `fraction` of one CPU per
        100 ms period. Processes join it through `popen(..., slow_cpu=True)` or
        `move_to_cgroup`."""
        quota = int(fraction * CFS_PERIOD_US)
        if quota < 1000:  # the kernel's floor: 1 ms per period
            raise ValueError(f"fraction must be at least 0.01, not {fraction}")
        group = self._cgroups.get(node)
        if group is None:
            group = CGROUP_CPU / f"{self.tag}n{node}"
            group.mkdir()
            self._cgroups[node] = group
        (group / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(quota))

    def cgroup(self, node: int) -> Path | None:
        """Node i's cgroup directory, once `cpu_quota` made it."""
        return self._cgroups.get(node)

    def move_to_cgroup(self, node: int, pid: int) -> None:
        """Throttle a process already running (all its threads; not its existing children)."""
        if node not in self._cgroups:
            raise ValueError(f"move_to_cgroup: call cpu_quota({node}, fraction) first")
        (self._cgroups[node] / "cgroup.procs").write_text(str(pid))

    # --- tearing down ----------------------------------------------------------------------

    def _cleanup(self) -> None:
        """Idempotent and never raises: each step is tried whatever the others did."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._cleanup)

        def attempt(what: str, step: Any, *args: Any, **kwargs: Any) -> None:
            try:
                step(*args, **kwargs)
            except Exception as exc:
                self.cleanup_problems.append(f"{what}: {exc}")

        for node in self._procs:
            attempt(f"kill node {node}", self.kill_node, node)
        for node in sorted(self._shaped):
            for argv in (
                ["tc", "qdisc", "del", "dev", self._outer[node], "root"],
                [*self._in_ns(node), "tc", "qdisc", "del", "dev", self.interfaces[node], "root"],
            ):
                attempt("remove a qdisc", _run, argv, check=False)
        for group in self._cgroups.values():
            attempt(f"remove {group}", self._remove_cgroup, group)
        for ns in self.namespaces:
            attempt(f"delete namespace {ns}", self._remove_namespace, ns)
        for link in [*self._outer, self.bridge]:
            attempt(f"delete {link}", self._remove_link, link)
        if self._made_netns_etc:
            with contextlib.suppress(OSError):  # another cluster may be using it by now
                NETNS_ETC.rmdir()

    @staticmethod
    def _remove_namespace(ns: str) -> None:
        if ns in _run(["ip", "netns", "list"]).stdout.split():
            _run(["ip", "netns", "del", ns])
        (NETNS_ETC / f".{ns}.hosts").unlink(missing_ok=True)
        if (NETNS_ETC / ns).exists():
            shutil.rmtree(NETNS_ETC / ns)

    @staticmethod
    def _remove_link(link: str) -> None:
        # a veth goes with its namespace's end: only what is still there is deleted
        if _run(["ip", "link", "show", "dev", link], check=False).returncode == 0:
            _run(["ip", "link", "del", link])

    @staticmethod
    def _remove_cgroup(group: Path) -> None:
        """Empty the cgroup (a process moved in from outside goes back to the root one: it
        is not ours to kill) and remove it."""
        for _ in range(50):
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (CGROUP_CPU / "cgroup.procs").write_text(pid)
                time.sleep(0.05)
        group.rmdir()
