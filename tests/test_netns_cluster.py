"""The one-machine cluster harness itself (`tests/netns_cluster.py`): its nodes are distinct
machines as far as a process can tell, a shaped link is slow, a throttled node is throttled,
and nothing of it is left afterwards."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import netns_cluster
import pytest
from netns_cluster import CGROUP_CPU, NETNS_ETC, Cluster, ClusterError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.netns,
]

PORT = 5201  # each node has its own ports: nothing else can hold this one there
PAYLOAD = 2 * 1024 * 1024

# Node 1 takes connections one after another, reads each to its end and says so; node 0
# sends PAYLOAD bytes and prints how long until the whole of it was read.
SERVER = """
import socket, sys
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    conn, _ = srv.accept()
    with conn:
        while conn.recv(1 << 16):
            pass
        conn.sendall(b"done")
"""
CLIENT = """
import socket, sys, time
data = b"x" * int(sys.argv[3])
start = time.monotonic()
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as conn:
    conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
    assert conn.recv(4) == b"done"
print(time.monotonic() - start)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(2) as c:
        yield c


def output(cluster: Cluster, node: int, argv: list[str]) -> str:
    proc = cluster.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out.strip()


def test_each_node_has_its_own_host_name_address_and_interface(cluster: Cluster) -> None:
    names = [output(cluster, i, ["hostname"]) for i in (0, 1)]
    assert names == cluster.hosts and len(set(names)) == 2
    for i in (0, 1):
        shown = output(cluster, i, ["ip", "-4", "-o", "addr", "show"])
        assert f"{cluster.interfaces[i]}    inet {cluster.addresses[i]}/24" in shown
        assert output(cluster, i, ["sh", "-c", "echo $GLOO_SOCKET_IFNAME"]) == cluster.interfaces[i]
    assert len(set(cluster.addresses)) == 2


def test_hosts_files_resolve_every_node(cluster: Cluster) -> None:
    for i, j in ((0, 1), (1, 0), (0, 0)):
        assert output(cluster, i, ["getent", "hosts", cluster.hosts[j]]).split() == [
            cluster.addresses[j],
            cluster.hosts[j],
        ]


def test_shape_slows_the_link_down(cluster: Cluster) -> None:
    server = cluster.popen(
        1, [sys.executable, "-c", SERVER, cluster.addresses[1], str(PORT)], stdout=subprocess.PIPE
    )
    assert server.stdout is not None and server.stdout.readline() == b"ready\n"

    def transfer() -> float:
        argv = [sys.executable, "-c", CLIENT, cluster.addresses[1], str(PORT), str(PAYLOAD)]
        return float(output(cluster, 0, argv))

    fast = transfer()
    cluster.shape(1, rate_mbit=20)
    slow = transfer()
    floor = PAYLOAD * 8 / 20e6  # 0.84 s at 20 Mbit/s
    # only a large factor: the machine may be busy, the exact rate is tc's business
    assert slow > 3 * fast and slow > 0.5 * floor, (fast, slow)


def test_cpu_quota_throttles_what_joins_the_cgroup(cluster: Cluster) -> None:
    cluster.cpu_quota(0, 0.2)
    group = cluster.cgroup(0)
    assert group is not None
    assert (group / "cpu.cfs_quota_us").read_text().strip() == "20000"
    # started with slow_cpu: in the cgroup before it runs a line of its own, children too
    spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 0.5: pass"
    parent = cluster.popen(
        0,
        ["sh", "-c", f"{sys.executable} -c '{spin}' & echo $!; wait"],
        slow_cpu=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    for pid in (parent.pid, child):
        assert f":cpu:/{group.name}\n" in Path(f"/proc/{pid}/cgroup").read_text()
    assert parent.wait(timeout=30) == 0
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    assert int(stat["nr_throttled"]) > 0, stat
    # and a process already running can be moved in
    sleeper = cluster.popen(0, ["sleep", "30"])
    cluster.move_to_cgroup(0, sleeper.pid)
    assert f":cpu:/{group.name}\n" in Path(f"/proc/{sleeper.pid}/cgroup").read_text()


def test_nothing_is_left_after_exit_even_after_a_failure() -> None:
    cluster = Cluster(2)
    with pytest.raises(RuntimeError, match="a test failed"), cluster:
        cluster.shape(0, rate_mbit=100)
        cluster.cpu_quota(1, 0.5)
        procs = [cluster.popen(i, ["sleep", "60"], slow_cpu=i == 1) for i in (0, 1)]
        # a process that leaves its session, as commbench's torchrun does
        runaway = cluster.popen(
            0, ["sh", "-c", "setsid sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True
        )
        assert runaway.stdout is not None
        procs.append(runaway)
        runaway_pid = int(runaway.stdout.readline())
        raise RuntimeError("a test failed")
    assert all(p.poll() is not None for p in procs)  # killed and reaped by __exit__
    assert_gone(cluster)
    assert not _alive(runaway_pid)
    cluster.__exit__(None, None, None)  # idempotent


def test_a_cluster_that_does_not_come_up_says_so_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every node's reachability check reports a silent peer, as a bridge firewall would
    monkeypatch.setattr(netns_cluster, "_PING", "import sys; print(sys.argv[2]); sys.exit(1)")
    cluster = Cluster(2)
    with pytest.raises(ClusterError, match=r"is not up: node 0 \(10\..*\) cannot reach 10\."):
        cluster.__enter__()
    assert_gone(cluster)


def assert_gone(cluster: Cluster) -> None:
    """Nothing of the cluster is left on the machine."""
    assert cluster.cleanup_problems == []
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert cluster.tag not in namespaces and cluster.tag not in links
    assert not list(NETNS_ETC.glob(f"*{cluster.tag}*"))  # none when /etc/netns went too
    assert not list(CGROUP_CPU.glob(f"{cluster.tag}*"))


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie waiting for init to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
