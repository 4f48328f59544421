"""How a run is launched across nodes, as the user asked: torchrun's c10d rendezvous flags,
declared once for `collectives`, `run` and `diagnose` and their API verbs. Inside a SLURM
job step none is needed: `resolve_launch` reads the job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.arguments import NoPlot, OutDir, Request
from commbench.collectives.placement import PlacementRequest, placement_for
from commbench.collectives.settings import CollectivesRequest
from commbench.options import option, use
from commbench.results.names import MAX_NODES

if TYPE_CHECKING:
    from commbench.results.schema import ResultRow


@dataclass(kw_only=True)
class LaunchRequest:
    """The multi-node flags as given (None: not given). Data only: the launcher resolves it
    (`launcher.resolve_launch`) against the SLURM job and the defaults."""

    nnodes: int | None = option(
        late=True,
        type=int,
        minimum=1,
        maximum=MAX_NODES,
        help="Nodes in a multi-node run (run the same command on each).",
    )
    node_rank: int | None = option(late=True, type=int, help="This node's index, 0..nnodes-1.")
    rdzv_endpoint: str | None = option(
        late=True, type=str, help="HOST:PORT of the torchrun c10d rendezvous."
    )
    rdzv_id: str | None = option(
        late=True, type=str, help="Rendezvous id (the same on every node)."
    )
    debug: bool = option(
        default=False,
        late=True,
        help="TORCH_DISTRIBUTED_DEBUG=DETAIL and NCCL INFO logs into the run directory.",
    )


@dataclass(kw_only=True)
class LaunchWarnings:
    """Where a verb that launches workers says, at once, what it warns of before they start
    (API only): `collectives`, `diagnose` and `replay` (a suite's `on_event` says its own)."""

    on_warning: Callable[[str], None] | None = None
    """Called with each warning before any worker starts, as run.json keeps it: the open-file
    limit and listen backlog this node would hold the job's store under (API only)."""


@dataclass(kw_only=True)
class RunDirRequest(OutDir):
    """Where a command that measures writes its new run directory: `--out`, declared once
    (`arguments.OutDir`) for `collectives`, `p2p`, `diagnose` and `replay`."""


@dataclass(kw_only=True)
class CollectivesRun(
    RunDirRequest,
    LaunchRequest,
    LaunchWarnings,
    PlacementRequest,
    NoPlot,
    CollectivesRequest,
    Request,
):
    """Every option of `commbench collectives` and `run_collectives`, declared once: the
    sweep (`CollectivesRequest`), where its ranks go (`PlacementRequest`), the multi-node
    launch (`LaunchRequest`) and what is done with the run."""

    no_plot = use(help="Do not write plots (RUN_DIR/plots) after the run.")
    on_progress: Callable[[int, int, ResultRow | None], None] | None = None
    """Called as points are measured: `(done, total, row)` (API only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # Every value that needs no machine is refused here, before the machine is asked
        # (NVML) or the launcher imported: the settings on a node of one GPU, where each
        # check of the placement asked for fails as it would on any (issue 43, item 12).
        self.settings(placement_for(1, self.device, self.nproc, self.backend))
