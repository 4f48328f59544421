"""Health snapshots and their findings: fake NVML machines (the hardware this machine lacks)
and a fixture sysfs tree, through the real capture and comparison code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.health.capture import take
from commbench.health.findings import FindingKind, findings
from commbench.health.record import GpuHealth, HealthSnapshot, RdmaPortHealth, RunHealth
from tests.fixtures.topology.fake_nvml import FakeNvml, load_machine

SYSFS = Path(__file__).parent / "fixtures" / "health" / "sysfs"


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(SYSFS, root)
    return root


def _port_counter(root: Path, dev: str, name: str) -> Path:
    return root / "class" / "infiniband" / dev / "ports" / "1" / "counters" / name


def test_snapshot_reads_every_counter_of_the_fake_machine(sysfs: Path) -> None:
    snap = take(FakeNvml(load_machine("health4")), root=sysfs)
    assert snap.errors == []
    assert [g.index for g in snap.gpus] == [0, 1, 2, 3]
    gpu3 = snap.gpus[3]
    assert (gpu3.pcie_cur_gen, gpu3.pcie_cur_width, gpu3.pcie_max_width) == (5, 8, 16)
    assert gpu3.pci_bus_id == "00000000:5D:00.0"
    assert sorted(gpu3.nvlink_errors) == ["0", "1"]
    assert snap.gpus[1].nvlink_errors["0"]["crc_flit"] == 7
    assert gpu3.ecc == {
        "volatile_corrected": 0,
        "volatile_uncorrected": 0,
        "aggregate_corrected": 0,
        "aggregate_uncorrected": 0,
    }
    assert gpu3.throttle == ["sw_power_cap"]
    assert gpu3.power_w == 120.0 and gpu3.temperature_c == 40
    assert gpu3.remapped_uncorrected == 0 and gpu3.retired_pages_dbe == 0
    ports = {p.name: p for p in snap.ports}
    assert sorted(ports) == ["mlx5_0/1", "mlx5_1/1"]
    assert ports["mlx5_0/1"].state == "ACTIVE"
    assert ports["mlx5_0/1"].rate == "400 Gb/sec (4X NDR)"
    assert ports["mlx5_0/1"].width == "4X" and ports["mlx5_0/1"].link_layer == "InfiniBand"
    assert ports["mlx5_0/1"].counters["hw_out_of_sequence"] == 0
    # a missing file is skipped, a file that is not an integer too
    assert "link_downed" not in ports["mlx5_1/1"].counters
    assert "hw_out_of_sequence" not in ports["mlx5_1/1"].counters
    assert ports["mlx5_1/1"].counters["symbol_error"] == 5


def test_downtrained_link_and_moving_counters_are_found(sysfs: Path) -> None:
    nvml = FakeNvml(load_machine("health4"))
    before = take(nvml, root=sysfs)
    _port_counter(sysfs, "mlx5_0", "symbol_error").write_text("12\n")
    after = take(nvml, root=sysfs)
    messages = [f.message for f in findings(before, after)]
    assert messages == [
        "GPU1: NVLink crc_flit +3 during the run (each of its 2 links)",
        "GPU3: PCIe Gen5 x8, max x16: half the host bandwidth",
        "mlx5_0/1: symbol_error +12 during the run",
    ]


def test_nothing_moved_nothing_found(sysfs: Path) -> None:
    machine = load_machine("dgx_h100")
    nvml = FakeNvml(machine)
    assert findings(take(nvml, root=sysfs), take(nvml, root=sysfs)) == []


def test_generation_is_judged_only_when_the_gpu_was_busy() -> None:
    idle = GpuHealth(
        index=2,
        pcie_cur_gen=1,
        pcie_max_gen=5,
        pcie_cur_width=16,
        pcie_max_width=16,
        throttle=["gpu_idle"],
    )
    busy = GpuHealth(
        index=2, pcie_cur_gen=4, pcie_max_gen=5, pcie_cur_width=16, pcie_max_width=16, throttle=[]
    )
    assert findings(HealthSnapshot(gpus=[idle]), HealthSnapshot(gpus=[idle])) == []
    found = findings(HealthSnapshot(gpus=[idle]), HealthSnapshot(gpus=[busy]))
    assert [f.message for f in found] == [
        "GPU2: PCIe Gen4 x16, max Gen5 x16: half the host bandwidth"
    ]
    assert found[0].kind is FindingKind.DOWNTRAINED


def test_downtrained_before_the_run_is_reported_even_without_an_after() -> None:
    gpu = GpuHealth(index=3, pcie_cur_gen=5, pcie_max_gen=5, pcie_cur_width=4, pcie_max_width=16)
    assert [f.message for f in findings(HealthSnapshot(gpus=[gpu]), None)] == [
        "GPU3: PCIe Gen5 x4, max x16: a quarter of the host bandwidth"
    ]


def test_unknown_stays_unknown() -> None:
    """An old driver that answers nothing: no finding, no zero invented."""
    machine = load_machine("one_gpu_old_driver")
    machine["missing"] = [
        *machine.get("missing", []),
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetCurrPcieLinkWidth",
    ]
    machine["absent"] = [
        *machine.get("absent", []),
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetRemappedRows",
    ]
    nvml = FakeNvml(machine)
    before, after = take(nvml, root=Path("/nonexistent")), take(nvml, root=Path("/nonexistent"))
    gpu = after.gpus[0]
    assert gpu.pcie_replay is None and gpu.ecc == {} and gpu.pcie_cur_width is None
    assert gpu.remapped_corrected is None and gpu.remap_pending is None
    assert gpu.throttle is not None  # the older name answered instead
    assert after.ports == [] and after.errors == []
    assert findings(before, after) == []
    # the uncalled functions are not called under a private name
    assert not [c for c in nvml.calls if c.startswith("_")]


def test_counter_that_goes_backwards_is_a_reset_not_a_negative() -> None:
    a = RdmaPortHealth(device="mlx5_0", port=1, counters={"symbol_error": 40, "link_downed": 1})
    b = RdmaPortHealth(device="mlx5_0", port=1, counters={"symbol_error": 2, "link_downed": 1})
    found = findings(HealthSnapshot(ports=[a]), HealthSnapshot(ports=[b]))
    assert [f.kind for f in found] == [FindingKind.COUNTER_RESET]
    assert "-" not in found[0].message.split(":")[1].split("from")[0]
    assert (
        found[0].message
        == "mlx5_0/1: symbol_error went from 40 to 2 (counter reset during the run)"
    )


def test_data_counters_moving_is_not_a_finding() -> None:
    a = RdmaPortHealth(device="mlx5_0", port=1, counters={"port_xmit_data": 1, "symbol_error": 0})
    b = RdmaPortHealth(
        device="mlx5_0", port=1, counters={"port_xmit_data": 10**9, "symbol_error": 0}
    )
    assert findings(HealthSnapshot(ports=[a]), HealthSnapshot(ports=[b])) == []


def test_ecc_retirement_and_throttle_findings() -> None:
    a = GpuHealth(index=0, ecc={"volatile_uncorrected": 0}, retired_pages_dbe=0, throttle=[])
    b = GpuHealth(
        index=0,
        ecc={"volatile_uncorrected": 2},
        retired_pages_dbe=1,
        retired_pending=True,
        throttle=["hw_thermal"],
    )
    kinds = [f.kind for f in findings(HealthSnapshot(gpus=[a]), HealthSnapshot(gpus=[b]))]
    assert kinds == [
        FindingKind.ECC,
        FindingKind.RETIRED,
        FindingKind.RETIRED,
        FindingKind.THROTTLED,
    ]


def test_no_nvml_and_no_sysfs_is_an_error_line_not_a_crash(tmp_path: Path) -> None:
    snap = take(FakeNvml({"gpus": [], "init_error": 12}), root=tmp_path / "missing")
    assert snap.gpus == [] and snap.ports == []
    assert snap.errors == ["NVML: library not found"]


def test_this_machines_real_sysfs_does_not_crash() -> None:
    snap = take(FakeNvml({"gpus": []}), root=Path("/sys"))
    for port in snap.ports:  # none on a machine without RDMA; whatever there is, well formed
        assert port.port >= 0 and all(v >= 0 for v in port.counters.values())
    json.dumps(snap.to_dict(), allow_nan=False)


def test_snapshot_round_trips_and_is_checked_on_read(sysfs: Path) -> None:
    nvml = FakeNvml(load_machine("health4"))
    health = RunHealth(before=take(nvml, root=sysfs), after=take(nvml, root=sysfs))
    data = json.loads(json.dumps(health.to_dict(), allow_nan=False))
    again = RunHealth.from_dict(data, "run.json: context.health")
    assert again.to_dict() == health.to_dict()
    data["after"]["gpus"][1]["pcie_replay"] = "many"
    with pytest.raises(UserError, match=r"context.health.after.gpus\[1\].pcie_replay"):
        RunHealth.from_dict(data, "run.json: context.health")


def test_one_gpu_whose_binding_breaks_does_not_hide_the_others(sysfs: Path) -> None:
    nvml = FakeNvml(load_machine("health4"))
    broken = nvml.gpus[2]
    del broken["pci_bus_id"]  # the fake raises KeyError for GPU2's PCI info, as a bad binding might
    snap = take(nvml, root=sysfs)
    assert [g.index for g in snap.gpus] == [0, 1, 3]
    assert snap.errors == ["NVML: GPU2: KeyError: 'pci_bus_id'"]


def test_a_record_from_before_health_loads_without_it() -> None:
    from commbench.health.findings import report_lines
    from commbench.results.runs import load_run

    run = load_run(Path(__file__).parent / "fixtures" / "runs" / "h100x8-golden")
    assert run.context.health is None and "health" not in run.context.extra
    assert run.health_findings() == [] and report_lines(run.context.health) == []
    assert "health" not in run.context.to_dict()


def _nvlinks(values: dict[str, int]) -> GpuHealth:
    return GpuHealth(
        index=5, nvlink_errors={k: {"crc_flit": v, "replay": 0} for k, v in values.items()}
    )


def test_nvlink_counters_are_one_line_per_counter_and_change() -> None:
    before = _nvlinks({str(i): 0 for i in range(18)})
    every = _nvlinks({str(i): 7 for i in range(18)})
    some = _nvlinks({**{str(i): 0 for i in range(18)}, "2": 7, "11": 7, "4": 1})
    reset = _nvlinks({**{str(i): 0 for i in range(18)}, "3": 0})
    reset_before = _nvlinks({**{str(i): 0 for i in range(18)}, "3": 9})

    def said(a: GpuHealth, b: GpuHealth) -> list[str]:
        return [f.message for f in findings(HealthSnapshot(gpus=[a]), HealthSnapshot(gpus=[b]))]

    assert said(before, every) == ["GPU5: NVLink crc_flit +7 during the run (each of its 18 links)"]
    assert said(before, some) == [
        "GPU5: NVLink crc_flit +7 during the run (each of links 2, 11)",
        "GPU5: NVLink crc_flit +1 during the run (link 4)",
    ]
    assert said(reset_before, reset) == [
        "GPU5: NVLink 3 crc_flit went from 9 to 0 (counter reset during the run)"
    ]
    assert said(before, before) == []


def _port(
    name: str,
    rate: str | None,
    state: str = "ACTIVE",
    layer: str = "InfiniBand",
    hca: str | None = "MT4129",
) -> RdmaPortHealth:
    device, _, port = name.partition("/")
    width = rate.split("(")[1].split()[0] if rate and "(" in rate else None
    return RdmaPortHealth(
        device=device,
        port=int(port),
        state=state,
        rate=rate,
        width=width,
        link_layer=layer,
        hca_type=hca,
    )


def test_rdma_port_trained_narrower_or_slower_than_the_node_s_others() -> None:
    ndr = "400 Gb/sec (4X NDR)"
    ports = [
        _port("mlx5_0/1", ndr),
        _port("mlx5_1/1", "100 Gb/sec (1X NDR)"),  # a bad lane: trained 1X
        _port("mlx5_2/1", ndr),
        _port("mlx5_3/1", "200 Gb/sec (4X HDR)"),  # one HDR among NDR: a cable or setting
        _port("mlx5_4/1", ndr),
        _port("mlx5_5/1", None, state="DOWN"),  # an unused port: not a finding
        _port("mlx5_6/1", "100 Gb/sec (4X EDR)", layer="Ethernet"),  # RoCE: not judged
        _port("mlx5_7/1", "25 Gb/sec (1X EDR)", layer="Ethernet"),  # 25 GbE by design
        _port("mlx5_8/1", "200 Gb/sec (4X HDR)", hca="MT4123"),  # storage: a ConnectX-6
        _port("mlx5_9/1", "200 Gb/sec (4X HDR)", hca="MT4123"),
    ]
    found = findings(HealthSnapshot(ports=ports), None)
    assert [(f.subject, f.kind, f.message) for f in found] == [
        (
            "mlx5_1/1",
            FindingKind.DOWNTRAINED,
            "mlx5_1/1: 100 Gb/sec (1X NDR), other InfiniBand ports trained 4X",
        ),
        (
            "mlx5_3/1",
            FindingKind.DOWNTRAINED,
            "mlx5_3/1: 200 Gb/sec (4X HDR), other InfiniBand ports run 400 Gb/sec",
        ),
    ]
    # one faster port is no majority: a node may mix an HDR storage port with an NDR one
    pair = [_port("mlx5_0/1", ndr), _port("mlx5_1/1", "200 Gb/sec (4X HDR)")]
    assert findings(HealthSnapshot(ports=pair), None) == []
    # a lone port, or one whose rate the kernel did not give, is judged against nothing
    assert findings(HealthSnapshot(ports=[_port("mlx5_0/1", "100 Gb/sec (1X NDR)")]), None) == []
    assert findings(HealthSnapshot(ports=[_port("mlx5_9/1", None), *pair[:1]]), None) == []


def test_rdma_port_downtrained_in_a_real_sysfs_tree(sysfs: Path) -> None:
    rate = sysfs / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "rate"
    rate.write_text("100 Gb/sec (1X NDR)\n")
    snap = take(FakeNvml({"gpus": []}), root=sysfs)
    assert [p.hca_type for p in snap.ports] == ["MT4129", "MT4129"]
    assert [f.message for f in findings(snap, take(FakeNvml({"gpus": []}), root=sysfs))] == [
        "mlx5_1/1: 100 Gb/sec (1X NDR), other InfiniBand ports trained 4X"
    ]
    # the same port on an adapter of another model is judged against nothing
    (sysfs / "class" / "infiniband" / "mlx5_1" / "hca_type").write_text("MT4123\n")
    assert findings(take(FakeNvml({"gpus": []}), root=sysfs), None) == []


def test_a_slowdown_at_either_end_of_the_run_is_reported_with_the_readings() -> None:
    hot = GpuHealth(index=2, throttle=["sw_power_cap", "hw_thermal"], temperature_c=91)
    cooled = GpuHealth(index=2, throttle=["gpu_idle"], temperature_c=64, power_w=118.5)
    found = findings(HealthSnapshot(gpus=[hot]), HealthSnapshot(gpus=[cooled]))
    assert [(f.kind, f.message) for f in found] == [
        (FindingKind.THROTTLED, "GPU2: clocks slowed by hw_thermal (now 64 C, 118.5 W)")
    ]
    # a power cap under load and an idle GPU are normal operation
    capped = GpuHealth(index=2, throttle=["sw_power_cap"])
    assert findings(HealthSnapshot(gpus=[capped]), HealthSnapshot(gpus=[cooled])) == []
    # unknown reasons (an old driver) say nothing
    assert findings(HealthSnapshot(gpus=[GpuHealth(index=2)]), None) == []


def test_hoppers_nvlink_ecc_counter_is_read_and_its_move_found(sysfs: Path) -> None:
    machine = load_machine("health4")
    machine["gpus"][2].update(nvlink_ecc_data=1, counter_step={"nvlink_ecc_data": 2})
    nvml = FakeNvml(machine)
    before = take(nvml, root=sysfs)
    assert before.gpus[2].nvlink_errors["0"]["ecc_data"] == 1
    messages = [f.message for f in findings(before, take(nvml, root=sysfs))]
    assert "GPU2: NVLink ecc_data +2 during the run (each of its 2 links)" in messages


def test_counters_not_read_are_listed_and_never_called_unmoved(sysfs: Path) -> None:
    from commbench.health.findings import report_lines

    machine = load_machine("health4")
    machine["defaults"].update(nvlink_unsupported=["ecc_data"])
    machine["gpus"][0].update(nvlink_unsupported=["crc_data", "ecc_data"])
    machine["gpus"][1].update(counter_step={}, nvlink_no_permission=["crc_flit"])
    machine["gpus"][3].update(pcie_cur_width=16)  # a healthy node: nothing to find
    nvml = FakeNvml(machine)
    before, after = take(nvml, root=sysfs), take(nvml, root=sysfs)
    gpu0, gpu1 = after.gpus[0], after.gpus[1]
    assert gpu0.nvlink_unread == {"crc_data": "not supported", "ecc_data": "not supported"}
    assert sorted(gpu0.nvlink_errors["0"]) == ["crc_flit", "recovery", "replay"]
    assert gpu1.nvlink_unread == {"crc_flit": "no permission", "ecc_data": "not supported"}
    # the record keeps them through a round trip
    assert (
        HealthSnapshot.from_dict(after.to_dict(), "snapshot").gpus[0].nvlink_unread
        == gpu0.nvlink_unread
    )
    health = RunHealth(before=before, after=after)
    (line,) = [x for x in report_lines(health) if "no error counter moved" in x]
    assert "among the counters read" in line
    assert "NVLink ecc_data not supported on GPU0, GPU1, GPU2, GPU3" in line
    assert "NVLink crc_data not supported on GPU0" in line
    assert "NVLink crc_flit no permission on GPU1" in line
