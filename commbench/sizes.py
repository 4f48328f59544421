"""Message-size grammar: `1K-1G`, `8-128M:x4`, `1M-8M:+1M`, `1K,64K,1M`.

Units are binary (K = KiB = 1024), case-insensitive, as in nccl-tests' -b/-e flags. A bare
number is bytes. A range doubles unless a step says otherwise (`:xF` multiplies, `:+S` adds).
"""

from __future__ import annotations

import re
from fractions import Fraction

from commbench.errors import UserError, quoted
from commbench.numbers import parse_number

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
# ASCII digits only: `\d` would take a fullwidth or Arabic-Indic digit (re.ASCII makes `\s` ASCII too).
_SIZE_RE = re.compile(r"^\s*([0-9]+)(?:\.([0-9]+))?\s*([a-zA-Z]*)\s*$", re.ASCII)
_DISPLAY_UNITS = (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))
# A ceiling on the number of sizes one spec may produce: a typo like `1-1G:+1` must not
# turn into a billion measurements.
MAX_SIZES = 4096
# A ceiling on one size: 1 PiB per rank is more memory than any machine has (a 400-digit size
# or `1K-1M:x1e300` must be refused, not turned into an overflow or a billion-TiB buffer).
MAX_SIZE = 1 << 50
MAX_SIZE_TEXT = "1024T"


def parse_size(text: str) -> int:
    """One size, e.g. `64K` or `1.5M` -> bytes. Raises UserError on anything else."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UserError(
            f"malformed size {quoted(text)}: expected a number with an optional unit (B, K, M, G, T)"
        )
    whole, decimals, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise UserError(
            f"unknown unit {quoted(unit)} in size {quoted(text)}: use B, K/KiB, M/MiB, G/GiB, T/TiB"
        )
    if len(decimals or "") > 40:  # no unit needs more; int() of 5,000 digits raises
        raise UserError(f"size {quoted(text)} has more decimals than a size in bytes can use")
    whole = whole.lstrip("0") or "0"
    if len(whole) > 20:  # far past MAX_SIZE whatever the unit; not worth converting
        whole = str(MAX_SIZE + 1)
    # exact arithmetic: in floats `1.0000000000000000001K` would pass as 1K
    value = Fraction(int(whole + (decimals or "")), 10 ** len(decimals or "")) * factor
    if value.denominator != 1:
        raise UserError(f"size {quoted(text)} is not a whole number of bytes")
    return check_size(int(value), text.strip())


def check_size(nbytes: int, text: str | None = None) -> int:
    """`nbytes` if it is a size commbench can measure (1 B to MAX_SIZE), else a UserError.
    For sizes that arrive as numbers (a suite's list, settings) rather than as text."""
    shown = quoted(text) if text is not None else f"{nbytes}"
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise UserError(f"size {shown} is not a whole number of bytes")
    if nbytes <= 0:
        raise UserError(f"size {shown} must be positive")
    if nbytes > MAX_SIZE:
        if text is None:
            shown = f"of {nbytes.bit_length()} bits" if nbytes.bit_length() > 64 else shown
        raise UserError(
            f"size {shown} is larger than {MAX_SIZE_TEXT} (1 PiB): no machine holds a buffer "
            "that large"
        )
    return nbytes


def _parse_range(item: str) -> list[int]:
    body, _, step = item.partition(":")
    lo_text, _, hi_text = body.partition("-")
    if not lo_text.strip() or not hi_text.strip():
        raise UserError(
            f"malformed size or range {quoted(item)}: sizes are positive, a range is LOW-HIGH"
        )
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if lo > hi:
        raise UserError(
            f"size range {quoted(item)} runs backwards ({format_size(lo)} > {format_size(hi)})"
        )
    step = step.strip()
    sizes = [lo]
    if not step or step.lower().startswith("x"):
        factor_text = step[1:] if step else "2"
        try:
            factor = parse_number(factor_text, "step factor", maximum=MAX_SIZE)
        except UserError:  # inf, nan, 1e400, a fullwidth 2: one message for them all
            raise UserError(
                f"malformed step {quoted(step)} in {quoted(item)}: use :xF (a number F > 1) "
                "or :+SIZE"
            ) from None
        if factor <= 1:
            raise UserError(f"step factor in {quoted(item)} must be greater than 1")
        while True:
            nxt = int(sizes[-1] * factor)
            if nxt <= sizes[-1]:
                nxt = sizes[-1] + 1
            if nxt > hi:
                break
            sizes.append(nxt)
            if len(sizes) > MAX_SIZES:
                break
    elif step.startswith("+"):
        inc = parse_size(step[1:])
        while sizes[-1] + inc <= hi and len(sizes) <= MAX_SIZES:
            sizes.append(sizes[-1] + inc)
    else:
        raise UserError(f"malformed step {quoted(step)} in {quoted(item)}: use :xF or :+SIZE")
    return sizes


def parse_sizes(spec: str) -> list[int]:
    """A size spec -> sorted, de-duplicated sizes in bytes."""
    from commbench.lists import split_list

    sizes: set[int] = set()
    for item in split_list(spec or "", "--sizes"):
        sizes.update(_parse_range(item) if "-" in item else [parse_size(item)])
        if len(sizes) > MAX_SIZES:
            raise UserError(f"size list {quoted(spec)} gives more than {MAX_SIZES} sizes")
    return sorted(sizes)


def format_size(nbytes: int) -> str:
    """Bytes -> the shortest exact binary form (`1K`, `1.5M`, `1020B`), else one decimal."""
    for unit, factor in _DISPLAY_UNITS:
        if nbytes >= factor:
            value = nbytes / factor
            if value == int(value):
                return f"{int(value)}{unit}"
            if (value * 10) == int(value * 10):
                return f"{value:.1f}{unit}"
    return f"{nbytes}B"


def format_amount(nbytes: int) -> str:
    """Bytes -> a rounded amount for prose (`23.5G of memory`), not a size label."""
    for unit, factor in _DISPLAY_UNITS:
        if nbytes >= factor:
            return f"{nbytes / factor:.1f}{unit}"
    return f"{nbytes}B"
