"""Inter-node busbw against the NICs' line rate, on a stored two-node run.

tests/fixtures/runs/two-node-gloo-pcie8 is a real run: two commbench "nodes" on localhost
(2 gloo ranks each), launched with COMMBENCH_SYSFS_ROOT=tests/fixtures/sysfs/pcie8_eth so the
snapshot it embeds has NICs with known rates (a 100 GbE RoCE port, 1 GbE, a virtio port)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from commbench.report.document import build_report
from commbench.report.options import Images
from commbench.report.writers import to_markdown
from commbench.results.network import ABOVE_LINE_RATE, UNKNOWN_RATE, busbw_bound, network_lines
from commbench.results.runs import Run, load_run
from commbench.sizes import format_size
from commbench.topology.sysfs import SYSFS_ENV
from tests.factories import fake_snapshot

HERE = Path(__file__).parent
RUN = HERE / "fixtures" / "runs" / "two-node-gloo-pcie8"


def run() -> Run:
    return load_run(RUN)


def test_stored_two_node_run_against_its_nic() -> None:
    r = run()
    assert r.context.nnodes == 2 and r.context.backend == "gloo"
    lines = network_lines(r.rows, r.context)
    # gloo without GLOO_SOCKET_IFNAME: one interface, the fastest up one (mlx5_0, 100 Gb/s)
    assert lines[0].startswith("network peak: 1 x 100 Gb/s per node = 12.5 GB/s (mlx5_0;")
    by_op = {line.split()[0]: line for line in lines[1:]}
    assert set(by_op) == {"all_reduce", "all_gather", "all_to_all", "sendrecv"}
    # W = 4 ranks, G = 2 per node: all_to_all bound B (W-1)/(G (W-G)) = 12.5 * 3/4, sendrecv B/G
    assert "% of 9.38 GB/s (all_to_all's bound on 1 x 100 Gb/s)" in by_op["all_to_all"]
    assert "bound" not in by_op["sendrecv"]  # one rank per node sends, through the one NIC
    assert "bound" not in by_op["all_reduce"]  # a ring op's bound is the node's NIC rate
    a2a = next(x for x in r.rows if x.op == "all_to_all" and x.size_bytes == 4 << 20)
    # the percentage is of the op's bound (9.38 GB/s), not of the node's 12.5 GB/s
    assert f"= {100 * (a2a.busbw_gbps or 0) / 9.375:.0f}% of 9.38" in by_op["all_to_all"]
    best = max((x for x in r.rows if x.op == "all_reduce"), key=lambda x: x.busbw_gbps or 0)
    assert f"= {100 * (best.busbw_gbps or 0) / 12.5:.0f}% of 1 x 100 Gb/s" in by_op["all_reduce"]


def test_unknown_rate_is_said() -> None:
    r = run()
    context = dataclasses.replace(r.context, env={"GLOO_SOCKET_IFNAME": "eth0"})
    assert network_lines(r.rows, context) == [f"network: {UNKNOWN_RATE}: eth0"]


def test_single_node_runs_have_no_network_note() -> None:
    r = run()
    assert network_lines(r.rows, dataclasses.replace(r.context, nnodes=1)) == []


def test_nccl_uses_the_rdma_nics_the_env_names() -> None:
    r = run()
    env = {SYSFS_ENV: str(HERE / "fixtures" / "sysfs" / "dgx_h100")}
    dgx = fake_snapshot("dgx_h100", env)
    context = dataclasses.replace(r.context, backend="nccl", topology=dgx, env={})
    assert network_lines(r.rows, context)[0].startswith("network peak: 8 x 400 Gb/s per node")
    some = dataclasses.replace(context, env={"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"})
    assert "2 x 400 Gb/s per node = 100.0 GB/s" in network_lines(r.rows, some)[0]
    but_one = dataclasses.replace(context, env={"NCCL_IB_HCA": "^mlx5_0"})
    assert "7 x 400 Gb/s" in network_lines(r.rows, but_one)[0]
    # a busbw past the node's 400 GB/s cannot have crossed the NICs
    fast = [dataclasses.replace(x, busbw_gbps=450.0) for x in r.rows if x.op == "all_reduce"]
    line = network_lines(fast, context)[1]
    assert "= 112% of 8 x 400 Gb/s" in line and ABOVE_LINE_RATE in line


def test_report_carries_the_network_note() -> None:
    text = to_markdown(build_report(RUN, Images.none)).text
    assert "\n## Network efficiency\n\n- network peak: 1 x 100 Gb/s per node" in text
    assert "(#network-efficiency)" in text  # in the contents list


def test_every_bandwidth_bound_point_and_no_latency_bound_one() -> None:
    r = run()
    lines = network_lines(r.rows, r.context, every_point=True)[1:]
    peaks: dict[tuple[str, bool], float] = {}
    for x in r.rows:
        if x.busbw_gbps:
            key = (x.op, x.in_place)
            peaks[key] = max(peaks.get(key, 0.0), x.busbw_gbps)
    bound = [x for x in r.rows if x.busbw_gbps and x.busbw_gbps >= 0.5 * peaks[(x.op, x.in_place)]]
    latency = [x for x in r.rows if x.busbw_gbps and x not in bound]
    assert len(lines) == len(bound) and latency  # the run has both kinds
    for x in latency:
        assert not any(line.startswith(f"{x.op} {format_size(x.size_bytes)}:") for line in lines)


def test_the_bound_is_the_slowest_nodes() -> None:
    """The other node sent its NICs (as a multi-node run's workers do): its RoCE port is down,
    so gloo's fastest interface there is the 1 GbE port, and that bounds every ring."""
    from commbench.health.record import NodeHealth, RunHealth

    r = run()
    assert r.context.topology is not None
    nics = [dataclasses.replace(n) for n in r.context.topology.nics]
    theirs = [dataclasses.replace(n, state="down") if n.name == "mlx5_0" else n for n in nics]
    slow = NodeHealth(node=1, host="node-b", nics=theirs)
    context = dataclasses.replace(r.context, health=RunHealth(node=0, nodes=[slow]))
    lines = network_lines(r.rows, context)
    assert lines[0].startswith("network peak: 1 x 1 Gb/s per node = 0.125 GB/s (eno1;")
    assert "the slowest node's NICs (node-b; this node has 1 x 100 Gb/s)" in lines[0]
    assert "assumed" not in lines[0].split("(eno1;")[1].replace("assumed the fastest", "")
    # the same NICs as this node's: the bound stays this node's, nothing is assumed
    alike = dataclasses.replace(slow, nics=nics)
    same = dataclasses.replace(r.context, health=RunHealth(node=0, nodes=[alike]))
    first = network_lines(r.rows, same)[0]
    assert first.startswith("network peak: 1 x 100 Gb/s per node") and "slowest" not in first
    assert "nodes assumed like this one" not in first
    # a node whose interface reports no speed makes the bound unknown, and is named
    virtio = [dataclasses.replace(n, speed_gbps=None) for n in theirs]
    unknown = dataclasses.replace(slow, nics=virtio)
    context = dataclasses.replace(r.context, health=RunHealth(node=0, nodes=[unknown]))
    (line,) = network_lines(r.rows, context)
    assert line.startswith(f"network: {UNKNOWN_RATE}: ") and line.endswith(" on node-b")
    # the record round-trips the NICs
    again = RunHealth.from_dict(RunHealth(node=0, nodes=[slow]).to_dict(), "health")
    assert again.nodes[0].nics == theirs


def test_sendrecv_is_bounded_by_one_nic_and_tiny_shares_read_below_one_percent() -> None:
    """One rank per node sends off-node, through one NIC: on 8 x 400 Gb/s that is 50 GB/s,
    and the stored run's 0.24 GB/s is below 1% of it, printed so, never as 0%."""
    r = run()
    env = {SYSFS_ENV: str(HERE / "fixtures" / "sysfs" / "dgx_h100")}
    dgx = fake_snapshot("dgx_h100", env)
    context = dataclasses.replace(r.context, backend="nccl", topology=dgx, env={})
    by_op = {line.split()[0]: line for line in network_lines(r.rows, context)[1:]}
    assert "<1% of 50 GB/s (sendrecv's bound on 8 x 400 Gb/s)" in by_op["sendrecv"]
    assert busbw_bound("sendrecv", 16, 2, 400.0, 50.0) == 50.0
    assert busbw_bound("sendrecv", 16, 2, 400.0) == 400.0  # no NIC figure: the node's
    assert busbw_bound("all_reduce", 8, 1, 400.0, 50.0) is None  # one node: no network
