"""The alpha-beta model beside a replay's measurements (pure Python): which rows dominate the
recorded traffic's time, whether each is latency- or bandwidth-bound, and what the model
predicts for it and for each bucket cap of the advisor. The report's Replay section and the
command's summary print the same tables from here.

Each op's cost is its ring algorithm's (NCCL's within a node, gloo's for most ops), in the
terms of `strategies.model` (S bytes per rank, n ranks): all_reduce 2(n-1) steps and
2(n-1)/n S through the busiest link; all_gather, reduce_scatter, all_to_all, gather and
scatter n-1 steps and (n-1)/n S; broadcast and reduce (pipelined chain) n-1 steps and S;
a send/recv pair one step and S; a barrier ceil(log2 n) steps and no bytes. alpha and beta
are fitted to the run's own rows (`strategies.model.least_squares`, on relative error), so
the model explains this cluster's numbers with two figures, and predicts others with them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from commbench.ops import OPS
from commbench.replay.buckets import Reducer
from commbench.results.replay import Elsewhere, ReplayRecord, median_of
from commbench.results.schema import CHECK_FAILED, MOVES_NOTHING, ResultRow
from commbench.sizes import format_size
from commbench.strategies.model import Cost, Params, least_squares
from commbench.tables import text_table

TOP_ROWS = 10
"""Rows a summary lists, by their share of the recorded traffic's time."""
STEPS_NOTE = "each column's median; for a ratio, the median of the per-step ratios"
"""Said under `step_table`: the two medians of a ratio differ (README's 0.57 against 0.48),
and a user compares steps, so the table says which it shows."""


def op_cost(op: str, n: int) -> Cost:
    """Steps and bytes (x S) of one `op` over n ranks (see the module)."""
    if n < 2:
        return Cost(steps=0, bytes_factor=0.0, launches=1)
    spec = OPS.get(op)  # its steps and its busbw factor (`commbench.ops.OpSpec`)
    if spec is None:
        return Cost(steps=1, bytes_factor=1.0, launches=1)
    steps = 1 if spec.steps is None else spec.steps(n)
    return Cost(
        steps=steps, bytes_factor=0.0 if spec.factor is None else spec.factor(n), launches=1
    )


def _measured(r: ResultRow) -> bool:
    return (
        r.world_size >= 2 and r.check != CHECK_FAILED and math.isfinite(r.time_us) and r.time_us > 0
    )


def fit_rows(rows: Sequence[ResultRow], backend: str) -> tuple[Params | None, str]:
    """alpha and beta fitted to every measured row; (None, why) when they cannot be."""
    points = [r for r in rows if _measured(r) and r.op not in MOVES_NOTHING]
    if len({r.size_bytes for r in points}) < 2:
        return None, "the model needs rows at two sizes or more to fit latency and bandwidth"
    xs = []
    for r in points:
        c = op_cost(r.op, r.world_size)
        xs.append((c.steps / r.time_us, c.bytes_factor * r.size_bytes / r.time_us))
    a, b = least_squares(xs)
    if b <= 0:
        return None, "the measured times do not grow with size: no bandwidth to fit"
    bw = 1 / (b * 1e3)
    if not 1e-3 <= bw <= 1e6:
        return None, f"the fitted bandwidth ({bw:.3g} GB/s) is past any link: no model"
    return Params(
        alpha_us=a, bw_gbps=bw, backend=backend if backend in ("nccl", "gloo") else "nccl"
    ), ""


def predict_us(op: str, n: int, size_bytes: int, params: Params) -> tuple[float, float]:
    """(latency part, bandwidth part) of one call, microseconds."""
    c = op_cost(op, n)
    return c.steps * params.alpha_us, c.bytes_factor * size_bytes / (params.bw_gbps * 1e3)


@dataclass(frozen=True, slots=True)
class Explained:
    row: ResultRow
    share: float
    """Its calls x time over the sum of every row's: its part of the recorded traffic's time."""
    predicted_us: float | None
    regime: str
    """latency-bound, bandwidth-bound, or `-` without a model."""


def explain(rows: Sequence[ResultRow], params: Params | None) -> list[Explained]:
    """The rows with recorded calls, by their share of the traffic's time, largest first."""
    counted = [r for r in rows if r.calls and math.isfinite(r.time_us)]
    total = math.fsum(r.calls * r.time_us for r in counted if r.calls)
    out = []
    for r in counted:
        predicted, regime = None, "-"
        if params is not None:
            lat, bw = predict_us(r.op, r.world_size, r.size_bytes, params)
            predicted = lat + bw
            regime = "latency-bound" if lat >= bw else "bandwidth-bound"
        share = (r.calls or 0) * r.time_us / total if total > 0 else 0.0
        out.append(Explained(row=r, share=share, predicted_us=predicted, regime=regime))
    return sorted(out, key=lambda e: -e.share)


def predict_buckets_s(bucket_bytes: Sequence[int], world: int, params: Params) -> float:
    """A step of DDP's all-reduces, one per bucket: they share the links, so their times
    add (the overlap DDP gets is with the backward's compute, which a replay has none of)."""
    return math.fsum(sum(predict_us("all_reduce", world, b, params)) for b in bucket_bytes) / 1e6


def predict_elsewhere(
    reducer: Reducer,
    caps: Sequence[int],
    world: int,
    bw_gbps: float,
    latency_us: float,
) -> Elsewhere:
    """Each cap's DDP all-reduces (its buckets, and the local-used map when it finds unused
    parameters) predicted on a fabric of `bw_gbps` per link and `latency_us` per step, at
    `world` ranks: the advisor's answer for a cluster this one is not."""
    params = Params(alpha_us=latency_us, bw_gbps=bw_gbps)
    rows = []
    for cap in caps:
        reductions = [nbytes for _, nbytes in reducer.reductions(cap)]
        buckets = len(reducer.buckets(cap))
        rows.append((cap, buckets, predict_buckets_s(reductions, world, params)))
    return Elsewhere(bw_gbps=bw_gbps, latency_us=latency_us, world=world, caps=tuple(rows))


# -- tables ------------------------------------------------------------------------------------


def _time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _divided(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _median_ratio(tops: Sequence[float | None], bottoms: Sequence[float | None]) -> str:
    """The median of the per-step ratios (`STEPS_NOTE`), over the steps that have one."""
    ratio = median_of([_divided(a, b) for a, b in zip(tops, bottoms, strict=False)])
    return "-" if ratio is None else f"{ratio:.2f}"


def step_table(replay: ReplayRecord) -> tuple[list[str], list[list[str]]]:
    """Recorded against replayed communication time, per step, then their medians: of the
    times, and of the per-step ratios (`STEPS_NOTE`). The recorded time's wait for peers
    (rank skew) is shown apart: a replay has none, so the last column compares like with
    like."""
    headers = ["step", "recorded", "waiting for peers", "replayed", "replayed / recorded"]
    headers.append("replayed / (recorded - waiting)")
    recorded, replayed = replay.recorded_comm_s_per_step, replay.replayed_comm_s_per_step
    waits = replay.recorded_wait_s_per_step
    cells = []
    for i in range(max(len(recorded), len(replayed))):
        rec = recorded[i] if i < len(recorded) else None
        rep = replayed[i] if i < len(replayed) else None
        wait = waits[i] if i < len(waits) else None
        number = replay.step_numbers[i] if i < len(replay.step_numbers) else i
        cells.append(
            [
                str(number if number is not None else "all"),
                _time(rec),
                _time(wait),
                _time(rep),
                _ratio(rep, rec),
                _ratio(rep, _less(rec, wait)),
            ]
        )
    med_rec, med_rep, med_wait = (
        replay.recorded_comm_s,
        replay.replayed_comm_s,
        replay.recorded_wait_s,
    )
    less = [_less(r, w) for r, w in zip(recorded, waits, strict=False)]
    cells.append(
        [
            "median",
            _time(med_rec),
            _time(med_wait),
            _time(med_rep),
            _median_ratio(replayed, recorded),
            _median_ratio(replayed, less),
        ]
    )
    return headers, cells


def _less(total: float | None, part: float | None) -> float | None:
    return None if total is None or part is None else total - part


def rows_table(explained: Sequence[Explained]) -> tuple[list[str], list[list[str]]]:
    """The rows that dominate, with the model beside each measurement."""
    headers = ["op", "size", "dtype", "group", "calls", "time", "share", "model", "bound"]
    cells = [
        [
            e.row.op,
            format_size(e.row.size_bytes),
            e.row.dtype or "-",  # none: an op that carries no data (a barrier)
            str(e.row.world_size),
            str(e.row.calls),
            _time(e.row.time_us / 1e6),
            f"{e.share:.0%}",
            _time(None if e.predicted_us is None else e.predicted_us / 1e6),
            e.regime,
        ]
        for e in explained[:TOP_ROWS]
    ]
    return headers, cells


def rebucket_table(replay: ReplayRecord) -> tuple[list[str], list[list[str]]]:
    headers = ["bucket_cap_mb", "buckets", "measured / step", "predicted / step"]
    cells = [
        [
            f"{c.cap_bytes / (1 << 20):g}",
            str(c.buckets),
            _time(c.measured_s_per_step),
            _time(c.predicted_s_per_step),
        ]
        for c in replay.rebucket
    ]
    return headers, cells


def model_line(params: Params | None, why: str) -> str:
    if params is None:
        return f"No model: {why}."
    return (
        f"Model fitted to this run's rows: latency (alpha) {params.alpha_us:.3g} us per step, "
        f"bandwidth (beta) {params.bw_gbps:.3g} GB/s per link."
    )


def advice_line(replay: ReplayRecord, params: Params | None) -> str | None:
    """The advisor's verdict, and why, in the model's terms."""
    measured = [c for c in replay.rebucket if c.measured_s_per_step is not None]
    if not measured or replay.best_cap_mb is None:
        return None
    best = min(measured, key=lambda c: c.measured_s_per_step or 0.0)
    line = (
        f"Best bucket_cap_mb={replay.best_cap_mb:g}: {best.buckets} all-reduce(s) per step, "
        f"{_time(best.measured_s_per_step)} measured"
    )
    if best.predicted_s_per_step is not None:
        line += f", {_time(best.predicted_s_per_step)} predicted"
    most = max(measured, key=lambda c: c.buckets)
    if params is not None and most.buckets > best.buckets:
        saved = (most.buckets - best.buckets) * op_cost("all_reduce", replay.world).steps
        line += (
            f". Against {most.buckets} buckets at {most.cap_bytes / (1 << 20):g} MB, it saves "
            f"{saved} latency steps ({_time(saved * params.alpha_us / 1e6)} in the model): "
            "fewer, larger all-reduces win while a step's latency outweighs its bytes"
        )
    return line + "."


Table = tuple[list[str], list[list[str]]]


@dataclass(frozen=True, slots=True)
class Explanation:
    """What a replay's summary says beside its rows, computed once for the command's output
    and the report's Replay section, which lay it out each their own way."""

    steps: Table
    """`step_table`: recorded against replayed, per step."""
    steps_note: str
    """`STEPS_NOTE`: what the table's median row is, said under it."""
    dominant: Table | None
    """`rows_table` of the rows that dominate; None when no row could be explained."""
    model: str
    """`model_line`: the fitted alpha and beta, or why there is no model."""
    rebucket: Table | None
    """`rebucket_table`; None without the bucket advisor."""
    advice: str | None
    """`advice_line`: the advisor's verdict; None without one."""


def explanation(replay: ReplayRecord, rows: Sequence[ResultRow], backend: str) -> Explanation:
    """The tables and lines of a replay's summary, the model fitted to its `rows`."""
    params, why = fit_rows(rows, backend)
    explained = explain(rows, params)
    return Explanation(
        steps=step_table(replay),
        steps_note=STEPS_NOTE,
        dominant=rows_table(explained) if explained else None,
        model=model_line(params, why),
        rebucket=rebucket_table(replay) if replay.rebucket else None,
        advice=advice_line(replay, params) if replay.rebucket else None,
    )


def elsewhere_lines(e: Elsewhere) -> list[str]:
    """The caps predicted on the other fabric, and the cap the model names there."""
    lines = [
        f"Predicted on {e.world} ranks, {e.bw_gbps:g} GB/s per link, {e.latency_us:g} us per step "
        "(the model alone):"
    ]
    headers = ["bucket_cap_mb", "buckets", "predicted / step"]
    cells = [[f"{c / (1 << 20):g}", str(b), _time(t)] for c, b, t in e.caps]
    lines += ["  " + line for line in text_table(headers, cells)]
    if e.best_cap_mb is not None:
        lines.append(f"There, bucket_cap_mb={e.best_cap_mb:g}.")
    return lines
