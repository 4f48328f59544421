"""The one table layout every command shares."""

from __future__ import annotations

import pytest

from commbench.tables import markdown_table, text_table


def test_numbers_align_right_and_named_word_columns_left() -> None:
    lines = text_table(
        ["pair", "GB/s", "why"], [["0->1", "1.5", "ok"], ["0->12", "123.25", ""]], left=(0, 2)
    )
    assert lines == [
        "pair     GB/s  why",
        "0->1      1.5  ok",
        "0->12  123.25",
    ]


def test_markdown_escapes_cell_pipes_and_marks_alignment() -> None:
    lines = markdown_table(["size", "why"], [["1K", "a|b"]], left=(1,))
    assert lines == ["| size | why |", "|---:|---|", "| 1K | a\\|b |"]


def test_a_row_of_the_wrong_width_is_a_bug_not_a_silently_cut_column() -> None:
    with pytest.raises(ValueError):
        text_table(["a", "b"], [["1"]])


def test_fixed_keeps_two_significant_digits_and_never_an_exponent() -> None:
    from commbench.tables import fixed

    assert [fixed(v) for v in (359.56, 0.5, 0.0043, 8e-05)] == [
        "359.56",
        "0.50",
        "0.0043",
        "0.000080",
    ]
    # a value that rounds up to the next power of ten keeps two digits, like its neighbours
    assert [fixed(v) for v in (0.00999, 0.00995, 0.000999, -0.00999)] == [
        "0.010",
        "0.010",
        "0.0010",
        "-0.010",
    ]
    assert [fixed(v) for v in (None, float("nan"), float("inf"))] == ["-", "-", "-"]
