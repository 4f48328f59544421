"""The alpha-beta cost model of each all-reduce strategy (pure Python, no torch).

t = steps x alpha + launches x lambda + bytes / beta

- steps: message rounds on the critical path; each pays the per-message latency alpha.
- bytes: what the busiest rank sends (or receives) on the critical path; beta is the
  bandwidth of one link, which is also the busbw a ring all-reduce reaches at large sizes.
- launches: host-side calls (collective launches, p2p batches), each also a host/device
  synchronisation on CPU. lambda is 0 unless given: a fit from `direct` rows (one launch
  each) cannot tell it apart from alpha.

The costs follow what the backends actually run (S bytes per rank, n ranks):

| strategy                  | nccl                         | gloo                                  |
|---------------------------|------------------------------|---------------------------------------|
| direct                    | ring: 2(n-1) steps, 2(n-1)/n S | the same ring                       |
| reduce_broadcast          | pipelined chain reduce, then chain broadcast: 2(n-1) steps, 2 S | ring reduce-scatter + gather at the root (n steps, 2(n-1)/n S through the root), then a binomial-tree broadcast of the whole buffer (ceil(log2 n) steps of S) |
| reduce_scatter_all_gather | ring reduce-scatter + ring all-gather: direct's cost, 2 launches | torch's gloo has no reduce-scatter: a full all-reduce then a copy, then a ring all-gather: 3(n-1) steps, 3(n-1)/n S |
| ring                      | direct's steps and bytes, 2(n-1) p2p launches (x2 slices once a chunk is >= 64 KiB) | the same |
| ring_naive                | n-1 steps of the whole S: (n-1) S  | the same                        |

NCCL picks tree algorithms for some sizes and topologies (multi-node all-reduce); the ring
is what it uses within a node and for large messages, and what this model assumes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from commbench.collectives.specs import STRATEGIES, ring_slices
from commbench.errors import UserError
from commbench.numbers import check_range
from commbench.results.names import BACKENDS
from commbench.results.schema import CHECK_FAILED, ResultRow

SCALE_WORLDS = (8, 64, 1024)
"""World sizes a fitted model is also shown at (`commbench model --from`, the report)."""


@dataclass(frozen=True, slots=True)
class Cost:
    steps: int
    """Message rounds on the critical path."""
    bytes_factor: float
    """Bytes through the busiest link on the critical path, as a multiple of S."""
    launches: int
    """Host-side calls: collective launches or p2p batches."""


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise UserError(
            f"unknown backend {backend!r} for the model; choose from: {', '.join(BACKENDS)}"
        )


def cost(strategy: str, n: int, size_bytes: int, backend: str = "nccl") -> Cost:
    """Steps, bytes (x S) and launches of one all-reduce of S bytes per rank over n ranks."""
    _check_backend(backend)
    if strategy not in STRATEGIES:
        raise UserError(f"unknown strategy {strategy!r}; choose from: {', '.join(STRATEGIES)}")
    if n < 1:
        raise UserError("the world size must be at least 1")
    ring_launches = 2 * (n - 1) * ring_slices(size_bytes // n)
    if n == 1:
        launches = {"direct": 1, "reduce_broadcast": 2, "reduce_scatter_all_gather": 2}
        return Cost(steps=0, bytes_factor=0.0, launches=launches.get(strategy, 0))
    ring = Cost(steps=2 * (n - 1), bytes_factor=2 * (n - 1) / n, launches=1)
    if strategy == "direct":
        return ring
    if strategy == "ring":
        return Cost(steps=ring.steps, bytes_factor=ring.bytes_factor, launches=ring_launches)
    if strategy == "ring_naive":
        return Cost(steps=n - 1, bytes_factor=float(n - 1), launches=n - 1)
    if backend == "nccl":
        if strategy == "reduce_broadcast":
            return Cost(steps=2 * (n - 1), bytes_factor=2.0, launches=2)
        return Cost(steps=ring.steps, bytes_factor=ring.bytes_factor, launches=2)
    if strategy == "reduce_broadcast":
        tree = math.ceil(math.log2(n))
        return Cost(steps=n + tree, bytes_factor=2 * (n - 1) / n + tree, launches=2)
    return Cost(steps=3 * (n - 1), bytes_factor=3 * (n - 1) / n, launches=2)


def busbw_factor(n: int) -> float:
    """The all-reduce busbw factor, used for every strategy so the numbers compare."""
    return 2 * (n - 1) / n


MIN_BW_GBPS = 1e-3  # 1 MB/s
MAX_BW_GBPS = 1e6  # 1 PB/s
MAX_MODEL_US = 1e7  # 10 s for one step or launch


@dataclass(kw_only=True, frozen=True, slots=True)
class Params:
    alpha_us: float
    """Latency of one step (one message round), microseconds."""
    bw_gbps: float
    """Bandwidth of one link, GB/s (1e9 bytes/s, as busbw)."""
    launch_us: float = 0.0
    """Cost of one host-side launch/synchronisation, microseconds (lambda)."""
    backend: str = "nccl"
    """Whose algorithms reduce/broadcast/reduce_scatter follow: nccl or gloo."""

    def __post_init__(self) -> None:
        _check_backend(self.backend)
        if not (math.isfinite(self.alpha_us) and self.alpha_us >= 0):
            raise UserError(f"latency must be >= 0 us, got {self.alpha_us}")
        if not (math.isfinite(self.bw_gbps) and self.bw_gbps > 0):
            raise UserError(f"bandwidth must be > 0 GB/s, got {self.bw_gbps}")
        if not (math.isfinite(self.launch_us) and self.launch_us >= 0):
            raise UserError(f"launch overhead must be >= 0 us, got {self.launch_us}")
        # Past what any link or host does: a typo, whose predictions would print as
        # 300-digit numbers or inf
        check_range(self.bw_gbps, "bandwidth (GB/s)", MIN_BW_GBPS, MAX_BW_GBPS)
        check_range(self.alpha_us, "latency (us)", maximum=MAX_MODEL_US)
        check_range(self.launch_us, "launch overhead (us)", maximum=MAX_MODEL_US)


@dataclass(frozen=True, slots=True)
class Prediction:
    strategy: str
    world_size: int
    size_bytes: int
    time_us: float
    busbw_gbps: float
    latency_us: float
    """The steps x alpha + launches x lambda part of time_us."""
    bandwidth_us: float
    """The bytes / beta part of time_us."""
    cost: Cost


def predict_one(strategy: str, n: int, size_bytes: int, params: Params) -> Prediction:
    c = cost(strategy, n, size_bytes, params.backend)
    latency = c.steps * params.alpha_us + c.launches * params.launch_us
    # bytes / (GB/s) = bytes / 1e9 s = bytes / 1e3 us
    bandwidth = c.bytes_factor * size_bytes / (params.bw_gbps * 1e3)
    t = latency + bandwidth
    busbw = size_bytes / (t * 1e3) * busbw_factor(n) if t > 0 else 0.0
    return Prediction(
        strategy=strategy,
        world_size=n,
        size_bytes=size_bytes,
        time_us=t,
        busbw_gbps=busbw,
        latency_us=latency,
        bandwidth_us=bandwidth,
        cost=c,
    )


def predict(
    params: Params,
    worlds: Sequence[int],
    sizes: Sequence[int],
    strategies: Sequence[str] = tuple(STRATEGIES),
) -> list[Prediction]:
    """Every strategy at every world size and size, in that nesting order."""
    return [predict_one(s, n, size, params) for n in worlds for size in sizes for s in strategies]


def winner(predictions: Iterable[Prediction]) -> str:
    """The fastest strategy among predictions for one (n, S); ties go to display order."""
    best = min(predictions, key=lambda p: (p.time_us, list(STRATEGIES).index(p.strategy)))
    return best.strategy


def main_factor(strategy: str, n: int, size_bytes: int, params: Params) -> str:
    """Why `strategy` differs from `direct` at this size, in a few words.

    The regime (latency- or bandwidth-bound) comes from this strategy's own two terms;
    the factor is the term whose difference from direct's is largest.
    """
    p = predict_one(strategy, n, size_bytes, params)
    d = predict_one("direct", n, size_bytes, params)
    regime = "latency-bound" if p.latency_us >= p.bandwidth_us else "bandwidth-bound"
    c, dc = p.cost, d.cost
    where = " through the root" if strategy == "reduce_broadcast" else ""
    if strategy == "direct":
        return f"{c.steps} steps, {c.bytes_factor:.2f}xS per rank ({regime})"
    terms = [
        ((c.steps - dc.steps) * params.alpha_us, f"{c.steps} vs {dc.steps} steps"),
        (
            (c.launches - dc.launches) * params.launch_us,
            f"{c.launches} vs {dc.launches} launches/syncs",
        ),
        (
            p.bandwidth_us - d.bandwidth_us,
            f"{c.bytes_factor:.2f}xS{where} vs {dc.bytes_factor:.2f}xS",
        ),
    ]
    size, label = max(terms, key=lambda t: abs(t[0]))
    if size == 0:
        # Same steps and bytes as direct: all that differs is host-side launches.
        label = f"same steps and bytes; {c.launches} vs {dc.launches} launches/syncs"
    return f"{label} ({regime})"


# --- fitting ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fit:
    params: Params
    points: int
    """Rows the fit used."""
    sizes: list[int]
    world_sizes: list[int]
    worst_error: float
    """Largest |model - measured| / measured over the points."""
    fixed: tuple[str, ...] = ()
    """Parameters the user gave ('alpha', 'beta') instead of fitting them."""
    dtypes: tuple[str, ...] = ()
    """The dtypes of the rows used: the model is in bytes, so several are pooled in one fit."""

    @property
    def quality(self) -> str:
        """How far to trust the fit, in words: two free parameters through two sizes always
        fit exactly, which says nothing about the model."""
        given = {"alpha": "latency", "beta": "bandwidth"}
        if len(self.fixed) == 2:
            return f"latency and bandwidth given: worst error {self.worst_error:.0%}"
        held = f"{' and '.join(given[f] for f in self.fixed)} given, " if self.fixed else ""
        free = 2 - len(self.fixed)
        if free and len(self.sizes) <= free:
            return (
                f"{held}exact through {len(self.sizes)} size(s) by construction "
                "(measure more sizes to test the model)"
            )
        return f"{held}worst fit error {self.worst_error:.0%}"


def direct_rows(rows: Iterable[ResultRow]) -> list[ResultRow]:
    """The rows a fit uses: all_reduce, plain or strategy 'direct', measured, not failed, n >= 2."""
    return [
        r
        for r in rows
        if r.op == "all_reduce"
        and r.strategy in ("", "direct")
        and r.world_size >= 2
        and r.check != CHECK_FAILED
        and math.isfinite(r.time_us)
        and r.time_us > 0
    ]


def fit(
    rows: Iterable[ResultRow],
    backend: str = "nccl",
    launch_us: float = 0.0,
    *,
    alpha_us: float | None = None,
    bw_gbps: float | None = None,
) -> Fit:
    """Fit alpha and beta to the median times of the direct all-reduce rows.

    Least squares on relative error (each point weighted by 1/t^2), so a sweep over sizes
    three decades apart weighs its small sizes as much as its large ones. The direct cost
    is 2(n-1) x alpha + 2(n-1)/n x S / beta; lambda is taken as given. A negative alpha
    (noise at small sizes) is clamped to 0 and beta refitted alone. A parameter the user
    gives (`alpha_us`, `bw_gbps`) is held, and only the other one is fitted.
    """
    # the given values are checked like any parameters, before anything divides by them
    Params(alpha_us=alpha_us or 0.0, bw_gbps=1.0 if bw_gbps is None else bw_gbps, backend=backend)
    points = direct_rows(rows)
    sizes = sorted({r.size_bytes for r in points})
    fixed = tuple(name for name, v in (("alpha", alpha_us), ("beta", bw_gbps)) if v is not None)
    needed = 2 - len(fixed) if len(fixed) < 2 else 1
    if len(sizes) < needed:
        raise UserError(
            f"fitting the model needs the direct all_reduce measured at {needed} "
            f"size{'s' if needed > 1 else ''} or more "
            f"(found {len(sizes)}); run `commbench collectives --ops all_reduce` over a size range"
        )
    xs: list[tuple[float, float]] = []
    for r in points:
        c = cost("direct", r.world_size, r.size_bytes, backend)
        t = r.time_us - c.launches * launch_us
        if t <= 0:
            raise UserError(f"--launch {launch_us} us exceeds the measured time {r.time_us:.2f} us")
        xs.append((c.steps / t, c.bytes_factor * r.size_bytes / t))
    a, b = least_squares(xs, alpha_us, bw_gbps)
    if b <= 0:
        raise UserError(
            "cannot fit a bandwidth: the direct all_reduce time does not grow with size in these results"
        )
    params = Params(alpha_us=a, bw_gbps=1 / (b * 1e3), launch_us=launch_us, backend=backend)
    worst = max(
        abs(predict_one("direct", r.world_size, r.size_bytes, params).time_us - r.time_us)
        / r.time_us
        for r in points
    )
    return Fit(
        params=params,
        points=len(points),
        sizes=sizes,
        world_sizes=sorted({r.world_size for r in points}),
        worst_error=worst,
        fixed=fixed,
        dtypes=tuple(sorted({r.dtype for r in points})),
    )


def least_squares(
    xs: Sequence[tuple[float, float]], alpha_us: float | None = None, bw_gbps: float | None = None
) -> tuple[float, float]:
    """alpha (us) and 1/beta (us per byte) minimising sum((a*x1 + b*x2 - 1)^2) over the
    points (x1, x2) = (steps / t, bytes / t): the relative error of the model at each point.
    A given parameter is held; a negative alpha is clamped to 0 and beta refitted alone.
    Shared by `fit` (the direct all-reduce) and the replay's fit over every op."""
    s11 = math.fsum(x1 * x1 for x1, _ in xs)
    s12 = math.fsum(x1 * x2 for x1, x2 in xs)
    s22 = math.fsum(x2 * x2 for _, x2 in xs)
    y1 = math.fsum(x1 for x1, _ in xs)
    y2 = math.fsum(x2 for _, x2 in xs)
    if alpha_us is not None and bw_gbps is not None:
        a, b = alpha_us, 1 / (bw_gbps * 1e3)
    elif bw_gbps is not None:
        b = 1 / (bw_gbps * 1e3)
        a = max(0.0, (y1 - b * s12) / s11)
    elif alpha_us is not None:
        a = alpha_us
        b = (y2 - a * s12) / s22
    else:
        det = s11 * s22 - s12 * s12
        a, b = -1.0, 0.0
        if det > 0:
            a = (y1 * s22 - y2 * s12) / det
            b = (s11 * y2 - s12 * y1) / det
        if a < 0:
            a, b = 0.0, y2 / s22
    return a, b
