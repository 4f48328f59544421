"""Numbers from a person or a job: flags, suite values, environment variables.

One place decides what a number is, so that every command agrees: ASCII digits only, finite,
and within bounds. Python's own parsers are too generous for input: `int()` and `float()`
take any Unicode decimal digit (fullwidth, Arabic-Indic), `str.isdigit()` also takes `'²'` (which
`int()` then refuses, with a traceback), `float()` takes `inf`, `nan` and `1e400` (infinity),
and `int()` takes 4,000 digits. A wrong number is a UserError naming what it was for.
"""

from __future__ import annotations

import math
import re
from typing import TypeVar

from commbench.errors import UserError, quoted

_DIGITS = re.compile(r"[0-9]+")
_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
# Longer than any count or index a machine has (and far below Python's 4300-digit limit on
# int()): a longer run of digits is a typo, refused before it is converted.
MAX_DIGITS = 30

# Warm-up or timed iterations per point (collectives, p2p): a count past this is a typo that
# would run for days, or overflow an index in the worker.
MAX_ITERATIONS = 1_000_000

N = TypeVar("N", int, float)


def is_digits(text: str) -> bool:
    """A non-empty run of ASCII digits 0-9 and nothing else (no sign, no space)."""
    return _DIGITS.fullmatch(text) is not None


def parse_int(
    text: str, what: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """A whole number in ASCII digits, optionally signed, within [minimum, maximum]."""
    body = text.strip()
    if not _INT.fullmatch(body) or len(body) > MAX_DIGITS:
        raise UserError(f"{what}: expected a whole number (digits 0-9), got {quoted(text)}")
    return check_range(int(body), what, minimum, maximum)


def parse_number(
    text: str, what: str, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """A finite decimal number (`2`, `1.5`, `1e3`) in ASCII, within [minimum, maximum]."""
    body = text.strip()
    if not _DECIMAL.fullmatch(body) or len(body) > 2 * MAX_DIGITS:
        raise UserError(f"{what}: expected a number (digits 0-9), got {quoted(text)}")
    return check_range(float(body), what, minimum, maximum)


def check_range(value: N, what: str, minimum: N | None = None, maximum: N | None = None) -> N:
    """`value` itself if it is finite and within [minimum, maximum], else a UserError.

    For numbers that arrive already typed (Typer's int and float options, YAML values),
    which may still be `nan`, `inf` or enormous.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{what} must be a finite number, got {value}")
    if minimum is not None and value < minimum:
        raise UserError(f"{what} must be >= {minimum}, got {shown_number(value)}")
    if maximum is not None and value > maximum:
        raise UserError(f"{what} must be <= {maximum}, got {shown_number(value)}")
    return value


def shown_number(value: float) -> str:
    """A number for a message: an enormous integer is not printed digit by digit."""
    if isinstance(value, int) and value.bit_length() > 64:  # str() of 5000 digits raises
        return f"a number of {value.bit_length()} bits"
    return str(value)
