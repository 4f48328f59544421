"""`discover()` through a fake NVML: every machine in fixtures/topology/nvml_*.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from commbench.topology import TopologySnapshot, discover, parse_nvidia_smi, render

FIXTURES = Path(__file__).parent / "fixtures" / "topology"
sys.path.insert(0, str(FIXTURES))

from fake_host import make_root  # noqa: E402
from fake_nvml import FakeNvml, load_machine  # noqa: E402

NO_ROOT = Path("/nonexistent-root")


def run(
    name: str, env: dict[str, str] | None = None, root: Path = NO_ROOT, **changes: Any
) -> TopologySnapshot:
    machine = load_machine(name)
    machine.update(changes)
    return discover(nvml=FakeNvml(machine), environ=env or {}, root=root)


def matrix(s: TopologySnapshot) -> list[list[str]]:
    n = len(s.gpus)
    return [["X" if i == j else s.pair(i, j).link for j in range(n)] for i in range(n)]


# --- the machines ------------------------------------------------------------------------


def test_dgx1v_labels_match_the_real_nvidia_smi_output() -> None:
    s = run("dgx1v")
    real = parse_nvidia_smi((FIXTURES / "smi_dgx1v_v100_hybrid_cube_mesh.txt").read_text())
    assert matrix(s) == matrix(real)


def test_dgx1v_pairs() -> None:
    s = run("dgx1v")
    assert len(s.gpus) == 8 and len(s.pairs) == 56
    nv1, nv2, far = s.pair(0, 1), s.pair(0, 3), s.pair(0, 5)
    assert (nv1.link, nv1.nvlinks, nv1.peak_gbps, nv1.p2p) == ("NV1", 1, 25.0, True)
    assert (nv2.link, nv2.nvlinks, nv2.peak_gbps) == ("NV2", 2, 50.0)
    assert nv2.pcie_path == "NODE"  # what the pair would fall back to without NVLink
    # GPU0->GPU5: no NVLink, across QPI, P2P refused: staged through the host at PCIe speed.
    assert (far.link, far.nvlinks, far.p2p) == ("SYS", 0, False)
    assert far.p2p_status == "IOH topology not supported"
    assert far.peak_gbps == pytest.approx(16 * 8 * 128 / 130 / 8)  # Gen3 x16, not current Gen1
    assert "staged through host memory" in far.note
    # Cross-socket NVLink pairs still get P2P over NVLink.
    assert s.pair(0, 4).link == "NV2" and s.pair(0, 4).p2p is True
    assert s.pair(0, 4).peak_gbps == 50.0
    assert not any(p.peak_assumed for p in s.pairs)
    assert all(p.p2p_nvlink is (p.nvlinks > 0) for p in s.pairs)


def test_dgx1v_gpu_facts() -> None:
    s = run("dgx1v")
    g = s.gpus[5]
    assert g.name == "Tesla V100-SXM2-16GB"
    assert g.pci_bus_id == "0000:86:00.0"
    assert g.memory_bytes == 16945512448
    assert (g.numa_node, g.cpu_affinity) == (1, "20-39,60-79")
    assert (g.pcie_max_gen, g.pcie_max_width, g.pcie_cur_gen) == (3, 16, 1)
    assert g.active_nvlinks == 6 and g.nvlink_generation == 2
    assert {lk.remote_type for lk in g.nvlinks} == {"gpu"}
    assert s.host.driver_version == "535.161.08"
    assert s.host.cuda_driver_version == "12.2"
    assert s.nvml_error is None and s.warnings == []


def test_nvswitch_counts_min_of_switch_links() -> None:
    s = run("dgx_h100")
    assert {p.link for p in s.pairs} == {"NV18"}
    assert all(p.peak_gbps == 18 * 25.0 for p in s.pairs)  # 450 GB/s each way
    assert "18 x NVLink4 at 25 GB/s" in s.pair(2, 6).note
    assert s.pair(0, 1).pcie_path == "PXB" and s.pair(0, 7).pcie_path == "SYS"
    real = parse_nvidia_smi((FIXTURES / "smi_h100_nvswitch_nv18_13nics.txt").read_text())
    assert matrix(s) == matrix(real)
    # A GPU with fewer switch links pulls every pair it is in down to its count.
    machine = load_machine("dgx_h100")
    fake = FakeNvml(machine)
    fake._links[3] = fake._links[3][:12]
    degraded = discover(nvml=fake, environ={}, root=NO_ROOT)
    assert degraded.pair(3, 0).link == "NV12" and degraded.pair(0, 3).link == "NV12"
    assert degraded.pair(0, 1).link == "NV18"


def test_pcie_box_has_every_pcie_label() -> None:
    s = run("pcie8")
    assert matrix(s)[0] == ["X", "PIX", "PXB", "PHB", "SYS", "SYS", "SYS", "SYS"]
    assert matrix(s)[4] == ["SYS", "SYS", "SYS", "SYS", "X", "PIX", "NODE", "NODE"]
    assert all(p.nvlinks == 0 for p in s.pairs)
    assert s.pair(0, 1).peak_gbps == pytest.approx(31.508, abs=1e-3)  # Gen4 x16
    # GPU7 trained at x8: every pair with it is bounded by x8.
    assert s.pair(6, 7).peak_gbps == pytest.approx(15.754, abs=1e-3)
    assert "PCIe Gen4 x8" in s.pair(7, 2).note
    assert s.pair(0, 3).p2p is True and "host bridge" in s.pair(0, 3).note
    assert s.pair(3, 4).p2p is False
    assert all(g.nvlinks == [] for g in s.gpus)


def test_workstation_ga102_bridge_rate() -> None:
    s = run("workstation2")
    p = s.pair(0, 1)
    assert (p.link, p.nvlinks, p.p2p) == ("NV4", 4, True)
    assert p.peak_gbps == pytest.approx(56.25)  # not 4 x 25: GA102 links are x4
    assert s.gpus[0].nvlink_generation == 3


def test_old_driver_degrades_to_unknown(tmp_path: Path) -> None:
    root = make_root(tmp_path, sockets=2, cores=10, pci_numa={"0000:3b:00.0": 1})
    s = run("one_gpu_old_driver", root=root)
    g = s.gpus[0]
    assert g.name == "Tesla T4"
    assert g.cpu_affinity is None  # NotSupported
    assert g.numa_node == 1  # memory affinity missing: read from /sys instead
    assert g.gpu_numa_id is None  # FunctionNotFound
    assert (g.pcie_max_gen, g.pcie_cur_gen, g.pcie_cur_width) == (3, None, None)
    assert g.nvlinks == [] and s.pairs == []
    assert s.warnings == []  # expected gaps are not warnings
    assert "Tesla T4" in render(s)


def test_zero_gpus() -> None:
    s = run("zero_gpus")
    assert s.gpus == [] and s.pairs == []
    assert s.no_gpu_message == "no NVIDIA GPU visible (NVML reports no devices)"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (12, "NVML: library not found"),
        (9, "NVML: driver not loaded"),
        (4, "NVML: insufficient permissions"),
    ],
)
def test_nvml_init_failure_is_not_an_error(code: int, reason: str) -> None:
    fake = FakeNvml({"gpus": [], "init_error": code})
    s = discover(nvml=fake, environ={}, root=NO_ROOT)
    assert s.nvml_error == reason
    assert s.no_gpu_message == f"no NVIDIA GPU visible ({reason})"
    assert fake.shutdowns == 0


def test_nvml_is_shut_down_after_discovery() -> None:
    fake = FakeNvml(load_machine("workstation2"))
    discover(nvml=fake, environ={}, root=NO_ROOT)
    assert (fake.initialised, fake.shutdowns) == (1, 1)


def test_unexpected_nvml_errors_become_warnings() -> None:
    fake = FakeNvml(load_machine("workstation2"))

    def lost(*_args: Any) -> Any:
        raise pynvml.NVMLError(15)  # GPU is lost

    object.__setattr__(fake, "nvmlDeviceGetTopologyCommonAncestor", lost)
    s = discover(nvml=fake, environ={}, root=NO_ROOT)
    assert s.pair(0, 1).pcie_path is None
    assert s.pair(0, 1).link == "NV4"  # NVLink facts still stand
    assert s.warnings == ["nvmlDeviceGetTopologyCommonAncestor: GPU is lost"]


def test_host_context(tmp_path: Path) -> None:
    root = make_root(tmp_path, model="AMD EPYC 7742 64-Core Processor", sockets=2, cores=64)
    s = run("dgx_h100", root=root)
    assert s.host.cpu_model == "AMD EPYC 7742 64-Core Processor"
    assert (s.host.cpu_cores, s.host.cpu_threads) == (128, 256)
    assert [(n.id, n.cpus) for n in s.host.numa_nodes] == [
        (0, "0-63,128-191"),
        (1, "64-127,192-255"),
    ]


# --- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------


def test_visible_devices_renumber_like_cuda() -> None:
    s = run("dgx1v", env={"CUDA_VISIBLE_DEVICES": "5,0"})
    assert [g.index for g in s.gpus] == [0, 1]
    assert [g.nvml_index for g in s.gpus] == [5, 0]
    assert s.gpus[0].pci_bus_id == "0000:86:00.0"
    assert len(s.pairs) == 2
    assert s.pair(0, 1).link == "SYS"  # NVML GPU5 -> GPU0
    by_uuid = run("dgx1v", env={"CUDA_VISIBLE_DEVICES": "GPU-0d3f9a1e-5c2b-4e8f-9a7d-000000000003"})
    assert [g.nvml_index for g in by_uuid.gpus] == [3]


def test_hidden_nvswitch_peers_do_not_count_as_switches() -> None:
    # On a DGX-1V with only GPUs 0 and 1 visible, GPU0's links to GPUs 2-4 reach hidden
    # GPUs, not NVSwitches: the pair stays NV1.
    s = run("dgx1v", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert s.pair(0, 1).link == "NV1"


def test_visible_devices_hiding_everything() -> None:
    s = run("dgx1v", env={"CUDA_VISIBLE_DEVICES": ""})
    assert s.gpus == []
    assert s.no_gpu_message == "no NVIDIA GPU visible (CUDA_VISIBLE_DEVICES hides all 8 GPUs)"


def test_visible_mig_instance_maps_to_its_gpu() -> None:
    machine = load_machine("dgx_h100")
    machine["gpus"][6]["mig"] = ["MIG-1a2b3c4d-0000-1111-2222-333344445555"]
    s = discover(
        nvml=FakeNvml(machine), environ={"CUDA_VISIBLE_DEVICES": "MIG-1a2b3c4d"}, root=NO_ROOT
    )
    assert [g.nvml_index for g in s.gpus] == [6]


def test_mixed_models_warn_about_cuda_device_order() -> None:
    machine = load_machine("workstation2")
    machine["gpus"][1]["name"] = "NVIDIA GeForce RTX 3080"
    s = discover(nvml=FakeNvml(machine), environ={}, root=NO_ROOT)
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in w for w in s.warnings)
    quiet = discover(
        nvml=FakeNvml(machine), environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, root=NO_ROOT
    )
    assert quiet.warnings == []


# --- snapshots ---------------------------------------------------------------------------


def test_golden_dgx1v_snapshot() -> None:
    """The saved snapshot is what discovery produces today (regenerate it deliberately)."""
    golden = json.loads((FIXTURES / "snapshot_dgx1v.json").read_text())
    now = run("dgx1v").to_dict()
    for volatile in ("captured_at",):
        now.pop(volatile)
        golden.pop(volatile)
    now["host"] = golden["host"]
    assert now == golden


@pytest.mark.integration
def test_discover_does_not_import_torch() -> None:
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from fake_nvml import FakeNvml, load_machine;"
        "from commbench.topology import discover, render;"
        "render(discover(nvml=FakeNvml(load_machine('dgx1v')), environ={}));"
        "heavy = {'torch', 'pandas', 'matplotlib'} & set(sys.modules);"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code, str(FIXTURES)], check=True)
