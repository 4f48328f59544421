"""The all-reduce strategies by name: what each one is, and parsing `--strategies`.

No torch here: the CLI parses names and the cost model describes strategies without it.
"""

from __future__ import annotations

from commbench.errors import UserError

STRATEGIES: tuple[str, ...] = (
    "direct",
    "reduce_broadcast",
    "reduce_scatter_all_gather",
    "ring",
    "ring_naive",
)
"""Every strategy, in display order."""

DESCRIPTIONS: dict[str, str] = {
    "direct": "dist.all_reduce (the backend's own algorithm)",
    "reduce_broadcast": "dist.reduce to the first rank, then dist.broadcast from it",
    "reduce_scatter_all_gather": "reduce_scatter into a 1/n shard, then all_gather it back",
    "ring": "hand-written bandwidth-optimal ring over isend/irecv: n-1 reduce-scatter and n-1 all-gather steps on 1/n chunks",
    "ring_naive": "textbook ring over isend/irecv: the whole buffer passed on n-1 times and accumulated",
}

SHORT_NAMES: dict[str, str] = {
    "direct": "direct",
    "reduce_broadcast": "red+bcast",
    "reduce_scatter_all_gather": "rs+ag",
    "ring": "ring",
    "ring_naive": "ring_naive",
}
"""Column headers where the full names would not fit."""

# The hand-written ring splits each 1/n chunk into two slices once a chunk reaches this
# size, so one slice is on the wire while the other is being reduced (double buffering,
# as gloo's and NCCL's rings do). Below it, the extra message per step costs more latency
# than the overlap saves.
PIPELINE_MIN_BYTES = 64 * 1024


def ring_slices(chunk_bytes: int) -> int:
    """Slices per chunk and ring step: 2 (pipelined) for large chunks, else 1."""
    return 2 if chunk_bytes >= PIPELINE_MIN_BYTES else 1


def parse_strategies(text: str) -> list[str]:
    """`ring,direct` or `all` -> strategy names (display order for `all`, else as given)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UserError("no strategies given")
    if names == ["all"]:
        return list(STRATEGIES)
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise UserError(
            f"unknown strategy {unknown[0]!r}; choose from: all, {', '.join(STRATEGIES)}"
        )
    return list(dict.fromkeys(names))
