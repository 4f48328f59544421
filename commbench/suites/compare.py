"""What `commbench compare` and `compare_runs` are asked, declared once, and the gate they
return: two runs, or two suites entry by entry (`judge`). Light at import, as `--help` reads
the record; the statistics load when a gate is judged."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import Fraction, InHistory, MismatchAllowed, PathLike, Request, Tolerated
from commbench.options import arg, option, use
from commbench.results.names import (
    DEFAULT_ALPHA,
    DEFAULT_LATENCY_TOLERANCE,
    DEFAULT_NOISY_CV,
    DEFAULT_TOLERANCE,
)

if TYPE_CHECKING:
    from commbench.compare import Gate
    from commbench.results.runs import Run, Suite


@dataclass(kw_only=True)
class CompareRequest(Tolerated, MismatchAllowed, InHistory, Request):
    """Every option of `commbench compare` and `compare_runs`, declared once."""

    baseline: PathLike | Run | Suite = field(
        kw_only=False,
        metadata=arg(
            metavar="BASELINE", type=Path, help="Baseline run directory (or suite directory)."
        ),
    )
    new: PathLike | Run | Suite = field(
        kw_only=False,
        metadata=arg(metavar="NEW", type=Path, help="New run directory (or suite directory)."),
    )
    tolerance = use(
        help="Largest busbw drop accepted at bandwidth-bound sizes. "
        f"Default {DEFAULT_TOLERANCE:.0%}, or what the suite's config says when comparing suites.",
    )
    latency_tolerance: Fraction | None = option(
        default=None,
        type=str,
        help="Largest drop accepted at latency-bound sizes (busbw under half the peak). "
        f"Default {DEFAULT_LATENCY_TOLERANCE:.0%}, or the suite's.",
    )
    alpha: float | None = option(
        default=None,
        help=f"Significance level of the one-sided Mann-Whitney test. Default {DEFAULT_ALPHA}.",
    )
    noisy_cv: float | None = option(
        default=None,
        help="Robust spread (IQR / 1.349 median) above which a point, or the whole "
        "baseline, is called noisy in the notes (it moves no limit: how far the medians "
        f"move between runs does). Default {DEFAULT_NOISY_CV}.",
    )
    allow_mismatch = use(
        help="Compare runs whose GPU model, world size, backend or topology differ.",
    )
    history = use(
        help="A runs history (SQLite file or postgresql:// URL): each point is judged against "
        "how far its median moved in the history's comparable runs (5 or more since its "
        "series last changed), and their median stands for the baseline's.",
    )


def judge(request: CompareRequest) -> Gate:
    """`compare_runs`' work: the gate the suites' configs give, under the values given, over
    every pair of runs the two targets hold."""
    from commbench.compare import Gate
    from commbench.fields import pick
    from commbench.suites.gate import GATE_KEYS, compare_targets, gate_for, loaded

    base, new = loaded(request.baseline), loaded(request.new)  # each read once, if at all
    given = pick(request, *GATE_KEYS)  # the request declares every gate number GateSettings has
    settings = gate_for(base, new, allow_mismatch=request.allow_mismatch, **given)
    reference = None
    if request.history is not None:
        from commbench.suites.history import check, reference_in

        check(request.history, must_exist=True)
        reference = reference_in(request.history)
    return Gate(compare_targets(base, new, settings, reference))
