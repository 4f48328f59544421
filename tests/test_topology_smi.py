"""`parse_nvidia_smi` on real `nvidia-smi topo -m` outputs (sources cited in each fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.topology import parse_nvidia_smi

FIXTURES = Path(__file__).parent / "fixtures" / "topology"


def smi(name: str) -> str:
    return (FIXTURES / f"smi_{name}.txt").read_text()


def labels(text: str) -> list[list[str]]:
    """The GPU-to-GPU label matrix of a parsed output, X on the diagonal."""
    s = parse_nvidia_smi(text)
    n = len(s.gpus)
    return [["X" if i == j else s.pair(i, j).link for j in range(n)] for i in range(n)]


def test_every_fixture_cites_its_source() -> None:
    for path in FIXTURES.glob("smi_*.txt"):
        assert path.read_text().startswith("# source: https://"), path.name


def test_dgx1v_hybrid_cube_mesh() -> None:
    s = parse_nvidia_smi(smi("dgx1v_v100_hybrid_cube_mesh"))
    assert s.source == "nvidia-smi"
    assert len(s.gpus) == 8
    assert labels(smi("dgx1v_v100_hybrid_cube_mesh"))[0] == [
        "X",
        "NV1",
        "NV1",
        "NV2",
        "NV2",
        "SYS",
        "SYS",
        "SYS",
    ]
    assert s.pair(0, 3).nvlinks == 2
    assert s.pair(0, 5).nvlinks == 0
    assert s.pair(0, 5).pcie_path == "SYS"
    # Six NVLinks per V100, as the hardware has.
    for g in s.gpus:
        assert sum(s.pair(g.index, o.index).nvlinks for o in s.gpus if o is not g) == 6
    # The old-style NIC column (mlx5_0, no NIC legend) is kept as a NIC, not a GPU.
    assert [(n.name, n.device) for n in s.nics] == [("mlx5_0", "mlx5_0")]
    assert s.nics[0].gpu_links == ["NODE", "NODE", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"]
    # No NUMA column in this output: affinity is known, the NUMA node is not.
    assert s.gpus[4].cpu_affinity == "12-23,36-47"
    assert s.gpus[4].numa_node is None


def test_imported_rates_are_assumed_and_say_so() -> None:
    s = parse_nvidia_smi(smi("dgx1v_v100_hybrid_cube_mesh"))
    nv2, sys_pair = s.pair(0, 3), s.pair(0, 5)
    assert nv2.peak_gbps == pytest.approx(50.0)
    assert nv2.peak_assumed
    assert "assumed 25 GB/s per link" in nv2.note
    assert sys_pair.peak_gbps == pytest.approx(16 * 16 * 128 / 130 / 8)  # assumed Gen4 x16
    assert sys_pair.peak_assumed and "assumed Gen4 x16" in sys_pair.note
    assert nv2.p2p is None
    assert any("assumed rates" in w for w in s.warnings)


def test_h100_nvswitch_with_nic_legend_and_gpu_numa_id() -> None:
    s = parse_nvidia_smi(smi("h100_nvswitch_nv18_13nics"))
    assert len(s.gpus) == 8
    assert all(p.link == "NV18" and p.nvlinks == 18 for p in s.pairs)
    assert len(s.pairs) == 8 * 7
    assert [n.device for n in s.nics][:2] == ["mlx5_ib0", "mlx5_ib1"]
    assert s.nics[12].name == "NIC12" and s.nics[12].device == "mlx5_eth4"
    assert s.nics[0].gpu_links[:4] == ["PIX", "PXB", "NODE", "NODE"]
    assert s.gpus[5].numa_node == 1
    assert s.gpus[5].cpu_affinity == "56-111,168-223"
    assert s.gpus[5].gpu_numa_id is None
    assert [(n.id, n.cpus) for n in s.host.numa_nodes] == [
        (0, "0-55,112-167"),
        (1, "56-111,168-223"),
    ]


def test_a100_p4d_nv12_and_a_comment_line_before_the_header() -> None:
    s = parse_nvidia_smi(smi("a100_p4d_nvswitch_nv12"))
    assert {p.link for p in s.pairs} == {"NV12"}
    assert s.pair(7, 0).peak_gbps == pytest.approx(12 * 25.0)
    assert s.nics == []


def test_pcie_only_boxes() -> None:
    four = parse_nvidia_smi(smi("l40s_g6e_4gpu_node"))
    assert {p.link for p in four.pairs} == {"NODE"}
    assert all(p.nvlinks == 0 for p in four.pairs)

    eight = labels(smi("8gpu_pcie_pix_pxb_sys_numa_na"))
    assert eight[0] == ["X", "PIX", "PXB", "PXB", "SYS", "SYS", "SYS", "SYS"]
    assert eight[6][7] == "PXB"
    s = parse_nvidia_smi(smi("8gpu_pcie_pix_pxb_sys_numa_na"))
    assert all(g.numa_node is None for g in s.gpus)  # NUMA Affinity is N/A throughout
    assert all(g.cpu_affinity == "0-95" for g in s.gpus)

    five = labels(smi("5gpu_sys_phb_node"))
    assert five[1] == ["SYS", "X", "PHB", "NODE", "NODE"]
    assert parse_nvidia_smi(smi("5gpu_sys_phb_node")).gpus[0].numa_node == 1


def test_tab_separated_outputs_with_empty_fields() -> None:
    s = parse_nvidia_smi(smi("rtx4090x8_pcie_sys_tabs"))
    assert len(s.gpus) == 8
    assert {p.link for p in s.pairs} == {"SYS"}
    assert [n.gpu_links[6] for n in s.nics] == ["PHB", "PHB"]
    assert s.gpus[4].numa_node == 1 and s.gpus[4].cpu_affinity == "56-111,168-223"

    two = parse_nvidia_smi(smi("rtx5090x2_workstation_phb_tabs"))
    assert [(p.src, p.dst, p.link) for p in two.pairs] == [(0, 1, "PHB"), (1, 0, "PHB")]


def test_single_gpu_with_a_prompt_line_and_na_numa() -> None:
    s = parse_nvidia_smi(smi("tesla_p4_single_gpu"))
    assert len(s.gpus) == 1 and s.pairs == []
    assert s.gpus[0].cpu_affinity == "0-7"
    assert s.gpus[0].numa_node is None


def test_nvlink_bridges_in_pairs_and_a_truncated_nic_row() -> None:
    s = parse_nvidia_smi(smi("a40x8_nv4_pairs_nics"))
    assert s.pair(0, 1).link == "NV4" and s.pair(0, 1).nvlinks == 4
    assert s.pair(0, 2).link == "NODE" and s.pair(0, 2).nvlinks == 0
    assert s.pair(3, 4).link == "SYS"
    assert [n.name for n in s.nics] == ["NIC0", "NIC1"]  # NIC1 kept from its column
    assert s.nics[1].gpu_links == ["SYS"] * 4 + ["NODE", "NODE", "PIX", "PIX"]


def test_comma_list_affinity_and_scattered_numa_nodes() -> None:
    s = parse_nvidia_smi(smi("h100x4_nv6_nics_cpu_lists"))
    assert [g.numa_node for g in s.gpus] == [3, 1, 7, 5]
    assert s.gpus[0].cpu_affinity == "6,14,22,30"
    assert s.pair(2, 3).nvlinks == 6


def test_old_soc_label_reads_as_sys() -> None:
    # Drivers before 2017 printed SOC for what is now SYS (and had no NODE).
    text = (
        "        GPU0    GPU1    GPU2    GPU3    CPU Affinity\n"
        "GPU0     X      PHB     SOC     SOC     0-23\n"
        "GPU1    PHB      X      SOC     SOC     0-23\n"
        "GPU2    SOC     SOC      X      PHB     0-23\n"
        "GPU3    SOC     SOC     PHB      X      0-23\n"
    )
    assert labels(text)[0] == ["X", "PHB", "SYS", "SYS"]


def test_na_cells_are_unknown_links() -> None:
    text = "        GPU0    GPU1\nGPU0     X      N/A\nGPU1    N/A      X\n"
    s = parse_nvidia_smi(text)
    assert s.pair(0, 1).link == "N/A"
    assert s.pair(0, 1).peak_gbps is None


def test_asymmetric_matrix_is_kept_and_flagged() -> None:
    text = "        GPU0    GPU1\nGPU0     X      NV2\nGPU1    NV1      X\n"
    s = parse_nvidia_smi(text)
    assert (s.pair(0, 1).link, s.pair(1, 0).link) == ("NV2", "NV1")
    assert any("GPU0->GPU1 is NV2 (line 2)" in w for w in s.warnings)


def test_no_devices_found_is_an_empty_snapshot() -> None:
    s = parse_nvidia_smi("No devices were found\n")
    assert s.gpus == []
    assert "No devices were found" in s.no_gpu_message


GOOD = smi("a100_p4d_nvswitch_nv12")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\nworld\n", "no `nvidia-smi topo -m` matrix found"),
        (
            GOOD.replace(
                "GPU3    NV12    NV12    NV12     X", "GPU3    NV12    NVX     NV12     X"
            ),
            "line 8: GPU3 column GPU1: 'NVX' is not a topology label",
        ),
        (
            GOOD.replace("GPU2    NV12    NV12     X ", "GPU2    NV12    NV12    NV12"),
            "line 7: row GPU2 column GPU2: expected X",
        ),
        (
            GOOD.replace(
                "GPU5    NV12    NV12    NV12    NV12    NV12     X      NV12    NV12    "
                "24-47,72-95     1               N/A\n",
                "",
            ),
            "row GPU5 is missing",
        ),
        (
            GOOD.replace(
                "0-23,48-71      0               N/A\nGPU1",
                "0-23,48-71      0               N/A   extra\nGPU1",
            ),
            "line 5: GPU0 has 1 more field(s)",
        ),
        (
            GOOD.replace(
                "GPU4    NV12    NV12    NV12    NV12     X      NV12    NV12    NV12    24-47",
                "GPU4    NV12    NV12    NV12    NV12     X      NV12    NV12    NV12    all",
            ),
            "line 9: GPU4 CPU Affinity: 'all,72-95' is not a CPU list",
        ),
        (GOOD.replace("GPU7    NV12", "GPU9    NV12"), "line 12: row 'GPU9' is not a device"),
        (
            GOOD.replace("GPU1    NV12     X", "GPU1    NV12    NV12", 1),
            "line 6: row GPU1 column GPU1: expected X",
        ),
        ("  GPU0 GPU2\nGPU0 X PIX\nGPU2 PIX X\n", "line 1: expected column GPU1, found GPU2"),
        (
            "  GPU0 GPU1 CPU Affinity Bandwidth\nGPU0 X PIX 0-3\n",
            "line 1: unknown header column starting at 'Bandwidth'",
        ),
        ("  GPU0 GPU1\nGPU0 X\n", "line 2: row GPU0 has 1 cells"),
    ],
)
def test_bad_text_names_the_line(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_nvidia_smi(text)
