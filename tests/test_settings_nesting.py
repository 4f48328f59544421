"""`CollectivesSettings` holds its placement and its timing as records of their own
(`Placement`, `Timing`: each field's default and check live there), while run.json keeps
the flat settings every stored run was written with: flattened as written, nested as read."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from commbench.collectives.placement import Placement
from commbench.collectives.settings import (
    STORED_KEYS,
    CollectivesRequest,
    CollectivesSettings,
    Timing,
    in_place_choice,
)
from commbench.errors import UserError
from tests.factories import collectives_settings

FIXTURES = Path(__file__).parent / "fixtures" / "runs"
STORED = sorted(
    p for p in FIXTURES.glob("*/run.json") if json.loads(p.read_text())["kind"] == "collectives"
)
HAND_WRITTEN = {"h100x8-golden"}
"""Fixtures written by hand (their keys in an order of their own, most left out)."""


def test_settings_nest_the_placement_and_the_timing_not_their_fields() -> None:
    own = {f.name for f in fields(CollectivesSettings)}
    assert {"placement", "timing"} <= own
    copied = own & ({f.name for f in fields(Timing)} | {"nproc", "backend", "device"})
    assert not copied, f"copied flat into CollectivesSettings: {sorted(copied)}"


def test_written_flat_in_the_stored_order() -> None:
    settings = CollectivesRequest(warmup=3, timeout=60).settings(
        Placement(device="cpu", nproc=2, backend="gloo", note="why", gpus=0)
    )
    data = settings.to_dict()
    assert tuple(data) == STORED_KEYS
    assert (data["nproc"], data["backend"], data["device"]) == (2, "gloo", "cpu")
    assert (data["warmup"], data["timeout"], data["iters"]) == (3, 60, None)
    assert "placement" not in data and "timing" not in data and "note" not in data
    back = CollectivesSettings.from_dict(json.loads(json.dumps(data)))
    assert back == settings and back.to_dict() == data


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.parent.name)
def test_stored_settings_read_and_write_unchanged(path: Path) -> None:
    stored = json.loads(path.read_text())["settings"]
    settings = CollectivesSettings.from_dict(stored)
    assert settings.placement.nproc == stored["nproc"]
    assert settings.timing.timeout == stored.get("timeout", Timing().timeout)
    written = settings.to_dict()
    assert tuple(written) == STORED_KEYS
    # keys stored before a field existed (dtypes, skew, ...) are written now; the rest as
    # read (but for the old bool of in_place, which reads as yes or no)
    if path.parent.name not in HAND_WRITTEN:
        assert [k for k in written if k in stored] == list(stored)
    if "in_place" in stored:
        stored["in_place"] = in_place_choice(stored["in_place"])
    assert {k: written[k] for k in stored} == stored


def test_each_record_checks_its_own_fields() -> None:
    with pytest.raises(UserError, match="--min-time must be a positive"):
        Timing(min_time=0).check()
    with pytest.raises(UserError, match="unknown device 'tpu'"):
        Placement(device="tpu", nproc=1, backend="gloo").check()
    # and the settings holding them check them as they are built
    with pytest.raises(UserError, match="need 1 <= min_iters <= max_iters"):
        collectives_settings(ops=["all_reduce"], sizes=[8], min_iters=5, max_iters=4)
    with pytest.raises(UserError, match="nccl backend needs --device cuda"):
        collectives_settings(ops=["all_reduce"], sizes=[8], backend="nccl", device="cpu")


def test_the_factory_refuses_a_field_no_record_has() -> None:
    with pytest.raises(TypeError):
        collectives_settings(ops=["all_reduce"], sizes=[8], warmups=3)
