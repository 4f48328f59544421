"""What `commbench model` and `commbench.model_strategies` are asked, declared once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from commbench.arguments import PathLike, Request
from commbench.collectives.settings import GPU_DEFAULT_SIZES
from commbench.flags import BACKEND, BW, FROM, LATENCY, SIZES, STRATEGIES, WORLD
from commbench.options import cli, field_of


@dataclass(kw_only=True)
class ModelRequest(Request):
    """Every option of `commbench model` and `model_strategies`, declared once."""

    world: str | Sequence[int] | None = field_of(
        WORLD,
        default=None,
        type=str,
        also=("-w",),
        help="World sizes, e.g. 8,64,1024. Default: 8; with --from, the run's then 8,64,1024.",
    )
    bw: float | None = field_of(
        BW,
        default=None,
        help="Link bandwidth in GB/s (beta). Needed without --from; with it, held while "
        "the latency is fitted.",
    )
    latency: float | None = field_of(
        LATENCY,
        default=None,
        help="Latency per step in us (alpha). Needed without --from; with it, held while "
        "the bandwidth is fitted.",
    )
    launch: float = field(
        default=0.0,
        metadata=cli(help="Cost of one host-side launch/sync in us (default 0)."),
    )
    sizes: str = field_of(
        SIZES,
        default=GPU_DEFAULT_SIZES,
        help=f"Sizes per rank, e.g. 1K-1G. Default {GPU_DEFAULT_SIZES}.",
    )
    backend: str | None = field_of(
        BACKEND,
        default=None,
        help="Whose algorithms to model: nccl or gloo. Default: the run's, else nccl.",
    )
    strategies: str = field_of(
        STRATEGIES, default="all", help="Strategies to predict: 'all' or a comma list."
    )
    from_run: PathLike | None = field_of(
        FROM, default=None, help="Fit latency and bandwidth to this run's direct all_reduce rows."
    )
