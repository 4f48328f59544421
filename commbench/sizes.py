"""Message-size grammar: `1K-1G`, `8-128M:x4`, `1M-8M:+1M`, `1K,64K,1M`.

Units are binary (K = KiB = 1024), case-insensitive, as in nccl-tests' -b/-e flags. A bare
number is bytes. A range doubles unless a step says otherwise (`:xF` multiplies, `:+S` adds).
"""

from __future__ import annotations

import re

from commbench.errors import UserError

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
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_DISPLAY_UNITS = (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10))
# A ceiling on the number of sizes one spec may produce: a typo like `1-1G:+1` must not
# turn into a billion measurements.
MAX_SIZES = 4096


def parse_size(text: str) -> int:
    """One size, e.g. `64K` or `1.5M` -> bytes. Raises UserError on anything else."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UserError(
            f"malformed size {text!r}: expected a number with an optional unit (B, K, M, G, T)"
        )
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise UserError(
            f"unknown unit {unit!r} in size {text!r}: use B, K/KiB, M/MiB, G/GiB, T/TiB"
        )
    value = float(number) * factor
    if value != int(value):
        raise UserError(f"size {text!r} is not a whole number of bytes")
    if value <= 0:
        raise UserError(f"size {text!r} must be positive")
    return int(value)


def _parse_range(item: str) -> list[int]:
    body, _, step = item.partition(":")
    lo_text, _, hi_text = body.partition("-")
    if not lo_text.strip() or not hi_text.strip():
        raise UserError(
            f"malformed size or range {item!r}: sizes are positive, a range is LOW-HIGH"
        )
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if lo > hi:
        raise UserError(f"size range {item!r} runs backwards ({lo_text} > {hi_text})")
    step = step.strip()
    sizes = [lo]
    if not step or step.lower().startswith("x"):
        factor_text = step[1:] if step else "2"
        try:
            factor = float(factor_text)
        except ValueError:
            raise UserError(f"malformed step {step!r} in {item!r}: use :xF or :+SIZE") from None
        if factor <= 1:
            raise UserError(f"step factor in {item!r} must be greater than 1")
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
        raise UserError(f"malformed step {step!r} in {item!r}: use :xF or :+SIZE")
    return sizes


def parse_sizes(spec: str) -> list[int]:
    """A size spec -> sorted, de-duplicated sizes in bytes."""
    if not spec or not spec.strip():
        raise UserError("empty size list")
    sizes: set[int] = set()
    for item in spec.split(","):
        item = item.strip()
        if not item:
            raise UserError(f"empty item in size list {spec!r}")
        sizes.update(_parse_range(item) if "-" in item else [parse_size(item)])
        if len(sizes) > MAX_SIZES:
            raise UserError(f"size list {spec!r} gives more than {MAX_SIZES} sizes")
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
