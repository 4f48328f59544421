"""NIC discovery from sysfs and GPU-NIC affinity: fixture trees (tests/fixtures/sysfs, built by
make_trees.py) with the fake NVML of the same machine, and this machine's real /sys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import UserError
from commbench.topology import TopologySnapshot, load_snapshot, parse_nvidia_smi
from commbench.topology.model import NIC_KINDS
from commbench.topology.network import discover_nics, nearest_nic
from commbench.topology.sysfs import SYSFS_ENV
from tests.factories import fake_snapshot

HERE = Path(__file__).parent
TREES = HERE / "fixtures" / "sysfs"
TOPO = HERE / "fixtures" / "topology"
sys.path.insert(0, str(TOPO))

from fake_nvml import FakeNvml, load_machine  # noqa: E402

runner = CliRunner()


def snapshot(machine: str, tree: str, **kw: bool) -> TopologySnapshot:
    return fake_snapshot(machine, {SYSFS_ENV: str(TREES / tree)}, **kw)


def by_name(s: TopologySnapshot) -> dict[str, object]:
    return {n.name: n for n in s.nics}


# --- DGX H100 ---------------------------------------------------------------------------


def test_dgx_h100_labels_match_the_published_matrix() -> None:
    """GPU-NIC labels computed from PCI paths equal what nvidia-smi printed on an 8x H100
    node for its eight compute NICs."""
    s = snapshot("dgx_h100", "dgx_h100")
    published = parse_nvidia_smi((TOPO / "smi_h100_nvswitch_nv18_13nics.txt").read_text())
    ib = [n for n in s.nics if n.kind == "infiniband"]
    assert [n.name for n in ib] == [f"mlx5_{i}" for i in range(8)]
    for nic, column in zip(ib, published.nics[:8], strict=True):
        assert nic.gpu_links == column.gpu_links, nic.name


def test_dgx_h100_nics_and_nearest() -> None:
    s = snapshot("dgx_h100", "dgx_h100")
    nics = {n.name: n for n in s.nics}
    assert set(nics) == {f"mlx5_{i}" for i in range(8)} | {"enp241s0f0np0", "enp241s0f1np1"}
    ib0 = nics["mlx5_0"]
    assert (ib0.speed_gbps, ib0.state, ib0.numa_node) == (400.0, "up", 0)
    assert (ib0.pci_bus_id, ib0.netdev, ib0.driver) == ("0000:16:00.0", "ibp22s0", "mlx5_core")
    assert ib0.ports[0].link_layer == "InfiniBand" and ib0.ports[0].state == "ACTIVE"
    assert nics["mlx5_7"].numa_node == 1
    for g in s.gpus:
        nearest = nearest_nic(s.nics, g.index)
        assert nearest is not None and nearest.name == f"mlx5_{g.index}"
    down = nics["enp241s0f1np1"]
    assert (down.kind, down.state, down.speed_gbps) == ("ethernet", "down", None)
    assert nics["enp241s0f0np0"].speed_gbps == 100.0
    assert nics["enp241s0f0np0"].gpu_links[0] == "SYS"  # socket 1, GPU 0 on socket 0
    assert nics["enp241s0f0np0"].gpu_links[4] == "NODE"


def test_virtual_interfaces_only_when_asked() -> None:
    assert not {"lo", "docker0", "veth3f2a1b0"} & set(by_name(snapshot("dgx_h100", "dgx_h100")))
    every = snapshot("dgx_h100", "dgx_h100", all_nics=True)
    virtual = {n.name: n for n in every.nics if n.virtual}
    assert set(virtual) == {"lo", "docker0", "veth3f2a1b0"}
    assert virtual["lo"].kind == "loopback" and virtual["lo"].speed_gbps is None
    assert virtual["lo"].gpu_links == ["N/A"] * 8


def test_dgx_h100_snapshot_round_trip_keeps_nics(tmp_path: Path) -> None:
    s = snapshot("dgx_h100", "dgx_h100")
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(s.to_dict()))
    again = load_snapshot(path)
    assert again.to_dict()["nics"] == s.to_dict()["nics"]


# --- PCIe box with Ethernet ---------------------------------------------------------------


def test_pcie_box_roce_and_plain_ethernet() -> None:
    s = snapshot("pcie8", "pcie8_eth")
    nics = {n.name: n for n in s.nics}
    # a netdev that is an RDMA device's other face is that NIC, not a second one
    assert set(nics) == {"mlx5_0", "mlx5_1", "eno1", "eth0"}
    roce = nics["mlx5_0"]
    assert (roce.kind, roce.speed_gbps, roce.netdev) == ("roce", 100.0, "ens3f0np0")
    assert roce.gpu_links == ["NODE", "NODE", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"]
    unplugged = nics["mlx5_1"]
    assert (unplugged.state, unplugged.speed_gbps) == ("down", None)
    assert unplugged.ports[0].rate_gbps is None  # a down port's rate is not its line rate
    assert nics["eno1"].speed_gbps == 1.0
    assert nics["eno1"].gpu_links[:2] == ["NODE", "NODE"]
    virtio = nics["eth0"]
    assert (virtio.speed_gbps, virtio.pci_bus_id, virtio.numa_node) == (
        None,
        "0000:00:03.0",
        None,
    )
    assert nearest_nic(s.nics, 2) is roce and nearest_nic(s.nics, 5) is not None


def test_cli_table_says_unknown_and_lists_virtual_on_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(load_machine("pcie8")))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(SYSFS_ENV, str(TREES / "pcie8_eth"))
    result = runner.invoke(app, ["topo"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("eth0 "))
    assert "unknown" in row.split()
    assert not any(line.startswith("lo ") for line in result.stdout.splitlines())
    assert "Nearest NIC per GPU" in result.stdout
    every = runner.invoke(app, ["topo", "--all-nics", "--format", "json"])
    data = json.loads(every.stdout)
    assert data["schema_version"] == 2
    assert {"name": "lo", "virtual": True}.items() <= next(
        n for n in data["nics"] if n["name"] == "lo"
    ).items()


def test_a_tree_with_only_virtual_interfaces_says_none_recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    virtual_only = tmp_path / "sys"
    (virtual_only / "devices" / "virtual" / "net" / "lo").mkdir(parents=True)
    (virtual_only / "class" / "net").mkdir(parents=True)
    (virtual_only / "class" / "net" / "lo").symlink_to("../../devices/virtual/net/lo")
    monkeypatch.setenv(SYSFS_ENV, str(virtual_only))
    result = runner.invoke(app, ["topo"])
    assert result.exit_code == 0, result.output
    assert "NICs: none recorded (virtual ones, such as lo" in result.stdout
    every = runner.invoke(app, ["topo", "--all-nics"])
    assert "NICs: none recorded" not in every.stdout
    assert any(line.startswith("lo ") for line in every.stdout.splitlines())


@pytest.mark.parametrize("kind", ["missing", "file"])
@pytest.mark.parametrize("command", [["topo"], ["p2p"], ["collectives", "--device", "cpu"]])
def test_a_sysfs_root_that_is_no_directory_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str, command: list[str]
) -> None:
    """A typo in COMMBENCH_SYSFS_ROOT would read as a machine without NICs: refused, exit 2,
    before anything is launched."""
    root = tmp_path / "nope"
    if kind == "file":
        root.write_text("")
    monkeypatch.setenv(SYSFS_ENV, str(root))
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    what = "does not exist" if kind == "missing" else "is not a directory"
    assert (
        result.stderr
        == f"commbench: error: {SYSFS_ENV}={root} {what}: it names a directory laid out like /sys (unset it to read /sys)\n"
    )
    assert not (tmp_path / "results").exists()


# --- robustness ---------------------------------------------------------------------------


def test_missing_files_are_unknowns(tmp_path: Path) -> None:
    (tmp_path / "class/net/bare").mkdir(parents=True)
    (tmp_path / "class/infiniband/mlx5_9").mkdir(parents=True)
    nics = discover_nics(tmp_path, include_virtual=True)
    by = {n.name: n for n in nics}
    assert set(by) == {"bare", "mlx5_9"}
    assert by["bare"].speed_gbps is None and by["bare"].kind == "other" and by["bare"].virtual
    assert by["mlx5_9"].ports == [] and by["mlx5_9"].state is None
    assert discover_nics(tmp_path / "nowhere") == []


def test_version_1_snapshot_still_loads() -> None:
    old = load_snapshot(HERE / "fixtures" / "runs" / "h100x8-golden" / "run.json")
    assert old.schema_version == 2 and all(n.kind is None for n in old.nics)


def test_bad_nic_field_is_named() -> None:
    data = snapshot("pcie8", "pcie8_eth").to_dict()
    data["nics"][0]["speed_gbps"] = -5
    with pytest.raises(UserError, match=r"nics\[0\]\.speed_gbps"):
        TopologySnapshot.from_dict(data)


# --- this machine -------------------------------------------------------------------------


def test_real_sysfs_parses() -> None:
    """Whatever this machine has parses; lo is virtual and skipped by default."""
    if not Path("/sys/class/net").is_dir():
        pytest.skip("no /sys/class/net here")
    every = discover_nics(Path("/sys"), include_virtual=True)
    names = {n.name for n in every}
    assert "lo" in names and next(n for n in every if n.name == "lo").virtual
    assert "lo" not in {n.name for n in discover_nics(Path("/sys"))}
    for nic in every:
        assert nic.speed_gbps is None or nic.speed_gbps > 0
        assert nic.kind in NIC_KINDS
        assert nic.state is None or nic.state == nic.state.lower()


def test_a_tree_whose_path_says_virtual_is_still_read(tmp_path: Path) -> None:
    """Only `devices/virtual` inside the tree makes an interface virtual, not the tree's path."""
    import shutil

    copy = tmp_path / "virtual" / "tree"
    shutil.copytree(TREES / "pcie8_eth", copy, symlinks=True)
    assert {n.name for n in discover_nics(copy)} == {"mlx5_0", "mlx5_1", "eno1", "eth0"}
