"""The snapshot model, its file form, CPU lists, CUDA_VISIBLE_DEVICES and the rate tables."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from commbench.errors import UserError
from commbench.topology import (
    SCHEMA_VERSION,
    Gpu,
    Pair,
    TopologySnapshot,
    load_snapshot,
    parse_nvidia_smi,
    rates,
)
from commbench.topology.cpus import cpus_from_mask, format_cpu_list, parse_cpu_list
from commbench.topology.visible import resolve_visible

FIXTURES = Path(__file__).parent / "fixtures" / "topology"


def sample() -> dict[str, Any]:
    text = (FIXTURES / "smi_h100_nvswitch_nv18_13nics.txt").read_text()
    return parse_nvidia_smi(text).to_dict()


# --- file form ---------------------------------------------------------------------------


def test_round_trip_keeps_every_field() -> None:
    data = sample()
    again = TopologySnapshot.from_dict(json.loads(json.dumps(data))).to_dict()
    assert again == data
    assert next(iter(data)) == "schema_version" and data["schema_version"] == SCHEMA_VERSION
    for key in ("src", "dst", "link", "nvlinks", "p2p", "peak_gbps", "peak_assumed", "note"):
        assert key in data["pairs"][0]


def test_pair_lookup() -> None:
    s = TopologySnapshot.from_dict(sample())
    assert s.pair(3, 5).link == "NV18"
    with pytest.raises(KeyError):
        s.pair(0, 0)


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(sample())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["schema_version"], 99, "snapshot.schema_version: 99 is newer"),
        (["schema_version"], 0, "snapshot.schema_version: 0 is not a valid version"),
        (["schema_version"], "1", "snapshot.schema_version: expected an integer, got the string"),
        (["schema_version"], _DELETE, "snapshot.schema_version: missing"),
        (["gpus"], {}, "snapshot.gpus: expected a list, got an object"),
        (["gpus", 2, "pcie_max_gen"], "five", "snapshot.gpus[2].pcie_max_gen: expected an integer"),
        (["gpus", 1, "name"], _DELETE, "snapshot.gpus[1].name: missing"),
        (["gpus", 0, "index"], 5, "snapshot.gpus: indices must be 0..7"),
        (["pairs", 3, "link"], "NV", "snapshot.pairs[3].link: 'NV' is not an nvidia-smi"),
        (["pairs", 3, "p2p"], "yes", "snapshot.pairs[3].p2p: expected true or false"),
        (["pairs", 4, "peak_gbps"], -1, "snapshot.pairs[4].peak_gbps: -1 is outside 0..10000"),
        (["pairs", 4, "peak_gbps"], True, "snapshot.pairs[4].peak_gbps: expected a number"),
        (["pairs", 5, "dst"], 8, "snapshot.pairs[5].dst: GPU 8 is not in gpus"),
        (["pairs", 5, "dst"], 0, "snapshot.pairs[5]: src and dst are both GPU 0"),
        (["pairs", 6], "x", "snapshot.pairs[6]: expected an object, got the string 'x'"),
        (["nics", 0, "gpu_links"], ["PIX"], "snapshot.nics[0].gpu_links: expected 8 labels"),
        (["host", "numa_nodes", 0, "id"], None, "snapshot.host.numa_nodes[0].id: missing"),
        (["host", "cpu_cores"], 1 << 20, "snapshot.host.cpu_cores: 1048576 is outside 0..65536"),
        (["pairs", 2, "nvlinks"], _DELETE, "snapshot.pairs[2].nvlinks: missing"),
        (["pairs", 2, "note"], 3, "snapshot.pairs[2].note: expected a string"),
        (["gpus", 0, "nvlinks"], [{"link": 0}], "snapshot.gpus[0].nvlinks[0].active: missing"),
        (["gpus", 0, "memory_bytes"], 1 << 60, "snapshot.gpus[0].memory_bytes: 11529215046"),
        (["nics", 0, "mtu"], 1 << 21, "snapshot.nics[0].mtu: 2097152 is outside"),
        (["nics", 0, "name"], _DELETE, "snapshot.nics[0].name: missing"),
    ],
)
def test_from_dict_names_the_bad_field(path: list[Any], value: Any, message: str) -> None:
    with pytest.raises(UserError) as err:
        TopologySnapshot.from_dict(_broken(path, value))
    assert message in str(err.value)


def test_duplicate_pairs_are_refused() -> None:
    data = sample()
    data["pairs"].append(dict(data["pairs"][0]))
    with pytest.raises(UserError, match=r"pairs\[56\]: pair 0->1 appears twice"):
        TopologySnapshot.from_dict(data)


def test_constructor_checks_consistency_too() -> None:
    with pytest.raises(UserError, match="GPU 1 is not in gpus"):
        TopologySnapshot(gpus=[Gpu(index=0, name="x")], pairs=[Pair(src=0, dst=1, link="PIX")])


def test_load_snapshot_and_run_json_embedding(tmp_path: Path) -> None:
    data = sample()
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(data))
    assert load_snapshot(snap).to_dict() == data
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema_version": 3, "topology": data, "results": []}))
    assert load_snapshot(run).to_dict() == data
    data["pairs"][0]["nvlinks"] = -2
    run.write_text(json.dumps({"topology": data}))
    with pytest.raises(
        UserError, match=r"run.json: snapshot.topology.pairs\[0\].nvlinks: -2 is outside 0..64"
    ):
        load_snapshot(run)


def test_load_snapshot_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such topology snapshot"):
        load_snapshot(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "schema_version": 1,\n  "gpus": [,]\n}')
    with pytest.raises(UserError, match=r"bad.json: not valid JSON \(line 3, column 12"):
        load_snapshot(bad)


# --- CPU lists ---------------------------------------------------------------------------


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-2,8,10-11") == [0, 1, 2, 8, 10, 11]
    assert format_cpu_list([11, 0, 1, 2, 8, 10]) == "0-2,8,10-11"
    assert format_cpu_list([]) == ""
    assert cpus_from_mask([0b1011, 1]) == [0, 1, 3, 64]
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")
    with pytest.raises(ValueError):
        parse_cpu_list("all")


# --- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------

UUIDS = [
    "GPU-aaaa1111-0000-0000-0000-000000000000",
    "GPU-bbbb2222-0000-0000-0000-000000000000",
    "GPU-bbbb3333-0000-0000-0000-000000000000",
    "GPU-cccc4444-0000-0000-0000-000000000000",
]


@pytest.mark.parametrize(
    ("spec", "order", "warns"),
    [
        (None, [0, 1, 2, 3], False),
        ("", [], False),
        ("2,0", [2, 0], False),
        (" 3 , 1 ", [3, 1], False),
        ("GPU-cccc,GPU-aaaa1111", [3, 0], False),
        ("gpu-CCCC4444-0000-0000-0000-000000000000", [3], False),
        ("1,GPU-bbbb,0", [1], True),  # ambiguous prefix: CUDA stops there
        ("0,7,1", [0], True),  # no device 7: CUDA ignores it and what follows
        ("-1", [], True),
        ("1,1,2", [1, 2], True),
        ("MIG-GPU-bbbb3333-0000-0000-0000-000000000000/1/0", [2], False),
        ("MIG-5f2e", [1], False),
        ("0,,1", [0], True),
    ],
)
def test_cuda_visible_devices(spec: str | None, order: list[int], warns: bool) -> None:
    visible = resolve_visible(UUIDS, spec, {"MIG-5f2e0000-1111": 1})
    assert visible.order == order
    assert bool(visible.warnings) == warns


# --- rates -------------------------------------------------------------------------------


def test_nvlink_rates_match_nvidia_totals() -> None:
    # Bidirectional per-GPU totals NVIDIA publishes, halved for one direction.
    assert 4 * rates.nvlink_gbps_per_link(1) == 160 / 2  # P100
    assert 6 * rates.nvlink_gbps_per_link(2) == 300 / 2  # V100
    assert 12 * rates.nvlink_gbps_per_link(3) == 600 / 2  # A100
    assert 18 * rates.nvlink_gbps_per_link(4) == 900 / 2  # H100
    assert 18 * rates.nvlink_gbps_per_link(5) == 1800 / 2  # B200
    assert rates.nvlink_gbps_per_link(None) is None
    # GA102 bridges: 4 links, 112.5 GB/s both ways together.
    assert 4 * rates.nvlink_gbps_per_link(3, "NVIDIA RTX A6000") == 112.5 / 2
    assert rates.nvlink_gbps_per_link(3, "NVIDIA A40") == 14.0625
    assert rates.nvlink_gbps_per_link(3, "NVIDIA A100-SXM4-80GB") == 25.0


def test_nvml_nvlink_version_is_an_enum() -> None:
    assert [rates.nvlink_gen_from_nvml(v) for v in range(1, 8)] == [1, 2, 2, 3, 3, 4, 5]
    assert rates.nvlink_gen_from_nvml(0) is None
    assert rates.nvlink_gen_from_nvml(None) is None


def test_pcie_rates() -> None:
    assert rates.pcie_gbps(1, 16) == pytest.approx(4.0)
    assert rates.pcie_gbps(2, 16) == pytest.approx(8.0)
    assert rates.pcie_gbps(3, 16) == pytest.approx(15.754, abs=1e-3)
    assert rates.pcie_gbps(4, 16) == pytest.approx(31.508, abs=1e-3)
    assert rates.pcie_gbps(5, 16) == pytest.approx(63.015, abs=1e-3)
    assert rates.pcie_gbps(6, 16) == pytest.approx(121.0, abs=1e-3)
    assert rates.pcie_gbps(4, 8) == pytest.approx(rates.pcie_gbps(3, 16), rel=1e-12)
    assert rates.pcie_gbps(None, 16) is None
    assert rates.pcie_gbps(7, 16) is None
