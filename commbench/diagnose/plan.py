"""Which tests to run next and what they prove: the planner and the decision of `diagnose`.

Pure Python and deterministic: every worker runs the same `Isolation` on the same results
and so agrees on the next round without a message; the launcher replays it to write the
verdict; `benchmarks/diagnose_scale.py` runs it against simulated measurements. One code path.

The plan follows what cluster validation tools do (screen, then isolate), with the decision
made by statistics rather than a fixed threshold:

- *Singles* (a node's own GPUs together): every unit is tested once, all at once; a unit is
  judged against the median of the others.
- *All pairs* (few units: GPUs inside a node, or up to `SMALL` nodes): rounds of disjoint
  pairs (the circle method) until every pair ran. A unit is judged against the tests it was
  not part of, so a bad unit cannot drag its own expectation down, and it is degraded only
  when at least two of its tests, with different partners, are short.
- *Confirmation passes* (singles and all pairs): a test's iterations run back to back within
  milliseconds, so they share whatever the machine was doing then (ranks on CPU cores over
  loopback swing 2-4x from one test to the next on scheduling alone), and a rank test over
  them mistakes a slow moment for a slow link. When the first pass suspects anything, every
  test of the stage runs again, pass after pass, and each test's evidence becomes the medians
  of its passes: a test is then short only when it is slower than its peers pass after pass,
  beyond the spread between their passes. Nothing suspected: no extra round.
- *Screen, bisect, confirm* (many nodes): disjoint groups of `group` units test at once; the
  expectation is the median group (robust while fewer than half the groups hold a bad unit).
  A short group is split in halves, each topped up with units already shown healthy and
  tested again, until single units remain; a single unit is degraded only when two tests
  with different healthy partners are short, and cleared by one that is not.

A test is *short* when its median bandwidth is below the expectation by more than the
tolerance AND its samples are significantly slower than the reference samples (the
one-sided Mann-Whitney test the regression gate uses), so noise alone does not convict.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

SMALL = 8
"""Up to this many units, every pair is tested (at most SMALL - 1 rounds)."""
MAX_SINGLE_TESTS = 4
"""Confirmation tests of one suspect before it is left undecided."""
MAX_PASSES = 8
"""Passes over a stage's tests at most (the fewest that can convict are run)."""
MAX_ROUNDS = 40
"""Rounds a stage may run by default: room for the confirmation passes of up to 8 units (8
take 7 rounds a pass and 5 passes: `Isolation.confirm_passes`)."""


@dataclass(frozen=True, slots=True)
class Test:
    """One concurrent test: `probe` under test, topped up with `fillers` shown healthy."""

    __test__ = False  # a diagnosis's test, not pytest's
    round: int
    probe: tuple[int, ...]
    fillers: tuple[int, ...] = ()

    @property
    def units(self) -> tuple[int, ...]:
        return tuple(sorted(self.probe + self.fillers))


@dataclass(frozen=True, slots=True)
class Result:
    """What a test measured: one bandwidth per timed iteration (bus bandwidth, GB/s)."""

    test: Test
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else 0.0


@dataclass(slots=True)
class Finding:
    """What the tests say of one unit."""

    unit: int
    degraded: bool = False
    evidence: list[tuple[Result, float]] = field(default_factory=list)
    """The short tests that convict it, each with what was expected of it."""
    undecided: bool = False
    """Suspected, but the tests did not agree within the rounds allowed."""


def short(
    result: Result, expected: float, reference: Sequence[float], tolerance: float, alpha: float
) -> bool:
    """Below the expectation by more than `tolerance`, and significantly so."""
    if not result.samples or expected <= 0:
        return False
    if result.median >= expected * (1 - tolerance):
        return False
    if not reference:
        return True
    from commbench.compare import mann_whitney_greater  # the gate's statistics: 170 ms

    return mann_whitney_greater(reference, result.samples) < alpha


def passes_needed(reference_tests: int, alpha: float, limit: int) -> int:
    """The fewest passes after which one test, slower in every pass than every pass of the
    `reference_tests` tests it is judged against, is significantly slow at `alpha` (the rank
    test on pass medians); 1 (the first pass decides alone) when no number up to `limit`
    would be, or there is nothing to judge against."""
    if reference_tests < 1:
        return 1
    from commbench.compare import mann_whitney_greater

    for passes in range(2, min(limit, MAX_PASSES) + 1):
        slow = [float(i) for i in range(passes)]
        fast = [float(passes + i) for i in range(reference_tests * passes)]
        if mann_whitney_greater(fast, slow) < alpha:
            return passes
    return 1


def round_robin(units: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Every pair of `units` once, in rounds of disjoint pairs (the circle method)."""
    items: list[int | None] = list(units)
    if len(items) % 2:
        items.append(None)
    n = len(items)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = items[i], items[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
        items = [items[0], items[-1], *items[1:-1]]
    return rounds


class Isolation:
    """The tests of one stage over `units`, round by round, and what they prove.

    `next_round()` gives the tests to run now (disjoint: run them concurrently), `record()`
    takes their results, `findings()` says what is proven. `partners(a, b)`: whether two units
    may be tested together (GPUs of different nodes may not)."""

    def __init__(
        self,
        units: Sequence[int],
        *,
        mode: str,
        tolerance: float,
        alpha: float,
        group: int = 2,
        max_rounds: int = MAX_ROUNDS,
        expected: float | None = None,
        pair_rounds: list[list[tuple[int, int]]] | None = None,
    ) -> None:
        if mode not in ("singles", "pairs", "screen"):
            raise ValueError(f"unknown mode {mode!r}")
        self.units = sorted(units)
        self.mode = mode
        self.tolerance, self.alpha = tolerance, alpha
        self.group = max(2, group)
        self.max_rounds = max_rounds
        self.fixed_expectation = expected
        """An expectation given (a baseline, the peak): used instead of the peers' median."""
        self.results: list[Result] = []
        self.round = 0
        self._pairs = (pair_rounds or round_robin(self.units)) if mode == "pairs" else []
        self._cleared: set[int] = set()
        self._suspects: list[tuple[int, ...]] = []  # sets still to split or confirm
        self._strikes: dict[int, list[Result]] = {}
        self._passes: dict[int, list[Result]] = {}
        self._degraded: set[int] = set()
        self._undecided: set[int] = set()
        self._screen: list[Result] = []
        self._pending = list(self.units)  # not yet screened (screen mode)
        self._per_pass = {"singles": 1, "pairs": len(self._pairs)}.get(mode, 0)
        self.confirm_passes = self._confirm_passes()
        """Passes over every test when the first suspects something (1: it decides alone)."""
        self.passes = 1
        """Passes planned: `confirm_passes` once the first pass suspected something."""

    def _confirm_passes(self) -> int:
        """The fewest passes whose pass medians can convict both a unit, against the fewest
        tests of a pass it is judged against (the other units' own, or the pairs it is not
        part of), and a link, against the other pairs at `link_alpha`; 1 when the stage's
        rounds cannot hold them (the first pass then decides, on its iterations)."""
        if not self._per_pass:
            return 1
        limit = self.max_rounds // self._per_pass
        if self.mode == "singles":
            return passes_needed(len(self.units) - 1, self.alpha, limit)
        pairs = [p for r in self._pairs for p in r]
        against = min((sum(u not in p for p in pairs) for u in self.units), default=0)
        unit = passes_needed(against, self.alpha, limit)
        link = passes_needed(len(pairs) - 1, self.link_alpha, limit)
        return max(unit, link) if unit > 1 and link > 1 else 1

    @property
    def link_alpha(self) -> float:
        """The significance a link is convicted at after confirmation passes: every pair of a
        pass is a link that may be short, so each is held to alpha over their number (a unit
        needs two short tests with different partners, which guards it already)."""
        pairs = sum(len(r) for r in self._pairs)
        return self.alpha / max(1, pairs)

    # -- planning ---------------------------------------------------------------------------

    def next_round(self) -> list[Test]:
        """The tests of the next round; [] when the stage is done."""
        if self.round >= self.max_rounds:
            self._undecided |= {u for s in self._suspects for u in s}
            self._suspects = []
            return []
        if self.mode == "screen":
            return self._screen_round()
        if self.round == self._per_pass and self.passes == 1 and self._suspected():
            self.passes = self.confirm_passes
        if self.round >= self.passes * self._per_pass:
            return []
        if self.mode == "singles":
            return [Test(self.round, (u,)) for u in self.units]
        return [Test(self.round, p) for p in self._pairs[self.round % self._per_pass]]

    def _suspected(self) -> bool:
        """Whether the first pass, judged on its iterations, names a unit or a link."""
        if self.confirm_passes == 1:
            return False
        return any(f.degraded for f in self.findings().values()) or bool(self.short_links())

    def _screen_round(self) -> list[Test]:
        if self.round == 0:
            groups = [
                tuple(self.units[i : i + self.group]) for i in range(0, len(self.units), self.group)
            ]
            # a short last group would not be comparable: it waits for healthy fillers
            self._pending = [u for g in groups if len(g) < self.group for u in g]
            return [Test(0, g) for g in groups if len(g) == self.group]
        free = sorted(self._cleared)
        tests: list[Test] = []
        waiting: list[tuple[int, ...]] = []
        todo = [*self._suspects, *([tuple(self._pending)] if self._pending else [])]
        self._pending = []
        for suspects in todo:
            for part in [suspects] if len(suspects) == 1 else _halves(suspects):
                need = self.group - len(part)
                avoid = self._used_fillers(part[0]) if len(part) == 1 else set()
                fillers = [u for u in free if u not in avoid][:need]
                if len(fillers) < need:  # not enough healthy units free this round
                    waiting.append(part)
                    continue
                free = [u for u in free if u not in fillers]
                tests.append(Test(self.round, part, tuple(fillers)))
        self._suspects = waiting
        return tests

    def _used_fillers(self, unit: int) -> set[int]:
        """Partners a suspect was already confirmed against: each test takes new ones."""
        done = self._strikes.get(unit, []) + self._passes.get(unit, [])
        return {f for r in done for f in r.test.fillers}

    # -- recording ------------------------------------------------------------------------

    @property
    def passes_run(self) -> int:
        """The passes over every test run to their end (1 in screen mode)."""
        return max(1, self.round // self._per_pass) if self._per_pass else 1

    def measured(self) -> list[Result]:
        """Each test's evidence: as measured while one pass ran; after confirmation passes,
        one result per test whose samples are the medians of its passes, so that the rank
        test weighs the spread between passes, not the iterations of one moment. A run cut
        short before its second pass ended keeps its first pass."""
        if self.passes_run == 1:
            if not self._per_pass:
                return list(self.results)
            return [r for r in self.results if r.test.round < self._per_pass]
        passes: dict[tuple[int, ...], list[Result]] = {}
        for r in self.results:
            passes.setdefault(r.test.units, []).append(r)
        return [
            Result(rs[0].test, tuple(r.median for r in rs if r.samples)) for rs in passes.values()
        ]

    def expectation(
        self, exclude: int | None = None, tested: tuple[int, ...] = ()
    ) -> tuple[float, list[float]]:
        """The expected median bandwidth and the reference samples, from the peers' tests
        (those without `exclude`; the reference never holds the `tested` units' own), or the
        fixed expectation when one was given."""
        if self.mode == "screen":
            base = self._screen
        else:
            base = [r for r in self.measured() if exclude is None or exclude not in r.test.units]
        medians = [r.median for r in base if r.samples]
        expected = self.fixed_expectation or (statistics.median(medians) if medians else 0.0)
        if self.passes_run > 1:
            # every peer's passes: leaving out the peers that fell short (as below) would
            # leave out the slow moments of healthy tests too, and the reference would be
            # the lucky passes only
            return expected, [s for r in base if r.test.units != tested for s in r.samples]
        low = expected * (1 - self.tolerance)
        reference = [s for r in base if r.median >= low for s in r.samples]
        return expected, reference

    def is_short(
        self, result: Result, exclude: int | None = None, alpha: float | None = None
    ) -> bool:
        expected, reference = self.expectation(exclude, result.test.units)
        return short(result, expected, reference, self.tolerance, alpha or self.alpha)

    def record(self, results: Sequence[Result]) -> None:
        """The results of the round `next_round` gave."""
        self.results.extend(results)
        if self.mode == "screen":
            self._record_screen(results)
        self.round += 1

    def _record_screen(self, results: Sequence[Result]) -> None:
        if self.round == 0:
            self._screen = list(results)
        for r in results:
            probe, confirming = r.test.probe, len(r.test.probe) == 1 and bool(r.test.fillers)
            if not self.is_short(r):
                self._cleared |= set(r.test.units)
                if confirming:
                    self._passes.setdefault(probe[0], []).append(r)
                continue
            if not confirming:  # a group or a half: split it further
                self._suspects.append(probe)
                continue
            unit = probe[0]
            strikes = self._strikes.setdefault(unit, [])
            strikes.append(r)
            tried = len(strikes) + len(self._passes.get(unit, []))
            if len(strikes) >= 2:
                self._degraded.add(unit)
            elif tried >= MAX_SINGLE_TESTS:
                self._undecided.add(unit)
            else:
                self._suspects.append(probe)

    # -- the verdict -------------------------------------------------------------------------

    def findings(self) -> dict[int, Finding]:
        """Every unit's finding from what has been recorded."""
        out = {u: Finding(u) for u in self.units}
        if self.mode == "screen":
            expected, _ = self.expectation()
            for u in self._degraded | self._undecided:
                out[u].degraded = u in self._degraded
                out[u].undecided = u not in self._degraded
                out[u].evidence = [(r, expected) for r in self._strikes.get(u, [])]
            return out
        measured = self.measured()
        for u in self.units:
            mine = [r for r in measured if u in r.test.units]
            expected, _ = self.expectation(exclude=u)
            bad = [r for r in mine if self.is_short(r, exclude=u)]
            partners = {p for r in bad for p in r.test.units if p != u}
            if self.mode == "singles":  # judged against every other unit's own test
                out[u].degraded = bool(bad)
            else:  # two short tests with different partners, and most of its tests
                out[u].degraded = len(partners) >= 2 and 2 * len(bad) >= len(mine)
            out[u].evidence = [(r, expected) for r in bad]
        return out

    def short_links(self) -> list[Result]:
        """Pair tests that were short against the tests of neither unit (pairs mode): the
        link itself, when no unit alone explains it (two units only, or a bad link)."""
        if self.mode != "pairs":
            return []
        found = self.findings()
        alpha = self.link_alpha if self.passes_run > 1 else self.alpha
        return [
            r
            for r in self.measured()
            if not any(found[u].degraded for u in r.test.units)
            and self.is_short(r, alpha=alpha)
            and len(self.units) >= 2
        ]


def _halves(units: tuple[int, ...]) -> list[tuple[int, ...]]:
    mid = len(units) // 2
    return [units[:mid], units[mid:]]


def for_units(units: Sequence[int], *, tolerance: float, alpha: float, **kwargs: Any) -> Isolation:
    """The isolation of `units` (nodes): every pair while they are few, else screen, bisect
    and confirm."""
    mode = "pairs" if len(units) <= SMALL else "screen"
    return Isolation(units, mode=mode, tolerance=tolerance, alpha=alpha, **kwargs)


def drive(iso: Isolation, measure: Callable[[list[Test]], list[Result]]) -> Isolation:
    """Run the stage to its end: each round's tests measured (concurrently) by `measure`."""
    while tests := iso.next_round():
        iso.record(measure(tests))
    return iso
