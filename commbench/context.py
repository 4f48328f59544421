"""Where and what was measured, recorded automatically with every run.

Kept apart: what breaks comparability between two runs (backend, device model, world size,
topology: `comparable`) and what does not (host name, times, versions: the rest). The
regression gate refuses to compare runs whose `comparable` parts differ.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from commbench import __version__

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


def topology_snapshot() -> dict[str, Any] | None:
    """The topology snapshot as a dict, or None when the topology module cannot run."""
    try:
        from commbench.topology import discover
    except ImportError:
        return None
    try:
        return discover().to_dict()
    except Exception as exc:  # topology is context: never let it break a measurement
        return {"error": f"{type(exc).__name__}: {exc}"}


def host_context() -> dict[str, Any]:
    """What the launching process knows without torch."""
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "commbench": __version__,
        "command": " ".join(["commbench", *sys.argv[1:]]),
        "cwd_git_commit": git_commit(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "env": env_knobs(),
    }


def comparable(context: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's context that must match for two runs to be compared."""
    topo = context.get("topology") or {}
    links = sorted(
        (p.get("src"), p.get("dst"), p.get("link"))
        for p in topo.get("pairs", [])
        if isinstance(p, dict)
    )
    return {
        "backend": context.get("backend"),
        "device": context.get("device"),
        "device_names": context.get("device_names"),
        "world_size": context.get("world_size"),
        "nnodes": context.get("nnodes"),
        "topology_links": links or None,
    }
