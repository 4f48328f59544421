"""How a run is launched across nodes, as the user asked: torchrun's c10d rendezvous flags,
declared once for `collectives`, `run` and `diagnose` and their API verbs. Inside a SLURM
job step none is needed: `resolve_launch` reads the job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.options import cli
from commbench.results.names import MAX_NODES

if TYPE_CHECKING:
    from commbench.launch.launcher import LaunchOptions


@dataclass(kw_only=True)
class LaunchRequest:
    nnodes: int | None = field(
        default=None,
        metadata=cli(
            late=True,
            type=int,
            minimum=1,
            maximum=MAX_NODES,
            help="Nodes in a multi-node run (run the same command on each).",
        ),
    )
    node_rank: int | None = field(
        default=None, metadata=cli(late=True, type=int, help="This node's index, 0..nnodes-1.")
    )
    rdzv_endpoint: str | None = field(
        default=None,
        metadata=cli(late=True, type=str, help="HOST:PORT of the torchrun c10d rendezvous."),
    )
    rdzv_id: str | None = field(
        default=None,
        metadata=cli(late=True, type=str, help="Rendezvous id (the same on every node)."),
    )
    debug: bool = field(
        default=False,
        metadata=cli(
            late=True,
            help="TORCH_DISTRIBUTED_DEBUG=DETAIL and NCCL INFO logs into the run directory.",
        ),
    )

    def launch(self) -> LaunchOptions:
        """The launch this request makes here: explicit flags, else the SLURM job, else one
        node (`resolve_launch`)."""
        from commbench.launch.launcher import resolve_launch

        return resolve_launch(
            nnodes=self.nnodes,
            node_rank=self.node_rank,
            rdzv_endpoint=self.rdzv_endpoint,
            rdzv_id=self.rdzv_id,
            debug=self.debug,
        )
