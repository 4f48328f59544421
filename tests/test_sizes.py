import itertools

import pytest

from commbench.errors import UserError
from commbench.sizes import format_amount, format_size, parse_size, parse_sizes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        ("8B", 8),
        ("1K", 1024),
        ("1k", 1024),
        ("2KiB", 2048),
        ("1kb", 1024),
        ("1M", 1 << 20),
        ("3MiB", 3 << 20),
        ("1G", 1 << 30),
        ("1gib", 1 << 30),
        ("1.5K", 1536),
        (" 4 K ", 4096),
    ],
)
def test_parse_size_units_are_binary_and_case_insensitive(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_range_doubles_by_default() -> None:
    sizes = parse_sizes("1K-1G")
    assert sizes[0] == 1024 and sizes[-1] == 1 << 30
    assert len(sizes) == 21
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))


def test_range_with_factor_and_bare_bytes() -> None:
    assert parse_sizes("8-128M:x4") == [8 * 4**i for i in range(13)]


def test_range_with_increment() -> None:
    assert parse_sizes("1M-4M:+1M") == [1 << 20, 2 << 20, 3 << 20, 4 << 20]


def test_range_stops_at_or_below_the_end() -> None:
    assert parse_sizes("1K-5K") == [1024, 2048, 4096]


def test_list_is_sorted_and_deduplicated() -> None:
    assert parse_sizes("1M,1K,64K,1K") == [1024, 65536, 1 << 20]


def test_list_and_ranges_mix() -> None:
    assert parse_sizes("1K-4K,1M") == [1024, 2048, 4096, 1 << 20]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "empty"),
        ("abc", "malformed size"),
        ("1Q", "unknown unit"),
        ("4K-1K", "backwards"),
        ("0", "positive"),
        ("-5", "sizes are positive"),
        ("1K-", "LOW-HIGH"),
        ("1K-1M:x1", "greater than 1"),
        ("1K-1M:y2", "malformed step"),
        ("1K,,2K", "item 2 of 3 is empty"),
        ("1.3B", "whole number"),
        ("1-1G:+1", "more than"),
    ],
)
def test_malformed_specs_raise_one_clear_error(spec: str, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment) as info:
        parse_sizes(spec)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(1020, "1020B"), (1024, "1K"), (1536, "1.5K"), (1 << 20, "1M"), (3 << 30, "3G")],
)
def test_format_size(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text
    if not text.endswith("B"):
        assert parse_size(text) == nbytes


def test_terabytes_print_as_terabytes() -> None:
    assert format_size(1 << 40) == "1T"
    assert format_amount(int(23.5 * (1 << 30))) == "23.5G"
    assert parse_size("2T") == 2 << 40
