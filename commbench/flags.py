"""The flags that more than one command takes, each declared once: its spellings and the
type it is parsed into (`commbench.options.Flag`).

A record that takes one of them says, in its own field, what the flag means for its command
(`WARMUP.field(help="Warm-up iterations per test.")`): help texts differ (a point, a test,
a row), the flag does not. The timing flags are the fields of `collectives.settings.Timing`
as each producer asks for them; `--allow-mismatch` is the gate's, wherever a baseline is.
"""

from __future__ import annotations

from commbench.options import flag

WARMUP = flag("--warmup", type=int)
"""Untimed iterations before the timed ones (`Timing.warmup`)."""
ITERS = flag("--iters", type=int)
"""Timed iterations (`Timing.iters`); None lets the command choose."""
MIN_TIME = flag("--min-time", type=float)
"""Seconds of timed iterations when `--iters` is not given (`Timing.min_time`)."""
TIMEOUT = flag("--timeout", type=float)
"""Seconds without progress before a run is declared hung (`Timing.timeout`)."""
ALLOW_MISMATCH = flag("--allow-mismatch", type=bool)
"""Compare runs whose comparability context (GPU model, world size, ...) differs."""
