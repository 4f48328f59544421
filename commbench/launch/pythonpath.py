"""Where the processes commbench starts find commbench: the directory that holds the package.

A child Python (torchrun's workers, the probe) finds commbench only if it is installed or on
its path. A plain checkout with torch already installed (`make gpu-check` on a GPU machine
with no package index) has nothing installed, and torchrun starts its workers without the
launcher's `sys.path`; so every child gets the launcher's own package root first on
PYTHONPATH, and imports the very code that launched it, installed or not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The directory holding the `commbench` package this process imported."""


def with_package_path(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with PACKAGE_ROOT prepended to its PYTHONPATH (whatever was there is kept after)."""
    environ = dict(env)
    root = str(PACKAGE_ROOT)
    rest = environ.get("PYTHONPATH", "")
    if rest.split(os.pathsep)[0] != root:
        environ["PYTHONPATH"] = os.pathsep.join([root, rest]) if rest else root
    return environ
