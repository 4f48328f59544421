"""Named skews: how unevenly an all_to_allv spreads each rank's message over its destinations.

A mixture-of-experts layer routes tokens to experts unevenly, so each rank's all-to-all sends
different amounts to different ranks, and some rank receives more than the others. `--skew`
names the shape of that routing and `--seed` the draw, and from them every rank computes
every rank's send splits (so each knows what it receives without an extra exchange):

- `uniform`: every destination weighs the same (all_to_all's traffic, through the
  uneven-split call; the seed plays no part);
- `zipf:S`: a source's destinations weigh 1/(k+1)^S for popularity k = 0..n-1, each source
  ranking its destinations by its own seeded permutation (0 < S <= 16);
- `hot:F`: one destination, drawn from the seed and the same for every source, weighs F
  times each other (a hot expert; 1 <= F <= 10^6).

Rounding: a source's weights become integers (zipf's 10^15 / (k+1)^S computed in decimal
arithmetic, so every node agrees whatever its libm), and its count C is cut at the
cumulative weights: destination d gets floor(C x cum[d+1] / W) - floor(C x cum[d] / W)
elements, with cum the prefix sums in rank order and W their total. Every split is within one
element of its exact share C x w[d] / W, the splits sum to exactly C, and the arithmetic is
exact integers: the same on every rank, node and platform. Uniform splits are all_to_all's
exactly when n divides C (`plan_size` makes it so).

The busiest rank (`Skew.busiest`) is the one that sends or receives the most elements; every
rank sends exactly C, so it is the one receiving the most, and `ratio` = busiest / C is the
skew's max/mean (the mean of what ranks send or receive is C). The costs are in Python, on
the host, never in a timed loop: what a rank receives costs O(n^2) once per run (every
source's permutation: 0.5 s at 1,024 ranks), the busiest rank O(n^2) per size on rank 0 and
the launcher (0.02 s at 256 ranks; 0.6 s at 1,024, after 1.4 s once).

Torch-free: the settings check `--skew` with it, the worker splits with it, and the readers
of stored rows check a row's `skew` label with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from commbench.errors import UserError, quoted
from commbench.numbers import check_range, parse_number

SKEWS = ("uniform", "zipf", "hot")
"""The skews `--skew` names, in the order the help lists them."""
SKEW_FORMS = ("uniform", "zipf:S", "hot:F")
"""How each is typed."""
DEFAULT_SKEW = "uniform"
DEFAULT_SEED = 0
MAX_SEED = (1 << 63) - 1
ZIPF_MAX = 16.0
"""Past this exponent every destination but a source's first gets under 10^-4 of its count at
any world size: the skew is `hot`, with the hot destination differing per source."""
HOT_MAX = 1e6
WEIGHT_SCALE = 10**15
"""A destination's weight at popularity 0 (zipf) or the ordinary weight (hot): zipf's
weights as integers keep 15 significant digits."""
DECIMAL_DIGITS = 40
"""zipf's powers are decimal arithmetic to this precision (libmpdec, integer code): the same
on every node, where a float pow from two libms may differ in its last bit."""
_SEED_SEP = " seed="
"""Between a skew and its seed in a row's label: `zipf:1.2 seed=0`."""


@dataclass(frozen=True, slots=True)
class Skew:
    """One named skew and the seed of its draw: what `--skew` and `--seed` say."""

    name: str
    """One of `SKEWS`."""
    param: str = ""
    """zipf's exponent or hot's factor as text (`1.2`, `2`); '' for uniform."""
    seed: int = DEFAULT_SEED
    """The draw of zipf's permutations and hot's destination (uniform ignores it)."""

    @classmethod
    def parse(cls, text: str, seed: int = DEFAULT_SEED, flag: str = "--skew") -> Skew:
        """`uniform`, `zipf:1.2`, `hot:2` -> a Skew; UserError (one line naming `flag`)
        for anything else."""
        check_range(seed, "--seed", 0, MAX_SEED)
        if not text.strip():
            raise UserError(f"{flag} is empty (choose from: {', '.join(SKEW_FORMS)})")
        name, colon, value = text.strip().partition(":")
        name = name.strip().lower()
        if name not in SKEWS:
            import difflib  # an error's hint: not on the path of every import

            near = difflib.get_close_matches(name, SKEWS, n=1, cutoff=0.7)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise UserError(
                f"{flag}: unknown skew {quoted(text)}{hint} (choose from: {', '.join(SKEW_FORMS)})"
            )
        if name == "uniform":
            if colon:
                raise UserError(f"{flag}: uniform takes no parameter, got {quoted(text)}")
            return cls(name=name, seed=seed)
        what = "exponent S" if name == "zipf" else "factor F"
        if not value.strip():
            example = "zipf:1.2" if name == "zipf" else "hot:2"
            raise UserError(f"{flag}: {name} needs its {what}, e.g. {example}; got {quoted(text)}")
        number = parse_number(value, f"{flag} {name}:{what[-1]}")
        if name == "zipf" and not 0 < number <= ZIPF_MAX:
            raise UserError(f"{flag}: zipf:S needs 0 < S <= {ZIPF_MAX:g}, got {quoted(text)}")
        if name == "hot" and not 1 <= number <= HOT_MAX:
            raise UserError(
                f"{flag}: hot:F needs 1 <= F <= {HOT_MAX:.0f} (the hot destination gets F times "
                f"another's share), got {quoted(text)}"
            )
        return cls(name=name, param=_canonical(number), seed=seed)

    @classmethod
    def from_label(cls, label: str, flag: str = "skew") -> Skew:
        """The skew a row's `label` names (`zipf:1.2 seed=0`, `uniform`); UserError naming
        `flag` (a stored file's field) for a label commbench would not write."""
        spec, sep, seed_text = label.partition(_SEED_SEP)
        seed = DEFAULT_SEED
        if sep:
            if not seed_text.isascii() or not seed_text.isdigit() or len(seed_text) > 19:
                raise UserError(f"{flag}: {quoted(label)} has no seed after 'seed='")
            seed = int(seed_text)
        skew = cls.parse(spec, seed, flag)
        if skew.label != label:
            raise UserError(f"{flag}: {quoted(label)} is not a skew's label ({skew.label!r} is)")
        return skew

    @property
    def spec(self) -> str:
        """As `--skew` takes it: `zipf:1.2`."""
        return f"{self.name}:{self.param}" if self.param else self.name

    @property
    def seeded(self) -> bool:
        """Whether the seed shapes the splits (not for uniform)."""
        return self.name != "uniform"

    @property
    def label(self) -> str:
        """What a row names: the skew, and its seed where the seed shapes the splits, so
        that rows of two draws are two points to the regression gate (`uniform`,
        `zipf:1.2 seed=0`)."""
        return f"{self.spec}{_SEED_SEP}{self.seed}" if self.seeded else self.spec

    # -- the splits ----------------------------------------------------------------------------

    def send(self, rank: int, count: int, n: int) -> list[int]:
        """The elements group rank `rank` sends to each group rank, in rank order (sum: count)."""
        cum = _cumulative(self, rank, n)
        total = cum[-1]
        return [count * cum[d + 1] // total - count * cum[d] // total for d in range(n)]

    def recv(self, rank: int, count: int, n: int) -> list[int]:
        """The elements group rank `rank` receives from each group rank (their `send`s to it)."""
        total = _total(self, n)
        return [count * hi // total - count * lo // total for lo, hi in _column(self, rank, n)]

    def busiest(self, count: int, n: int) -> int:
        """The most elements any rank sends or receives (every rank sends `count`)."""
        rows, times = _sources(self, n)
        total = rows[0][-1]
        got = [0] * n
        for cum in rows:
            for d in range(n):
                got[d] += count * cum[d + 1] // total - count * cum[d] // total
        return max(count, times * max(got))

    def ratio(self, count: int, n: int) -> float:
        """busiest / mean: how much more the busiest rank moves than the average one (1.0
        for uniform where n divides count; every rank sends count, the mean)."""
        return self.busiest(count, n) / count if count else 1.0


def _canonical(number: float) -> str:
    """A parameter as a label writes it: `2`, not `2.0`; `1.2`, not `1.20`."""
    if number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return repr(number)


def _order(skew: Skew, src: int, n: int) -> list[int]:
    """Source `src`'s destinations, most popular first (zipf): its own seeded permutation.
    A string seed is hashed by SHA-512 (random's version 2), the same on every platform."""
    order = list(range(n))
    random.Random(f"commbench skew {skew.seed} {src}").shuffle(order)
    return order


@lru_cache(maxsize=16)
def _zipf_weights(param: str, n: int) -> tuple[int, ...]:
    """10^15 / (k+1)^S for popularity k = 0..n-1, as integers (floored)."""
    from decimal import Context, Decimal

    exact = Context(prec=DECIMAL_DIGITS)
    s = Decimal(param)
    return tuple(int(exact.divide(WEIGHT_SCALE, exact.power(Decimal(k + 1), s))) for k in range(n))


def _hot(skew: Skew, n: int) -> int:
    """hot's destination: one for every source, drawn from the seed."""
    return random.Random(f"commbench skew {skew.seed} hot").randrange(n)


def weights(skew: Skew, src: int, n: int) -> list[int]:
    """Source `src`'s integer weight of each destination, in rank order."""
    if skew.name == "uniform":
        return [1] * n
    if skew.name == "hot":
        from decimal import Decimal

        out = [WEIGHT_SCALE] * n
        out[_hot(skew, n)] = int(Decimal(skew.param) * WEIGHT_SCALE)  # floored, as zipf's
        return out
    out = [0] * n
    for dst, w in zip(_order(skew, src, n), _zipf_weights(skew.param, n), strict=True):
        out[dst] = w
    return out


@lru_cache(maxsize=8)
def _cumulative(skew: Skew, src: int, n: int) -> tuple[int, ...]:
    """Source `src`'s prefix sums of its weights: cum[0] = 0 ... cum[n] = W."""
    return _prefix(weights(skew, src, n))


@lru_cache(maxsize=8)
def _total(skew: Skew, n: int) -> int:
    """W: every source's weights sum to the same total (a permutation of the same weights)."""
    return sum(weights(skew, 0, n))


@lru_cache(maxsize=1)
def _sources(skew: Skew, n: int) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Every source's prefix sums, and how many sources each stands for: all n of them for
    zipf (n^2 integers: 36 MB at 1,024 ranks, on rank 0 only), one row for n sources where
    every source weighs alike."""
    if skew.name != "zipf":
        return (_cumulative(skew, 0, n),), n
    return tuple(_prefix(weights(skew, src, n)) for src in range(n)), 1


def _prefix(ws: list[int]) -> tuple[int, ...]:
    cum = [0]
    for w in ws:
        cum.append(cum[-1] + w)
    return tuple(cum)


@lru_cache(maxsize=64)
def _column(skew: Skew, dst: int, n: int) -> tuple[tuple[int, int], ...]:
    """(cum_s[dst], cum_s[dst + 1]) of every source s: what `dst` receives, at any count."""
    if skew.name != "zipf":  # every source weighs alike: one row serves them all
        cum = _cumulative(skew, 0, n)
        return ((cum[dst], cum[dst + 1]),) * n
    out = []
    for src in range(n):
        w = weights(skew, src, n)
        below = sum(w[:dst])
        out.append((below, below + w[dst]))
    return tuple(out)
