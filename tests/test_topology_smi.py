"""`parse_nvidia_smi` on real `nvidia-smi topo -m` outputs (sources cited in each fixture)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.topology import parse_nvidia_smi, rates

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


def test_imported_rates_are_assumed_conservatively_and_say_so() -> None:
    s = parse_nvidia_smi(smi("dgx1v_v100_hybrid_cube_mesh"))
    nv1, nv2, sys_pair = s.pair(0, 1), s.pair(0, 3), s.pair(0, 5)
    # NV1/NV2 could be a P100's first-generation links (20 GB/s), the oldest that many allow
    assert nv2.peak_gbps == pytest.approx(40.0)
    assert nv2.peak_assumed
    assert "assumed 20 GB/s per link" in nv2.note
    assert sys_pair.peak_gbps == pytest.approx(16 * 8 * 128 / 130 / 8)  # assumed Gen3 x16
    assert sys_pair.peak_assumed and "assumed Gen3 x16" in sys_pair.note
    assert nv2.p2p is None
    # the bug this guards: Gen4 assumed for SYS read 31.5 GB/s, faster than NV1's 25
    assert nv1.peak_gbps is not None and sys_pair.peak_gbps is not None
    assert sys_pair.peak_gbps < nv1.peak_gbps
    warning = next(w for w in s.warnings if "assumed rates" in w)
    assert "--gpu" in warning


def test_every_imported_sys_pair_is_slower_than_every_nvlink_pair() -> None:
    for path in FIXTURES.glob("smi_*.txt"):
        s = parse_nvidia_smi(path.read_text())
        nv = [p.peak_gbps for p in s.pairs if p.nvlinks > 0 and p.peak_gbps is not None]
        pcie = [p.peak_gbps for p in s.pairs if p.nvlinks == 0 and p.peak_gbps is not None]
        if nv and pcie:
            assert max(pcie) < min(nv), path.name


def test_named_v100_model_gives_datasheet_rates() -> None:
    s = parse_nvidia_smi(smi("dgx1v_v100_hybrid_cube_mesh"), gpu="Tesla V100-SXM2-16GB")
    assert {g.name for g in s.gpus} == {"Tesla V100-SXM2-16GB"}
    nv1, nv2, sys_pair = s.pair(0, 1), s.pair(0, 3), s.pair(0, 5)
    assert nv1.peak_gbps == pytest.approx(25.0) and nv2.peak_gbps == pytest.approx(50.0)
    assert "2 x NVLink2 at 25 GB/s" in nv2.note
    assert sys_pair.peak_gbps == pytest.approx(16 * 8 * 128 / 130 / 8)  # Gen3 x16, V100's own
    assert "PCIe Gen3 x16" in sys_pair.note and "assumed" not in sys_pair.note
    assert not any(p.peak_assumed for p in s.pairs)
    assert not any("assumed rates" in w for w in s.warnings)


def test_named_model_of_a_slow_nvlink_board() -> None:
    """A40s run NVLink 3 at 14.0625 GB/s per link: the model, not the NV# count, says so."""
    text = smi("a40x8_nv4_pairs_nics")
    named = parse_nvidia_smi(text, gpu="NVIDIA A40")
    nv = [p for p in named.pairs if p.nvlinks > 0]
    assert nv and all(p.peak_gbps == pytest.approx(p.nvlinks * 14.0625) for p in nv)
    pcie = [p for p in named.pairs if p.nvlinks == 0]
    assert pcie and all(p.peak_gbps == pytest.approx(16 * 16 * 128 / 130 / 8) for p in pcie)


def test_a_model_without_nvlink_on_an_nvlink_matrix_is_flagged() -> None:
    s = parse_nvidia_smi(smi("dgx1v_v100_hybrid_cube_mesh"), gpu="Tesla T4")
    assert any("Tesla T4 has no NVLink, but the matrix shows NV# pairs" in w for w in s.warnings)
    assert s.pair(0, 1).peak_assumed and not s.pair(0, 5).peak_assumed


@pytest.mark.parametrize(
    ("given", "model"),
    [
        ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2"),
        ("tesla v100-sxm2-32gb", "Tesla V100-SXM2"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
        ("H100 SXM5", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA A10", "NVIDIA A10"),
        ("l40s", "NVIDIA L40S"),
    ],
)
def test_model_names_match_by_words(given: str, model: str) -> None:
    assert rates.gpu_model(given).name == model


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("Radeon MI300X", "unknown GPU model 'Radeon MI300X'; known: 'Tesla P100-SXM2'"),
        ("V100", "matches several: 'Tesla V100-SXM2', 'Tesla V100-SXM3', 'Tesla V100-PCIE'"),
        ("A1", "unknown GPU model"),  # a word, not a prefix of A10/A100/A40
        ("V100 " * 10_000, "unknown GPU model 'V100 V100"),  # a paste: refused, cut short
    ],
)
def test_unknown_or_ambiguous_model_is_refused(given: str, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        parse_nvidia_smi(smi("dgx1v_v100_hybrid_cube_mesh"), gpu=given)


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


def test_cli_gpu_names_the_model_of_an_imported_matrix() -> None:
    from typer.testing import CliRunner

    from commbench.cli import app

    path = str(FIXTURES / "smi_dgx1v_v100_hybrid_cube_mesh.txt")
    runner = CliRunner()
    plain = runner.invoke(app, ["topo", "--from-smi", path])
    assert plain.exit_code == 0, plain.output
    assert "GPU0<->GPU1  NV1   1        ?    20.0*" in plain.stdout
    assert "GPU0<->GPU5  SYS   0        ?    15.8*" in plain.stdout
    named = runner.invoke(app, ["topo", "--from-smi", path, "--gpu", "Tesla V100-SXM2-16GB"])
    assert named.exit_code == 0, named.output
    assert "GPU model Tesla V100-SXM2-16GB" in named.stdout
    assert "GPU0<->GPU1  NV1   1        ?    25.0       1 x NVLink2 at 25 GB/s" in named.stdout
    assert "GPU0<->GPU5  SYS   0        ?    15.8       PCIe Gen3 x16" in named.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "Tesla Z9000"], "unknown GPU model 'Tesla Z9000'; known: "),
        (["--gpu", "A100"], "matches several: 'NVIDIA A100-SXM4', 'NVIDIA A100-PCIE'"),
    ],
)
def test_cli_unknown_gpu_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from commbench.cli import app

    path = str(FIXTURES / "smi_dgx1v_v100_hybrid_cube_mesh.txt")
    result = CliRunner().invoke(app, ["topo", "--from-smi", path, *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: error: ")
    assert message in lines[0]
    # without an imported matrix there is nothing for --gpu to name
    alone = CliRunner().invoke(app, ["topo", "--gpu", "Tesla T4"])
    assert alone.exit_code == 2 and "give --from-smi too" in alone.stderr


def test_api_topology_takes_the_gpu_keyword() -> None:
    import commbench.api

    path = FIXTURES / "smi_dgx1v_v100_hybrid_cube_mesh.txt"
    s = commbench.api.load_topology(from_smi=path, gpu="Tesla V100-SXM2-16GB")
    assert s.pair(0, 3).peak_gbps == pytest.approx(50.0)
    with pytest.raises(UserError, match="unknown GPU model"):
        commbench.api.load_topology(from_smi=path, gpu="nope")


@pytest.mark.integration
@pytest.mark.parametrize("stdin", ["closed", "terminal", "empty", "blank"])
def test_from_smi_dash_with_no_usable_stdin_is_one_line(stdin: str) -> None:
    """`-` reads stdin: closed (`0<&-`), a terminal (a read would wait forever for typing)
    or empty is one line and exit 2, never a traceback or a hang."""
    import os
    import pty
    import subprocess
    import sys

    command = [sys.executable, "-m", "commbench", "topo", "--from-smi", "-"]
    if stdin == "closed":
        proc = subprocess.run(
            ["bash", "-c", 'exec "$@" 0<&-', "bash", *command],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    elif stdin == "terminal":
        leader, follower = pty.openpty()
        try:
            proc = subprocess.run(
                command, stdin=follower, capture_output=True, text=True, timeout=60
            )
        finally:
            os.close(leader)
            os.close(follower)
    else:
        text = "" if stdin == "empty" else " \n\n"
        proc = subprocess.run(command, input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "stdin" in lines[0]
