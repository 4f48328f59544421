"""What `commbench model` and `commbench.model_strategies` are asked, declared once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import Fabric, PathLike, Request
from commbench.collectives.settings import GPU_DEFAULT_SIZES, SizeList, StrategyList, Sweep
from commbench.flags import BACKEND, FROM, WORLD
from commbench.options import field_of, option, use

if TYPE_CHECKING:
    from commbench.strategies.model import Fit, Params, Prediction


@dataclass(kw_only=True)
class ModelRequest(Fabric, Sweep, Request):
    """Every option of `commbench model` and `model_strategies`, declared once."""

    world: str | Sequence[int] | None = field_of(
        WORLD,
        default=None,
        type=str,
        also=("-w",),
        help="World sizes, e.g. 8,64,1024. Default: 8; with --from, the run's then 8,64,1024.",
    )
    bw = use(
        help="Link bandwidth in GB/s (beta). Needed without --from; with it, held while "
        "the latency is fitted.",
    )
    latency = use(
        help="Latency per step in us (alpha). Needed without --from; with it, held while "
        "the bandwidth is fitted.",
    )
    launch: float = option(default=0.0, help="Cost of one host-side launch/sync in us (default 0).")
    sizes: SizeList = use(
        default=GPU_DEFAULT_SIZES,
        help=f"Sizes per rank, e.g. 1K-1G. Default {GPU_DEFAULT_SIZES}.",
    )
    backend: str | None = field_of(
        BACKEND,
        default=None,
        help="Whose algorithms to model: nccl or gloo. Default: the run's, else nccl.",
    )
    strategies: StrategyList = use(
        default="all", help="Strategies to predict: 'all' or a comma list."
    )
    from_run: PathLike | None = field_of(
        FROM, default=None, help="Fit latency and bandwidth to this run's direct all_reduce rows."
    )


MAX_WORLD = 1 << 24
"""More ranks than any machine runs: a `model --world` beyond it is a typo, not a world."""
MAX_WORLDS = 256
"""World sizes one `model` call tabulates: a table each."""


@dataclass(frozen=True, slots=True)
class Modelled:
    """What `model_strategies` predicts: each strategy at each world size and size, the
    alpha-beta parameters used, and the fit they came from (None when given)."""

    predictions: list[Prediction]
    params: Params
    fitted: Fit | None


def predict_strategies(request: ModelRequest) -> Modelled:
    """`model_strategies`' work: the parameters given or fitted, then every strategy's
    prediction at each world size and size."""
    world, bw, latency, launch = request.world, request.bw, request.latency, request.launch
    sizes, backend, strategies = request.sizes, request.backend, request.strategies
    from_run = request.from_run
    from commbench.errors import UserError
    from commbench.strategies.model import SCALE_WORLDS, Params, fit, predict

    names, size_list = list(strategies), list(sizes)  # parsed as the request was built
    worlds = parse_worlds(world) if world is not None else [8]
    fitted = None
    if from_run is not None:
        from commbench.results.runs import load_run as load_one

        run = load_one(Path(from_run))
        backend = backend or str(run.record.settings.get("backend") or "nccl")
        fitted = fit(run.rows, backend, launch, alpha_us=latency, bw_gbps=bw)
        if world is None:
            worlds = list(dict.fromkeys([*fitted.world_sizes, *SCALE_WORLDS]))
        alpha, beta = fitted.params.alpha_us, fitted.params.bw_gbps
    else:
        if bw is None or latency is None:
            raise UserError("give --bw and --latency, or --from RUN to fit them")
        alpha, beta = latency, bw
    params = Params(alpha_us=alpha, bw_gbps=beta, launch_us=launch, backend=backend or "nccl")
    return Modelled(predict(params, worlds, size_list, names), params, fitted)


def parse_worlds(value: str | Sequence[int]) -> list[int]:
    """`--world 8,64,1024` (or a list) as distinct world sizes, each at least 2."""
    from commbench.errors import UserError, quoted
    from commbench.lists import split_list
    from commbench.numbers import MAX_DIGITS, check_range, is_digits

    if isinstance(value, str):
        items = split_list(value, "--world", max_items=MAX_WORLDS)
        if not all(is_digits(t) and len(t) <= MAX_DIGITS for t in items):  # ASCII digits only
            raise UserError(f"--world must be a comma list of integers, got {quoted(value)}")
        numbers = [int(t) for t in items]
    else:
        numbers = list(value)
        if not all(isinstance(w, int) and not isinstance(w, bool) for w in numbers):
            raise UserError(f"world sizes must be integers, got {numbers!r}")
        if len(numbers) > MAX_WORLDS:
            raise UserError(f"--world: at most {MAX_WORLDS} world sizes, got {len(numbers)}")
    worlds = [check_range(w, "--world", maximum=MAX_WORLD) for w in numbers]
    if not worlds:
        raise UserError("--world is empty")
    bad = [w for w in worlds if w < 2]
    if bad:
        raise UserError(
            f"--world: a world size must be at least 2 (one rank has nothing to reduce), got {bad[0]}"
        )
    return list(dict.fromkeys(worlds))
