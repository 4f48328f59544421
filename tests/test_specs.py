import pytest

from commbench.collectives.specs import OPS, STRATEGIES, busbw_factor, parse_ops, plan_size
from commbench.errors import UserError
from commbench.results.names import BACKENDS


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("all_to_allv", 4, 0.75),
        ("gather", 4, 0.75),
        ("scatter", 4, 0.75),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 2, 1.0),
    ],
)
def test_busbw_factors_follow_nccl_tests(op: str, n: int, factor: float) -> None:
    assert busbw_factor(op, n) == pytest.approx(factor)


def test_barrier_has_no_bandwidth() -> None:
    assert busbw_factor("barrier", 4) is None


def test_every_strategy_says_what_the_model_counts_on_every_backend() -> None:
    # the one strategy table: the model's legend and the tables' headers read it
    for spec in STRATEGIES.values():
        assert spec.header and set(spec.counts) == set(BACKENDS)
    assert [s.header for s in STRATEGIES.values()][1:3] == ["red+bcast", "rs+ag"]


def test_parse_ops() -> None:
    assert parse_ops("all") == list(OPS)
    assert parse_ops("all_gather, all_reduce,all_gather") == ["all_gather", "all_reduce"]
    with pytest.raises(UserError, match="unknown op 'allreduce'"):
        parse_ops("allreduce")


def test_exact_size_is_not_rounded() -> None:
    plan = plan_size("all_gather", 1024, "float32", 4)
    assert (plan.size_bytes, plan.count, plan.note) == (1024, 256, "")


def test_split_op_rounds_down_to_a_multiple_of_the_world_size() -> None:
    plan = plan_size("all_gather", 1024, "float32", 3)
    assert plan.count == 255 and plan.size_bytes == 1020
    assert "rounded from 1024 B" in plan.note


def test_partial_element_rounds_down() -> None:
    plan = plan_size("all_reduce", 1023, "float64", 2)
    assert plan.count == 127 and plan.size_bytes == 1016 and plan.note


def test_too_small_rounds_up_to_one_element_per_rank() -> None:
    plan = plan_size("reduce_scatter", 2, "float32", 4)
    assert plan.count == 4 and plan.size_bytes == 16 and "rounded" in plan.note


def test_sizes_that_round_to_one_size_are_measured_once() -> None:
    from commbench.collectives.settings import plan_points
    from tests.factories import collectives_settings

    settings = collectives_settings(
        ops=["all_reduce", "all_gather"],
        sizes=[1, 6, 64, 66],
        nproc=4,
        backend="gloo",
        device="cpu",
        strategies=["ring"],
    )
    points = plan_points(settings, group_size=4)
    by = {}
    for p in points:
        by.setdefault(p.strategy or p.op, []).append(p.requested_bytes)
    # float32: 1 and 6 both give 4 B, 64 and 66 both 64 B; all_gather rounds up to 16 B
    # (one element per rank) for 1 and 6, and to multiples of 16 B for 64 and 66
    assert by == {"all_reduce": [1, 64], "all_gather": [1, 64], "ring": [1, 64]}
    assert len(plan_points(settings, group_size=1)) == len(points)
