"""The oldest torch commbench runs on, checked before anything is launched.

The workers pass `init_process_group(device_id=...)` (first in torch 2.3); 2.5 is the oldest
release the suite has been run on. With a bound device, `new_group` splits the world's NCCL
communicator eagerly (torch 2.13, `_new_process_group_helper` in distributed_c10d.py): every
rank of the world takes part in the split when it calls `new_group`, a rank outside the new
group through a no-color split, so every rank calls `new_group` for every subgroup, in the
same order, before the next world collective (the worker's `init`, diagnose's `_groups`).
An older torch would fail in every worker with a TypeError or a hang; it is refused here with
one line instead. The version is read from the package metadata, not by importing torch, so
the check costs nothing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

from commbench.errors import UserError

TORCH_FLOOR = (2, 5)
"""Oldest (major, minor) supported; pyproject.toml declares the same floor."""


def installed_torch() -> str | None:
    """The installed torch's version string, or None when torch is not installed."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        # importable without metadata (a source tree on PYTHONPATH): its age is unknown
        return "" if importlib.util.find_spec("torch") is not None else None


def require_torch() -> None:
    """Raise UserError when torch is missing or older than `TORCH_FLOOR`."""
    floor = ".".join(map(str, TORCH_FLOOR))
    version = installed_torch()
    if version is None:
        raise UserError(
            f"torch is not installed; commbench needs torch>={floor} (see `make install`)"
        )
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        return  # unknown age (no metadata, a local build's odd version): let it run
    if (int(match[1]), int(match[2])) < TORCH_FLOOR:
        raise UserError(
            f"torch {version} is installed; commbench needs torch>={floor} "
            "(device_id= in init_process_group): upgrade torch"
        )
