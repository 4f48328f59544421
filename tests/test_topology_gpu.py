"""The real NVML path, on a machine with NVIDIA GPUs (skipped elsewhere)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from commbench.topology import TopologySnapshot, discover, parse_nvidia_smi
from commbench.topology.model import is_link_label


def _real() -> TopologySnapshot:
    snapshot = discover()
    if not snapshot.gpus:
        pytest.skip(snapshot.no_gpu_message)
    return snapshot


@pytest.mark.gpu
def test_real_nvml_snapshot_is_complete_and_round_trips() -> None:
    s = _real()
    n = len(s.gpus)
    assert [g.index for g in s.gpus] == list(range(n))
    assert len(s.pairs) == n * (n - 1)
    assert s.host.driver_version
    for g in s.gpus:
        assert g.uuid and g.uuid.startswith("GPU-")
        assert g.pci_bus_id and g.memory_bytes and g.memory_bytes > 0
        assert g.pcie_max_gen is None or g.pcie_max_gen >= (g.pcie_cur_gen or 0)
    for p in s.pairs:
        assert is_link_label(p.link) and p.link != "N/A", p
        assert p.peak_gbps is None or p.peak_gbps > 0
    assert TopologySnapshot.from_dict(s.to_dict()).to_dict() == s.to_dict()


@pytest.mark.gpu
def test_real_labels_match_nvidia_smi() -> None:
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        pytest.skip("nvidia-smi ignores CUDA_VISIBLE_DEVICES; compare on the full machine")
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not installed")
    s = _real()
    text = subprocess.run(
        ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True
    ).stdout
    smi = parse_nvidia_smi(text)
    assert len(smi.gpus) == len(s.gpus)
    mine = {(p.src, p.dst): p.link for p in s.pairs}
    theirs = {(p.src, p.dst): p.link for p in smi.pairs}
    assert mine == theirs
