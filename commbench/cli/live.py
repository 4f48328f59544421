"""Rows as they are measured, with the elapsed time and an ETA.

A sweep takes minutes; nobody should wait for its end to see the first number, or wonder
whether a CI job hangs. Every measured point is shown at once, on stderr, so that stdout keeps
only the output `--format` asks for (a JSON or CSV stream stays parseable whatever the
terminal):

- stderr is a terminal: the table grows under a progress line (done/total, elapsed, ETA);
  the live view is transient, and the finished table is printed on stdout in its place;
- stderr is not a terminal (CI logs, `2>&1 | tee`): one line per point, flushed as it is
  measured, as hyperfine and nccl-tests write their logs:

    commbench: [ 3/24 0:05 eta 0:35] all_reduce float32 sum 2 ranks  1M  time 1.23 ms  busbw 0.85 GB/s  ok

The ETA assumes the points left take as long as the ones done: `--min-time` gives every point
about the same timed length, so it is close once a few points are in.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from commbench.results.schema import ResultRow

VIEW_LINES = 20
"""Table lines the terminal view keeps (the newest): a full sweep is longer than a screen."""


def clock(seconds: float) -> str:
    """`0:05`, `12:34`, `1:02:03`: elapsed and remaining times as a person reads them."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta(since_first: float, done: int, total: int) -> float | None:
    """Seconds left if the points left take as long as the points after the first did
    (`since_first`: seconds from the first point to the `done`-th); None before the second
    point. The first is left out: it carries the workers' start-up (several seconds)."""
    if done < 2 or total <= 0:
        return None
    return since_first / (done - 1) * max(0, total - done)


def progress_text(elapsed: float, done: int, total: int, since_first: float = 0.0) -> str:
    """`[ 3/24 0:05 eta 0:35]`: the counter padded to the total's width, so lines align."""
    left = eta(since_first, done, total)
    width = len(str(total))
    remaining = f" eta {clock(left)}" if left is not None and done < total else ""
    return f"[{done:>{width}}/{total} {clock(elapsed)}{remaining}]"


class LiveRows:
    """The `on_progress(done, total, row)` of a measuring command: shows each row as it
    comes (see the module's docstring). Use it as a context manager around the run. A suite
    passes one to all its runs: `(0, total, None)` starts the next one afresh."""

    def __init__(
        self,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.now = now
        self.started = now()
        self.first_at: float | None = None
        """When the first point came: the ETA counts from there."""
        self.rows: list[ResultRow] = []
        self.done = 0
        self.total = 0
        self._live: Any = None

    # -- what is shown ------------------------------------------------------------------

    def line(self, row: ResultRow) -> str:
        """The one line a point gets in a log."""
        from commbench.collectives.specs import OPS
        from commbench.results.exporters import point_line

        spec = OPS.get(row.op)
        two_forms = not row.strategy and spec is not None and spec.in_place == "optional"
        return f"commbench: {self._progress()} {point_line(row, two_forms=two_forms)}"

    def _progress(self) -> str:
        now = self.now()
        since_first = 0.0 if self.first_at is None else now - self.first_at
        return progress_text(now - self.started, self.done, self.total, since_first)

    def status(self) -> str:
        """The terminal view's progress line."""
        elapsed = self.now() - self.started
        if not self.rows:
            return f"starting workers  {clock(elapsed)}"
        bar_width = 20
        filled = bar_width * self.done // self.total
        bar = "#" * filled + "-" * (bar_width - filled)
        return f"{bar} {self._progress()}"

    def __rich__(self) -> Any:
        """The terminal view, redrawn a few times a second (the clock runs between points)."""
        from rich.console import Group
        from rich.text import Text

        from commbench.results.exporters import to_table

        lines = to_table(self.rows).splitlines()[-VIEW_LINES:] if self.rows else []
        # a row wider than the terminal is cut with an ellipsis, never wrapped: a wrapped row
        # starts its rest at column 0 and the columns no longer line up (the whole table is
        # printed when the run ends)
        return Group(
            *(Text(ln, no_wrap=True, overflow="ellipsis") for ln in lines),
            Text(self.status(), style="bold"),
        )

    # -- on_progress ----------------------------------------------------------------------

    def __call__(self, done: int, total: int, row: ResultRow | None) -> None:
        if row is None and done == 0 and self.rows:
            # the next run of a suite: its own table, clock and ETA
            self.rows, self.started, self.first_at = [], self.now(), None
        self.done, self.total = done, total
        if row is None:
            return
        if self.first_at is None:
            self.first_at = self.now()
        self.rows.append(row)
        if self._live is None:
            self.stream.write(self.line(row) + "\n")
            self.stream.flush()

    def __enter__(self) -> LiveRows:
        self.started = self.now()
        if self.terminal:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream, force_terminal=True)
            self._live = Live(self, console=console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc_info)
            self._live = None
