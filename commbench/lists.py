"""Comma lists on the command line: one parser for every list option, so that an empty item
(`--ranks 0,,1`) and a list longer than any sane use (`--world` with a million values) are
refused alike, in one line naming the option, before any work is done on them."""

from __future__ import annotations

from commbench.errors import UserError, quoted

MAX_ITEMS = 4096
"""Items a list option takes at most (more ranks than --ranks could name on 512 nodes of 8)."""


def split_list(text: str, flag: str, *, max_items: int = MAX_ITEMS) -> list[str]:
    """The stripped items of `text`, a comma list given to `flag`. Refused: an empty list, an
    empty item (named by its position) and more than `max_items` items (counted before the
    list is split: a huge value costs no more than one pass)."""
    if not text.strip():
        raise UserError(f"{flag} is empty")
    count = text.count(",") + 1
    if count > max_items:
        raise UserError(f"{flag}: {count} items, more than {max_items}")
    items = [t.strip() for t in text.split(",")]
    for i, item in enumerate(items):
        if not item:
            raise UserError(f"{flag} {quoted(text[:80])}: item {i + 1} of {len(items)} is empty")
    return items
