"""What the node that comes to host the job's store needs of the operating system, checked at
the start of a multi-node run: a file descriptor per connection to the store, and a listen
backlog for the ranks that connect at once. Where a limit cannot hold, one line with its fix.

torch (2.13) makes the agent of group rank 0 create the job's store, on a free port of its
own node, and which node that is the rendezvous decides: any launcher may come to host it, so
each checks its own limits (the agent, its child, inherits them)."""

from __future__ import annotations

import resource
from pathlib import Path

BASE_FDS = 256
"""Descriptors the store's agent holds besides the store's connections: its libraries, its
workers' pipes and logs, the rendezvous' own store."""
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


def store_fds(nnodes: int, ranks: int) -> int:
    """Descriptors the host of the job's store may need: a connection from every rank, and
    from every node's agent (the rendezvous), launcher's watch and roll call, and BASE_FDS."""
    return ranks + 3 * nnodes + BASE_FDS


def open_files_limit() -> int | None:
    """This process's soft limit on open files (what its children inherit); None: unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def listen_backlog(path: Path = SOMAXCONN) -> int | None:
    """The kernel's cap on a listening socket's backlog; None where it cannot be read."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def store_limits(
    nnodes: int,
    ranks: int,
    *,
    open_files: int | None = None,
    backlog: int | None = None,
) -> list[str]:
    """One line per limit of this node that cannot hold the job's store for `nnodes` nodes
    and `ranks` ranks, each with its fix; none on one node. `open_files` and `backlog`: the
    limits to judge (this process's and the kernel's where not given)."""
    if nnodes < 2:
        return []
    lines = []
    open_files = open_files_limit() if open_files is None else open_files
    need = store_fds(nnodes, ranks)
    if open_files is not None and open_files < need:
        lines.append(
            f"the open-file limit here ({open_files}) cannot hold the job's store if this node "
            f"hosts it ({ranks} ranks and {nnodes} nodes connect: about {need} descriptors); "
            f"raise it before the run: ulimit -n {need}"
        )
    backlog = listen_backlog() if backlog is None else backlog
    at_once = ranks + nnodes  # every rank's process group, every launcher's watch
    if backlog is not None and backlog < at_once:
        lines.append(
            f"the listen backlog here (net.core.somaxconn = {backlog}) is below the {at_once} "
            f"connections the job's store takes at once at the start if this node hosts it: "
            f"the rest wait out TCP retries; raise it: sysctl -w net.core.somaxconn={at_once}"
        )
    return lines
