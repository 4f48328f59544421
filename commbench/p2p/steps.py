"""A p2p measurement and its copies, as data: what `plan` lays out, the settings' progress
callback reports and the measurer times. Its own module, beside `plan`, so that the settings
can name a `Step` without importing the planner that reads them.

A measurement (`Step`) is a set of copies timed together: one copy in sequential mode, a
whole fan-out in concurrent mode, both directions of a pair with `--bidirectional`. An
endpoint is a CUDA ordinal, or `HOST` (None) for pinned host memory.
"""

from __future__ import annotations

from dataclasses import dataclass

HOST = None
"""The endpoint that is pinned host memory rather than a GPU."""

BANDWIDTH = "bandwidth"
LATENCY = "latency"
UNI = "uni"
BI = "bi"


def endpoint_label(endpoint: int | None) -> str:
    return "host" if endpoint is None else str(endpoint)


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy: `size_bytes` from `src` to `dst`."""

    src: int | None
    dst: int | None

    def __post_init__(self) -> None:
        if self.src is None and self.dst is None:
            raise ValueError("a copy needs a GPU at one end at least")

    @property
    def kind(self) -> str:
        """`p2p` (GPU to another GPU), `d2d` (within one GPU), `h2d` or `d2h`."""
        if self.src is None:
            return "h2d"
        if self.dst is None:
            return "d2h"
        return "d2d" if self.src == self.dst else "p2p"

    @property
    def label(self) -> str:
        """`0->1`, `host->0`, `0->host`, `0->0`."""
        return f"{endpoint_label(self.src)}->{endpoint_label(self.dst)}"

    @property
    def device(self) -> int:
        """The GPU whose stream runs the copy: the source, or the GPU end of a host copy."""
        if self.src is not None:
            return self.src
        assert self.dst is not None
        return self.dst


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """Copies timed together: each on its own stream, all released by one gate event."""

    test: str
    """`bandwidth` or `latency`."""
    mode: str
    """`concurrent` (the copies run at once) or `sequential` (one copy, or one pair)."""
    direction: str
    """`uni`, or `bi` when each pair is copied both ways at once."""
    size_bytes: int
    copies: tuple[Copy, ...]

    @property
    def devices(self) -> list[int]:
        """Every GPU the step touches, in order."""
        out: list[int] = []
        for c in self.copies:
            for e in (c.src, c.dst):
                if e is not None and e not in out:
                    out.append(e)
        return out

    @property
    def label(self) -> str:
        """`0->1`, or for several copies from one source `0->{1,2,4}`."""
        if len(self.copies) == 1:
            return self.copies[0].label
        if self.direction == BI and len(self.copies) == 2:
            a, b = self.copies
            if (a.src, a.dst) == (b.dst, b.src):
                return f"{endpoint_label(a.src)}<->{endpoint_label(a.dst)}"
        srcs = {c.src for c in self.copies}
        if len(srcs) == 1:
            (src,) = srcs
            dsts = ",".join(endpoint_label(c.dst) for c in self.copies)
            return f"{endpoint_label(src)}->{{{dsts}}}"
        return "{" + ",".join(c.label for c in self.copies) + "}"
