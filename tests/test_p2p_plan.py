"""p2p settings and plan: which copies are timed together, in which order; bad input."""

from __future__ import annotations

import pytest

from commbench.errors import UserError
from commbench.p2p.plan import HOST, Copy, plan
from commbench.p2p.settings import DEFAULT_SIZE, P2PSettings, parse_gpu_list, parse_modes


def labels(settings: P2PSettings, n: int) -> list[tuple[str, str, str]]:
    return [(s.test, s.mode, s.label) for s in plan(settings, n).steps]


def test_default_is_the_puzzle_fan_out_in_both_modes() -> None:
    p = plan(P2PSettings(), 8)
    assert DEFAULT_SIZE == 400_000_000 == 10**8 * 4
    first = p.steps[0]
    assert (first.mode, first.size_bytes, first.label) == (
        "concurrent",
        DEFAULT_SIZE,
        "0->{1,2,3,4,5,6,7}",
    )
    assert [s.label for s in p.steps[1:]] == [f"0->{d}" for d in range(1, 8)]
    assert all(s.mode == "sequential" and len(s.copies) == 1 for s in p.steps[1:])
    assert p.notes == []


def test_dst_subset_and_modes() -> None:
    s = P2PSettings(dsts=[1, 2, 4], modes=["concurrent"])
    assert labels(s, 8) == [("bandwidth", "concurrent", "0->{1,2,4}")]
    s = P2PSettings(src=3, dsts=[0], modes=["sequential"])
    assert labels(s, 4) == [("bandwidth", "sequential", "3->0")]


def test_one_destination_is_timed_once_in_both_modes() -> None:
    assert labels(P2PSettings(dsts=[1]), 2) == [("bandwidth", "sequential", "0->1")]
    only = P2PSettings(dsts=[1], modes=["concurrent"])
    assert labels(only, 2) == [("bandwidth", "concurrent", "0->1")]


def test_bidirectional_copies_both_ways_at_once() -> None:
    p = plan(P2PSettings(dsts=[1, 2], bidirectional=True), 4)
    concurrent, *sequential = p.steps
    assert concurrent.copies == (Copy(0, 1), Copy(1, 0), Copy(0, 2), Copy(2, 0))
    assert [s.label for s in sequential] == ["0<->1", "0<->2"]
    assert all(s.direction == "bi" for s in p.steps)
    assert concurrent.devices == [0, 1, 2]


def test_host_and_latency_steps() -> None:
    s = P2PSettings(dsts=[1], modes=["sequential"], host=True, latency=True, latency_sizes=[4, 64])
    got = labels(s, 2)
    assert got[:3] == [
        ("bandwidth", "sequential", "0->1"),
        ("bandwidth", "sequential", "host->0"),
        ("bandwidth", "sequential", "0->host"),
    ]
    assert got[3:] == [("latency", "sequential", x) for x in ["0->1", "host->0", "0->host"] * 2]
    assert [st.size_bytes for st in plan(s, 2).steps[3:]] == [4, 4, 4, 64, 64, 64]
    assert Copy(HOST, 0).kind == "h2d" and Copy(0, HOST).kind == "d2h"
    assert Copy(HOST, 3).device == 3


def test_bidirectional_host_is_one_step() -> None:
    s = P2PSettings(dsts=[1], modes=["sequential"], host=True, bidirectional=True)
    assert [st.label for st in plan(s, 2).steps] == ["0<->1", "host<->0"]


def test_matrix_is_a_fan_out_per_source() -> None:
    p = plan(P2PSettings(matrix=True, modes=["sequential"]), 3)
    assert [s.label for s in p.steps] == ["0->1", "0->2", "1->0", "1->2", "2->0", "2->1"]
    p = plan(P2PSettings(matrix=True), 3)
    assert [s.label for s in p.steps if s.mode == "concurrent"] == [
        "0->{1,2}",
        "1->{0,2}",
        "2->{0,1}",
    ]


def test_explicit_pairs_group_by_source() -> None:
    s = P2PSettings.from_options({"pairs": [[0, 1], [0, 2], [3, 1]], "mode": "concurrent"})
    assert labels(s, 4) == [
        ("bandwidth", "concurrent", "0->{1,2}"),
        ("bandwidth", "concurrent", "3->1"),
    ]


def test_one_gpu_measures_within_the_gpu_and_says_so() -> None:
    p = plan(P2PSettings(host=True), 1)
    assert [s.label for s in p.steps] == ["0->0", "host->0", "0->host"]
    assert p.steps[0].copies[0].kind == "d2d"
    assert "no peers" in p.notes[0] and "within cuda:0" in p.notes[0]
    assert [s.label for s in plan(P2PSettings(matrix=True), 1).steps] == ["0->0"]


def test_several_sizes_in_order() -> None:
    s = P2PSettings(dsts=[1], sizes=[1 << 20, 1 << 30])
    assert [st.size_bytes for st in plan(s, 2).steps] == [1 << 20, 1 << 30]


@pytest.mark.parametrize(
    ("settings", "n", "message"),
    [
        (P2PSettings(src=8), 8, "--src 8: no such GPU (visible: 0..7)"),
        (P2PSettings(dsts=[1, 9]), 8, "--dst 9: no such GPU (visible: 0..7)"),
        (P2PSettings(dsts=[1]), 1, "--dst 1: no such GPU (visible: 0)"),
        (
            P2PSettings(),
            0,
            "p2p needs a CUDA GPU, and none is visible; without one, `commbench p2p --dry-run --topology SNAPSHOT.json` says what each copy of another machine should reach (SNAPSHOT.json: `commbench topo --format json` there)",
        ),
    ],
)
def test_gpus_out_of_range(settings: P2PSettings, n: int, message: str) -> None:
    with pytest.raises(UserError) as err:
        plan(settings, n)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dsts": [0, 1]}, "--dst includes the source GPU 0"),
        ({"dsts": [1, 1]}, "--dst names GPU 1 twice"),
        ({"matrix": True, "dsts": [1]}, "--matrix measures every pair; it takes no --dst"),
        ({"modes": []}, "no --mode to measure"),
        ({"warmup": -1}, "--warmup must be >= 0, got -1"),
        ({"iters": 0}, "--iters must be >= 1, got 0"),
        ({"sizes": [0]}, "size 0 must be positive"),
    ],
)
def test_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UserError) as err:
        P2PSettings(**kwargs)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_parsers() -> None:
    assert parse_gpu_list("1,2, 4") == [1, 2, 4]
    assert parse_modes("both") == ["concurrent", "sequential"]
    assert parse_modes("Sequential") == ["sequential"]
    for bad in ("1,,2", "a", "", "-1"):
        with pytest.raises(UserError):
            parse_gpu_list(bad)
    with pytest.raises(UserError, match="choose concurrent, sequential or both"):
        parse_modes("parallel")


def test_from_options_takes_a_suite_section() -> None:
    class Sizes:
        cuda = "1M,4M"
        cpu = "1K"

    s = P2PSettings.from_options(
        {"sizes": Sizes(), "pairs": "all", "bidirectional": True, "warmup": 2, "iters": 3}
    )
    assert s.matrix and s.bidirectional and s.sizes == [1 << 20, 4 << 20]
    assert (s.warmup, s.iters) == (2, 3)
    assert P2PSettings.from_options(s.to_dict()) == s
    with pytest.raises(UserError, match="unknown p2p option 'speed'"):
        P2PSettings.from_options({"speed": 1})
