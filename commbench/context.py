"""Where and what was measured, recorded automatically with every run.

Kept apart in the run record: what breaks comparability between two runs (backend, device
model, world size, topology: `results.record.RunContext.comparable`) and what does not (host
name, times, versions). The regression gate refuses to compare runs whose comparable parts
differ.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.version import VERSION

if TYPE_CHECKING:
    from commbench.topology import TopologySnapshot

# Environment variables that change how communication behaves: recorded with every run,
# and passed through to the workers untouched.
ENV_PREFIXES = (
    "NCCL_",
    "TORCH_",
    "GLOO_",
    "CUDA_",
    "OMP_",
    "MASTER_",
    "UCX_",
    "FI_",
    "TORCHELASTIC_",
)


def env_knobs(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = dict(os.environ) if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}


def git_commit(cwd: Path | None = None) -> str | None:
    """The commit of the working directory, if it is a git checkout (the code being tested)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def topology_snapshot() -> tuple[TopologySnapshot | None, str | None]:
    """This machine's topology snapshot, or None and why (the topology module cannot run, or
    its discovery failed: topology is context, it never breaks a measurement)."""
    try:
        from commbench.topology import discover
    except ImportError:
        return None, None
    try:
        return discover(), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def host_context() -> dict[str, Any]:
    """What the launching process knows without torch."""
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "commbench": VERSION,
        "command": " ".join(["commbench", *sys.argv[1:]]),
        "cwd_git_commit": git_commit(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "env": env_knobs(),
    }
