"""The sysfs reader: a test root by environment, values the kernel does not give are None."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from commbench.topology.sysfs import SYSFS_ENV, read_attr, read_int, sysfs_root


def test_root_from_environment(tmp_path: Path) -> None:
    assert sysfs_root({}) == Path("/sys")
    assert sysfs_root({SYSFS_ENV: str(tmp_path)}) == tmp_path
    assert sysfs_root({SYSFS_ENV: ""}) == Path("/sys")


def test_attributes(tmp_path: Path) -> None:
    (tmp_path / "speed").write_text("100000\n")
    (tmp_path / "hex").write_text("0x1f\n")
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "word").write_text("unknown\n")
    (tmp_path / "arabic").write_text("\u0663\n")
    (tmp_path / "big").write_text("1" * 70000)
    os.mkfifo(tmp_path / "fifo")
    assert read_attr(tmp_path / "speed") == "100000"
    assert read_int(tmp_path / "speed") == 100000
    assert read_int(tmp_path / "hex") == 31
    assert read_attr(tmp_path / "empty") is None
    assert read_int(tmp_path / "word") is None
    assert read_int(tmp_path / "arabic") is None
    assert read_attr(tmp_path / "big") is None
    assert read_attr(tmp_path / "fifo") is None
    assert read_attr(tmp_path / "missing") is None
    assert read_attr(tmp_path) is None  # a directory


def test_real_sysfs_reads() -> None:
    # The loopback of this network namespace; its speed read fails (EINVAL) -> None.
    lo = Path("/sys/class/net/lo")
    if not lo.is_dir():
        pytest.skip("no /sys/class/net/lo here (sysfs not mounted)")
    assert read_attr(lo / "operstate") in {"unknown", "up"}
    assert read_int(lo / "mtu") is not None
    assert read_int(lo / "speed") is None
