"""p2p expectations: per-copy peaks, shared bottlenecks, diagnoses, and the verdict on numbers.

The worked example is the issue's puzzle: 10**8 float32 (400 MB) copied from cuda:0 to
cuda:1, cuda:2 and cuda:4 at once took 4.3, 53.3 and 8.5 ms, i.e. 93.0, 7.5 and 47.1 GB/s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.p2p.expect import Expectation, expect_step, judge
from commbench.p2p.fabric import Fabric, memory_gbps
from commbench.p2p.plan import HOST, Copy, Step, plan
from commbench.p2p.run import copy_row
from commbench.p2p.settings import DEFAULT_SIZE, P2PSettings
from commbench.results.csv_rows import csv_record
from commbench.results.schema import ResultRow
from commbench.topology import TopologySnapshot, load_snapshot, parse_nvidia_smi
from tests.factories import fake_snapshot

FIXTURES = Path(__file__).parent / "fixtures"

PUZZLE_MS = {"0->1": 4.3, "0->2": 53.3, "0->4": 8.5}


def machine(name: str) -> TopologySnapshot:
    return fake_snapshot(name, root=Path("/nonexistent"))


def dgx1v() -> TopologySnapshot:
    return load_snapshot(FIXTURES / "topology" / "snapshot_dgx1v.json")


def puzzle8() -> TopologySnapshot:
    return load_snapshot(FIXTURES / "p2p" / "snapshot_puzzle8.json")


def fan_out(*dsts: int, src: int = 0, size: int = DEFAULT_SIZE, mode: str = "concurrent") -> Step:
    return Step(
        test="bandwidth",
        mode=mode,
        direction="uni",
        size_bytes=size,
        copies=tuple(Copy(src, d) for d in dsts),
    )


def by_pair(snapshot: TopologySnapshot, step: Step) -> dict[str, Expectation]:
    se = expect_step(snapshot, step)
    out = {e.pair: e for e in se.copies}
    if se.total is not None:
        out["total"] = se.total
    return out


# --- the puzzle ----------------------------------------------------------------------------


def test_puzzle_numbers_are_what_the_puzzle_topology_predicts() -> None:
    """NV4, staged through host memory without P2P, NV2: each time within 25% of expected."""
    e = by_pair(puzzle8(), fan_out(1, 2, 4))
    assert (e["0->1"].link, e["0->1"].peak_gbps, e["0->1"].expected_ms) == (
        "NV4",
        100.0,
        pytest.approx(4.44, abs=0.01),
    )
    assert (e["0->4"].link, e["0->4"].peak_gbps) == ("NV2", 50.0)
    assert e["0->4"].expected_ms == pytest.approx(8.89, abs=0.01)
    staged = e["0->2"]
    assert (staged.path, staged.p2p) == ("staged", False)
    assert staged.diagnosis.startswith(
        "P2P not supported between 0 and 2 (chipset not supported): staged through host "
        "memory, bounded by PCIe Gen3 x16"
    )
    assert staged.peak_gbps == pytest.approx(15.754, abs=1e-3)
    for pair, ms in PUZZLE_MS.items():
        expected = e[pair].expected_ms
        assert expected is not None and 0.75 < expected / ms < 1.25, pair
        # None of the three shares anything: concurrent explains nothing here, the path does.
        assert e[pair].shared_with == []
        assert "shares no bottleneck" in e[pair].diagnosis


def test_puzzle_measurements_judged_on_the_puzzle_topology() -> None:
    e = by_pair(puzzle8(), fan_out(1, 2, 4))
    for pair, ms in PUZZLE_MS.items():
        gbps = 4e8 / (ms * 1e-3) / 1e9
        v = judge(e[pair], gbps)
        assert not v.suspicious and v.text == "", pair
    assert judge(e["0->1"], 93.02).efficiency == pytest.approx(0.93, abs=0.01)


def test_puzzle_measurements_on_a_real_dgx1v_do_not_add_up() -> None:
    """On a DGX-1V, 0->1 and 0->2 are NV1 (25 GB/s): 93 GB/s is impossible, 7.5 is slow."""
    e = by_pair(dgx1v(), fan_out(1, 2, 4))
    assert [e[p].link for p in ("0->1", "0->2", "0->4")] == ["NV1", "NV1", "NV2"]
    fast = judge(e["0->1"], 93.02)
    assert fast.suspicious and fast.text.startswith(
        "SUSPICIOUS: 93.0 GB/s is above the 25.0 GB/s theoretical peak (NV1)"
    )
    slow = judge(e["0->2"], 7.5)
    assert not slow.suspicious and slow.text.startswith("slow: 30% of peak")
    assert "through host memory" in slow.text
    good = judge(e["0->4"], 47.06)
    assert good.text == "" and good.efficiency == pytest.approx(0.94, abs=0.01)


def test_measured_row_carries_the_verdict_first() -> None:
    step = fan_out(1, 2, 4)
    se = expect_step(dgx1v(), step)
    row = copy_row(
        index=0, step=step, exp=se.copies[0], samples_ms=[4.2, 4.3, 4.4], dtype="float32",
        check="ok", warmup=5, world_size=8,
    )  # fmt: skip
    assert row.p2p is not None
    assert row.p2p.suspicious and row.busbw_gbps == pytest.approx(93.02, abs=0.01)
    diagnosis = row.p2p.diagnosis
    assert diagnosis.startswith("SUSPICIOUS") and "NV1: 1 x NVLink2 at 25 GB/s" in diagnosis
    flat = csv_record(row)  # results.csv keeps milliseconds
    assert (flat["min_ms"], flat["max_ms"], flat["n"]) == (4.2, 4.4, 3)
    assert se.total is not None
    total = copy_row(
        index=0, step=step, exp=se.total, samples_ms=[53.3], dtype="float32", check="ok",
        warmup=5, world_size=8,
    )  # fmt: skip
    assert total.p2p is not None
    assert total.p2p.copy == "total" and total.p2p.pair == "0->{1,2,4}"
    assert total.busbw_gbps == pytest.approx(1.2e9 / 53.3e-3 / 1e9)
    assert ResultRow.from_dict(row.to_dict()) == row


# --- sharing -------------------------------------------------------------------------------


def test_dgx1v_fan_out_splits_the_pcie_link_among_staged_copies() -> None:
    e = by_pair(dgx1v(), fan_out(*range(1, 8)))
    for pair in ("0->5", "0->6", "0->7"):
        assert e[pair].path == "staged"
        assert e[pair].ceiling_gbps == pytest.approx(15.754 / 3, abs=1e-3)
        # staged copies reach ~60% of the link alone, and share that when together
        assert e[pair].expected_gbps == pytest.approx(0.6 * 15.754 / 3, abs=1e-3)
        assert "shares cuda:0's PCIe Gen3 x16 link, outbound with" in e[pair].diagnosis
        assert "in concurrent mode: 5.3 GB/s at most" in e[pair].diagnosis
        assert "inter-socket link from NUMA node 0 to 1" in e[pair].diagnosis
    assert set(e["0->5"].shared_with) == {"0->6", "0->7"}
    for pair in ("0->1", "0->2", "0->3", "0->4"):  # NVLink pairs keep their own links
        assert e[pair].ceiling_gbps == e[pair].peak_gbps
    sequential = by_pair(dgx1v(), fan_out(5, mode="sequential"))
    assert sequential["0->5"].ceiling_gbps == pytest.approx(15.754, abs=1e-3)
    assert "shares" not in sequential["0->5"].diagnosis


def test_nvswitch_ports_are_shared_by_every_copy_from_one_gpu() -> None:
    e = by_pair(machine("dgx_h100"), fan_out(*range(1, 8)))
    assert e["0->3"].peak_gbps == 450.0
    assert e["0->3"].ceiling_gbps == pytest.approx(450.0 / 7)
    assert "shares cuda:0's NVLinks, outbound with" in e["0->3"].diagnosis
    assert e["total"].ceiling_gbps == pytest.approx(450.0)
    # seven copies through one GPU's ports cannot add up seven port peaks
    assert e["total"].peak_gbps == pytest.approx(450.0)
    # An imported matrix lists no per-GPU links: NV18 to everyone can only be switch links.
    smi = parse_nvidia_smi((FIXTURES / "topology/smi_h100_nvswitch_nv18_13nics.txt").read_text())
    imported = by_pair(smi, fan_out(1, 2))
    assert imported["0->1"].ceiling_gbps == pytest.approx(225.0)
    assert imported["0->1"].assumed and "rates assumed" in imported["0->1"].diagnosis


def test_pcie_box_fan_out_shares_the_source_uplink() -> None:
    snap = machine("pcie8")
    e = by_pair(snap, fan_out(1, 2))
    assert e["0->1"].path == e["0->2"].path == "pcie"
    assert e["0->1"].diagnosis.startswith("P2P over PCIe Gen4 x16 through one PCIe switch")
    assert e["0->1"].ceiling_gbps == pytest.approx(31.508 / 2, abs=1e-3)
    # GPU7 sits in an x8 slot: the slower end bounds the pair.
    assert by_pair(snap, fan_out(7, mode="sequential"))["0->7"].peak_gbps == pytest.approx(
        15.754, abs=1e-3
    )
    # Two GPUs behind one switch sending to the other socket share the switch's uplink
    # even though their own links are separate.
    step = Step(
        test="bandwidth",
        mode="concurrent",
        direction="uni",
        size_bytes=DEFAULT_SIZE,
        copies=(Copy(0, 4), Copy(1, 5)),
    )
    e = by_pair(snap, step)
    assert "shares the uplink of the PCIe switch under cuda:0 and cuda:1, outbound with 1->5" in (
        e["0->4"].diagnosis
    )
    assert e["0->4"].ceiling_gbps == pytest.approx(31.508 / 2, abs=1e-3)


def test_bidirectional_pairs_do_not_share_full_duplex_links() -> None:
    snap = machine("workstation2")
    step = plan(P2PSettings(dsts=[1], bidirectional=True, modes=["sequential"]), 2).steps[0]
    e = by_pair(snap, step)
    assert e["0->1"].ceiling_gbps == e["1->0"].ceiling_gbps == pytest.approx(56.25)
    assert e["total"].pair == "0<->1" and e["total"].ceiling_gbps == pytest.approx(112.5)


def test_copies_that_finish_early_free_their_share() -> None:
    # 0->5 and 0->7 staged with 0->3 (NVLink) on a DGX-1V: two flows share 15.75 GB/s.
    e = by_pair(dgx1v(), fan_out(3, 5, 7, size=10**9))
    assert e["0->5"].ceiling_gbps == pytest.approx(15.754 / 2, abs=1e-3)
    assert e["total"].expected_ms == pytest.approx(
        max(x.expected_ms or 0 for k, x in e.items() if k != "total")
    )


# --- host, local, unknown ------------------------------------------------------------------


def test_host_copies_use_the_gpu_pcie_link() -> None:
    f = Fabric(machine("dgx_h100"))
    r = f.route(Copy(HOST, 2))
    assert (r.path, r.link, r.peak_gbps) == ("host", "PCIe", pytest.approx(63.015, abs=1e-3))
    assert r.description == "pinned host memory to cuda:2 over its PCIe Gen5 x16 link"
    assert f.route(Copy(2, HOST)).resources[0] == "pcie-up:2"


def test_copy_within_one_gpu_is_bounded_by_memory() -> None:
    snap = machine("one_gpu_old_driver")
    step = plan(P2PSettings(), 1).steps[0]
    (e,) = expect_step(snap, step).copies
    assert (e.pair, e.copy, e.path, e.peak_gbps) == ("0->0", "d2d", "local", 160.0)
    assert "Tesla T4: 320 GB/s" in e.diagnosis
    assert memory_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert memory_gbps("NVIDIA H100 PCIe") == 2000.0
    assert memory_gbps("NVIDIA H200") == 4800.0
    assert memory_gbps("NVIDIA A100-SXM4-80GB") == 2039.0
    assert memory_gbps("Tesla V100-SXM2-16GB") == 900.0
    assert memory_gbps("Some Future GPU") is None


def test_unknown_link_has_no_peak_and_no_verdict() -> None:
    from commbench.p2p.run import unknown_topology

    snap = unknown_topology(["NVIDIA H100 80GB HBM3"] * 2, "NVML: library not found")
    e = by_pair(snap, fan_out(1, mode="sequential"))["0->1"]
    assert (e.path, e.peak_gbps, e.expected_gbps) == ("unknown", None, None)
    assert judge(e, 100.0).text == "" and not judge(e, 1e9).suspicious
