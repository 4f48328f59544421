"""`run --confirm K`: a drop that persists fails, a one-off is reported as one. Rows are data
here (tests.factories), never timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.compare import Comparison, GateSettings, Mark, compare_rows
from commbench.suites.confirm import confirm, confirmation_settings, persists, worse_keys
from tests.factories import collectives_settings, make_row


def _steady(center: float, n: int = 120) -> list[float]:
    return [center * (1 + 0.02 * ((i * 37) % 11 - 5) / 5) for i in range(n)]


SIZES = (64 << 10, 1 << 20, 16 << 20)


def _run(slow: dict[int, float]) -> list:
    """Three points; those in `slow` that many times slower."""
    return [make_row(s, _steady(s / 100 * slow.get(s, 1.0))) for s in SIZES]


def _comparison(base: list, new: list) -> Comparison:
    points, _ = compare_rows(base, new, GateSettings())
    return Comparison(baseline="b", new="n", settings=GateSettings(), points=points)


@pytest.mark.parametrize(
    ("worse", "k", "expected"),
    [
        (0, 3, False),
        (1, 3, False),
        (2, 3, False),
        (3, 3, True),
        (1, 2, False),
        (2, 2, True),
        (1, 1, True),
        (0, 0, False),
    ],
)
def test_a_drop_persists_when_every_confirmation_sees_it(
    worse: int, k: int, expected: bool
) -> None:
    assert persists(worse, k) is expected


def test_a_persistent_drop_fails_and_a_one_off_warns() -> None:
    base = _run({})
    first = _comparison(base, _run({1 << 20: 2.0, 16 << 20: 2.0}))
    assert sorted(k[5] for k in worse_keys(first)) == [1 << 20, 16 << 20]
    # 1M is 2x slower every time; 16M was a one-off: back to normal in 2 of 3
    again = [
        _comparison(base, _run({1 << 20: 2.0, 16 << 20: 2.0})),
        _comparison(base, _run({1 << 20: 1.9})),
        _comparison(base, _run({1 << 20: 2.1})),
    ]
    judged = confirm(first, again)
    by_size = {p.size_bytes: p for p in judged.points}
    assert by_size[1 << 20].mark is Mark.worse
    assert by_size[1 << 20].confirmed == "3 of 3 confirmations worse (0.50x, 0.53x, 0.48x)"
    assert "persists: 3 of 3" in by_size[1 << 20].reason
    one_off = by_size[16 << 20]
    assert one_off.mark is Mark.noisy and one_off.confirmed is not None
    assert one_off.confirmed.startswith("1 of 3 confirmations worse")
    assert "a one-off" in one_off.reason
    assert by_size[64 << 10].mark is Mark.same and by_size[64 << 10].confirmed is None
    assert judged.exit_code == 1 and judged.verdict.startswith("REGRESSION: 1 worse")
    assert any("one-offs" in n for n in judged.notes)


def test_a_point_missing_from_a_confirmation_counts_as_worse() -> None:
    base = _run({})
    first = _comparison(base, _run({1 << 20: 3.0}))
    gone = [r for r in _run({}) if r.size_bytes != 1 << 20]
    judged = confirm(first, [_comparison(base, gone), _comparison(base, gone)])
    assert {p.size_bytes: p.mark for p in judged.points}[1 << 20] is Mark.worse


def test_no_confirmations_change_nothing() -> None:
    base = _run({})
    first = _comparison(base, _run({1 << 20: 3.0}))
    assert confirm(first, []) is first


def test_a_confirmation_measures_only_the_worse_points(tmp_path: Path) -> None:
    settings = collectives_settings(
        ops=["all_reduce", "all_gather", "broadcast"],
        sizes=[64 << 10, 1 << 20, 16 << 20],
        device="cpu",
        backend="gloo",
        nproc=2,
    )
    base = _run({})
    first = _comparison(base, _run({1 << 20: 2.0}))
    narrowed = confirmation_settings(settings, worse_keys(first))
    assert narrowed.ops == ["all_reduce"] and narrowed.sizes == [1 << 20]
    assert settings.ops == ["all_reduce", "all_gather", "broadcast"]  # the entry's own, kept
