"""`--pace`: each call of a replayed step issued at its recorded offset from the step's
first call on any rank, the job's compute and its ranks' skew replayed as idle time, with
every idle gap capped (docs/traces.md, "Replaying"). A trace can hold gaps no replay should
wait out: a job paused in a debugger, a clock that jumped, two calls 10^15 ns apart.

Times stay integer nanoseconds until the offset is taken, so issue times near 2^63 lose
nothing to a float's 53 bits."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commbench.traces.records import Call

DEFAULT_MAX_GAP_S = 10.0
"""The longest idle wait `--pace` replays between two calls of a step unless `--max-gap`
says otherwise (and at most half of `--timeout`): longer than the compute between two
calls of most training steps, short enough that a trace with a day-long pause replays in
seconds, never as a hang."""


@dataclass(frozen=True, slots=True)
class StepClock:
    """A replayed step's recorded time line, for `--pace`: a call's offset is its issue time
    less the step's first issue on any rank, less what was cut from the idle gaps before it.
    A gap between two successive issues of the step (on any rank) longer than the cap is
    replayed as the cap: the order of the calls and every gap up to the cap are kept."""

    origin_ns: int
    ends: tuple[int, ...] = ()
    """The issue times that end a capped gap, in time order."""
    cuts: tuple[int, ...] = ()
    """Nanoseconds cut from the time line up to each of `ends` (a running total)."""

    def offset_s(self, issued_ns: int) -> float:
        i = bisect.bisect_right(self.ends, issued_ns)
        cut = self.cuts[i - 1] if i else 0
        return max(0, issued_ns - self.origin_ns - cut) / 1e9


@dataclass(frozen=True, slots=True, kw_only=True)
class Gaps:
    """What `--pace` does with the trace's idle gaps (said in the notes and run.json)."""

    max_gap_s: float
    """The cap: the longest idle wait replayed between two calls of a step."""
    capped: int = 0
    """Gaps longer than the cap, replayed as the cap."""
    longest_s: float = 0.0
    """The longest gap in the replayed steps, as recorded."""
    backwards: int = 0
    """Calls recorded as issued before the call before them on their rank (a clock that
    stepped back): each is issued right after it."""

    def notes(self) -> list[str]:
        out = []
        if self.capped:
            out.append(
                f"--pace: {self.capped} idle gap(s) between calls longer than --max-gap "
                f"{self.max_gap_s:g} s (the longest {self.longest_s:.3g} s) are "
                f"replayed as {self.max_gap_s:g} s"
            )
        if self.backwards:
            out.append(
                f"--pace: {self.backwards} call(s) are recorded as issued before the call "
                "before them on their rank (a clock that stepped back?): each is issued right "
                "after it"
            )
        return out


def step_clocks(
    by_step: Mapping[int | None, Mapping[int, Sequence[Call]]],
    steps: Sequence[int | None],
    max_gap_s: float,
) -> tuple[list[StepClock | None], Gaps]:
    """Per step, its time line with the idle gaps longer than `max_gap_s` cut to it
    (`StepClock`), and what was cut. In integer nanoseconds throughout: two issue times
    10^18 ns apart lose nothing to a float."""
    cap = int(max_gap_s * 1e9)
    clocks: list[StepClock | None] = []
    capped = backwards = 0
    longest = 0
    for step in steps:
        per_rank = by_step.get(step, {})
        times: set[int] = set()
        for calls in per_rank.values():
            previous = 0
            for c in calls:
                if not c.issued_ns:
                    continue
                times.add(c.issued_ns)
                backwards += c.issued_ns < previous
                previous = max(previous, c.issued_ns)
        if not times:
            clocks.append(None)
            continue
        ordered = sorted(times)
        ends: list[int] = []
        cuts: list[int] = []
        cut = 0
        for before, after in itertools.pairwise(ordered):
            gap = after - before
            longest = max(longest, gap)
            if gap > cap:
                capped += 1
                cut += gap - cap
                ends.append(after)
                cuts.append(cut)
        clocks.append(StepClock(ordered[0], tuple(ends), tuple(cuts)))
    gaps = Gaps(max_gap_s=max_gap_s, capped=capped, longest_s=longest / 1e9, backwards=backwards)
    return clocks, gaps
