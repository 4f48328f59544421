"""Reading Linux sysfs, from /sys or from a test tree that stands in for it.

Network devices, RDMA ports and their error counters are only in sysfs, and a test machine has
none of the hardware, so every reader takes its root from `sysfs_root()`: the directory named
by COMMBENCH_SYSFS_ROOT (a fixture tree laid out as /sys is: `class/net`, `class/infiniband`,
`bus/pci/devices`, `devices/...`), else /sys. A value the kernel does not give (a missing file,
a virtual NIC whose `speed` read fails with EINVAL, a link that is down) is None, never a guess
and never an exception: sysfs describes the machine, it must not break a measurement.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from commbench.errors import UserError

SYSFS_ENV = "COMMBENCH_SYSFS_ROOT"
MAX_ATTR_BYTES = 64 * 1024
"""sysfs attributes are one page at most; a larger file is not an attribute."""


def sysfs_root(environ: Mapping[str, str] | None = None) -> Path:
    """The directory that stands for /sys: COMMBENCH_SYSFS_ROOT when set, else /sys."""
    env = os.environ if environ is None else environ
    value = env.get(SYSFS_ENV, "")
    return Path(value) if value else Path("/sys")


def check_sysfs_root(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a COMMBENCH_SYSFS_ROOT that names no directory, before anything is read or
    launched: a typo there would otherwise read as a machine with no NIC and no RDMA port."""
    env = os.environ if environ is None else environ
    value = env.get(SYSFS_ENV, "")
    if value and not Path(value).is_dir():
        what = "does not exist" if not Path(value).exists() else "is not a directory"
        raise UserError(
            f"{SYSFS_ENV}={value} {what}: it names a directory laid out like /sys "
            "(unset it to read /sys)"
        )


def read_attr(path: Path) -> str | None:
    """A sysfs attribute's text, stripped; None when it is missing, unreadable or empty.

    Opened non-blocking and read once with a bound, so a FIFO or a huge file planted in a test
    tree is refused rather than waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_ATTR_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_ATTR_BYTES:
        return None
    text = data.decode("utf-8", errors="replace").strip()
    return text or None


def read_int(path: Path) -> int | None:
    """A decimal (or 0x-prefixed hexadecimal) integer attribute; None when absent or not one."""
    text = read_attr(path)
    if text is None or not text.isascii():
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


def normalize_bus_id(bus_id: str | None) -> str | None:
    """`00000000:07:00.0` -> `0000:07:00.0`: the form /sys, lspci and torch use."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
        except ValueError:
            return bus_id.strip().lower()
    if len(parts) == 2:
        return f"0000:{parts[0]}:{parts[1]}"
    return bus_id.strip().lower()
