"""The alpha-beta model against hand-computed values, the fit, and strategy names."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from commbench.collectives.specs import STRATEGIES, parse_strategies, ring_slices
from commbench.errors import UserError
from commbench.results.schema import CHECK_FAILED, ResultRow
from commbench.strategies.model import (
    Params,
    cost,
    direct_rows,
    fit,
    main_factor,
    predict,
    predict_one,
    winner,
)
from tests.factories import allreduce_factor, make_row

MIB = 1 << 20
# alpha 10 us, beta 100 GB/s: S bytes take S / 1e5 us on one link.
P = Params(alpha_us=10.0, bw_gbps=100.0)


def us(bytes_: float) -> float:
    return bytes_ / 1e5


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # n=4, S=1 MiB. direct: 2(n-1)=6 steps, 2(n-1)/n S = 1.5 S
        ("direct", 6 * 10 + us(1.5 * MIB)),
        # nccl chain reduce + chain broadcast: 6 steps, 2 S
        ("reduce_broadcast", 6 * 10 + us(2 * MIB)),
        ("reduce_scatter_all_gather", 6 * 10 + us(1.5 * MIB)),
        ("ring", 6 * 10 + us(1.5 * MIB)),
        # (n-1) = 3 steps of the whole S
        ("ring_naive", 3 * 10 + us(3 * MIB)),
    ],
)
def test_nccl_costs_by_hand(strategy: str, expected: float) -> None:
    assert predict_one(strategy, 4, MIB, P).time_us == pytest.approx(expected)


@pytest.mark.parametrize(
    ("strategy", "n", "expected"),
    [
        # ring reduce-scatter (3 steps) + gather at root (1) + tree broadcast (log2 4 = 2): 6
        # steps; bytes 0.75 S + 0.75 S + 2 S = 3.5 S
        ("reduce_broadcast", 4, 6 * 10 + us(3.5 * MIB)),
        # n=5: 5 + ceil(log2 5)=3 -> 8 steps; 0.8 S + 0.8 S + 3 S = 4.6 S
        ("reduce_broadcast", 5, 8 * 10 + us(4.6 * MIB)),
        # all-reduce (6 steps, 1.5 S) + ring all-gather (3 steps, 0.75 S)
        ("reduce_scatter_all_gather", 4, 9 * 10 + us(2.25 * MIB)),
        ("direct", 4, 6 * 10 + us(1.5 * MIB)),
    ],
)
def test_gloo_costs_by_hand(strategy: str, n: int, expected: float) -> None:
    params = Params(alpha_us=10.0, bw_gbps=100.0, backend="gloo")
    assert predict_one(strategy, n, MIB, params).time_us == pytest.approx(expected)


def test_busbw_uses_the_all_reduce_factor_for_every_strategy() -> None:
    for strategy in STRATEGIES:
        p = predict_one(strategy, 4, MIB, P)
        assert p.busbw_gbps == pytest.approx(MIB / (p.time_us * 1e3) * 1.5)
    # a ring all-reduce reaches busbw = beta at large sizes
    assert predict_one("direct", 8, 1 << 34, P).busbw_gbps == pytest.approx(100.0, rel=1e-3)


def test_launches_and_launch_cost() -> None:
    assert cost("direct", 4, MIB).launches == 1
    assert cost("reduce_scatter_all_gather", 4, MIB).launches == 2
    # 256 KiB chunks are pipelined in two slices: 2 x 2(n-1) p2p batches
    assert ring_slices(MIB // 4) == 2
    assert cost("ring", 4, MIB).launches == 12
    assert cost("ring", 4, 1024).launches == 6
    assert cost("ring_naive", 4, MIB).launches == 3
    with_launch = Params(alpha_us=10.0, bw_gbps=100.0, launch_us=2.0)
    assert predict_one("ring", 4, 1024, with_launch).time_us == pytest.approx(
        6 * 10 + 6 * 2 + us(1536)
    )


def test_one_rank_costs_nothing_but_launches() -> None:
    assert predict_one("direct", 1, MIB, P).time_us == 0.0
    assert predict_one("ring", 1, MIB, P).busbw_gbps == 0.0
    assert cost("reduce_broadcast", 1, MIB).launches == 2


def test_winner_is_latency_at_small_sizes_bandwidth_at_large() -> None:
    small = [predict_one(s, 8, 1024, P) for s in STRATEGIES]
    large = [predict_one(s, 8, 1 << 30, P) for s in STRATEGIES]
    assert winner(small) == "ring_naive"  # 7 steps beat 14
    assert winner(large) == "direct"  # ties with rs+ag and ring go to display order
    assert "latency-bound" in main_factor("ring_naive", 8, 1024, P)
    factor = main_factor("reduce_broadcast", 8, 1 << 30, P)
    assert "bandwidth-bound" in factor and "through the root" in factor


def test_predict_orders_world_size_then_size_then_strategy() -> None:
    out = predict(P, [8, 64], [1024, MIB], ["direct", "ring"])
    assert [(p.world_size, p.size_bytes, p.strategy) for p in out][:3] == [
        (8, 1024, "direct"),
        (8, 1024, "ring"),
        (8, MIB, "direct"),
    ]
    assert len(out) == 8


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"alpha_us": -1.0, "bw_gbps": 1.0}, "latency"),
        ({"alpha_us": 1.0, "bw_gbps": 0.0}, "bandwidth"),
        ({"alpha_us": 1.0, "bw_gbps": math.nan}, "bandwidth"),
        ({"alpha_us": 1.0, "bw_gbps": 1.0, "backend": "mpi"}, "unknown backend"),
    ],
)
def test_params_validate(kwargs: dict, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        Params(**kwargs)


# --- fit ---------------------------------------------------------------------------------


def row(n: int, size: int, t: float, strategy: str = "direct", check: str = "ok") -> ResultRow:
    return make_row(
        size,
        [t],
        busbw_factor=allreduce_factor(n),
        strategy=strategy,
        world_size=n,
        check=check,
    )


def synthetic(alpha: float, beta_gbps: float, n: int, sizes: list[int]) -> list[ResultRow]:
    truth = Params(alpha_us=alpha, bw_gbps=beta_gbps)
    return [row(n, s, predict_one("direct", n, s, truth).time_us) for s in sizes]


def test_fit_recovers_alpha_and_beta() -> None:
    sizes = [1 << k for k in range(10, 24, 2)]
    result = fit(synthetic(250.0, 0.5, 4, sizes), backend="gloo")
    assert result.params.alpha_us == pytest.approx(250.0, rel=1e-9)
    assert result.params.bw_gbps == pytest.approx(0.5, rel=1e-9)
    assert result.params.backend == "gloo"
    assert result.worst_error == pytest.approx(0.0, abs=1e-9)
    assert result.points == len(sizes)


def test_fit_across_world_sizes_and_plain_all_reduce_rows() -> None:
    rows = synthetic(5.0, 80.0, 2, [1024, MIB]) + synthetic(5.0, 80.0, 8, [4096, 64 * MIB])
    rows[0].strategy = ""  # a plain all_reduce row counts as direct
    result = fit(rows)
    assert result.params.alpha_us == pytest.approx(5.0, rel=1e-9)
    assert result.params.bw_gbps == pytest.approx(80.0, rel=1e-9)
    assert result.world_sizes == [2, 8]


def test_fit_ignores_other_strategies_failed_checks_and_one_rank() -> None:
    rows = synthetic(100.0, 1.0, 4, [1024, MIB])
    rows += [row(4, 4096, 1e9, strategy="ring"), row(4, 8192, 1e9, check=CHECK_FAILED)]
    rows.append(row(1, 16384, 1e9))
    assert len(direct_rows(rows)) == 2
    assert fit(rows).params.alpha_us == pytest.approx(100.0)


def test_fit_is_robust_to_noise() -> None:
    rows = synthetic(100.0, 1.0, 4, [1 << k for k in range(10, 23)])
    for i, r in enumerate(rows):
        r.stats = replace(r.stats, median=r.time_us * (1.1 if i % 2 else 0.9))
    result = fit(rows)
    assert result.params.alpha_us == pytest.approx(100.0, rel=0.15)
    assert result.params.bw_gbps == pytest.approx(1.0, rel=0.15)
    assert 0.05 < result.worst_error < 0.3


def test_fit_clamps_a_negative_latency_to_zero() -> None:
    # time proportional to size with a shortfall at small sizes: the best line crosses zero
    rows = [row(2, s, s / 1e3 * (0.5 if s == 1024 else 1.0)) for s in (1024, MIB, 4 * MIB)]
    result = fit(rows)
    assert result.params.alpha_us == 0.0
    assert result.params.bw_gbps > 0


def test_fit_needs_two_sizes() -> None:
    with pytest.raises(UserError, match="2 sizes or more"):
        fit([*synthetic(1.0, 1.0, 4, [1024]), row(4, 1024, 3.0, strategy="ring")])


def test_fit_refuses_time_that_does_not_grow() -> None:
    with pytest.raises(UserError, match="does not grow"):
        fit([row(4, 1024, 100.0), row(4, MIB, 10.0)])


# --- names -------------------------------------------------------------------------------


def test_parse_strategies() -> None:
    assert parse_strategies("all") == list(STRATEGIES)
    assert parse_strategies(" ring, direct,ring ") == ["ring", "direct"]
    with pytest.raises(UserError, match="unknown strategy 'tree'"):
        parse_strategies("direct,tree")
    with pytest.raises(UserError, match=r"--strategies .*is empty"):
        parse_strategies(" , ")
