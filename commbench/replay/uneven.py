"""An all_to_all with a trace's uneven splits (an all_to_allv), as the replay's rows time it:
a registry entry (`Collective`) built for one recorded matrix, so that the worker's harness
(`Worker._measure`: warm-up, iterations, the check) times it as it times any op.

Why not the registry's all_to_all: it splits its buffer evenly, and a replay that did so
timed a mixture-of-experts job's exchanges at the wrong sizes per peer (or, in the sequence,
with sizes its ranks disagreed on: gloo aborted). Each group rank here sends row r of the
matrix and receives column r (`traces.splits.Exchange.sends`, elements).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from commbench.collectives.ops import Buffers, Collective, Expect, Group
from commbench.collectives.specs import OPS
from commbench.traces.splits import Matrix


class UnevenAllToAll(Collective):
    spec = OPS["all_to_all"]

    def __init__(self, sends: Matrix) -> None:
        self.sends = sends
        """sends[i][j]: the elements group rank i sends group rank j."""

    def sent(self, rank: int) -> list[int]:
        return list(self.sends[rank])

    def received(self, rank: int) -> list[int]:
        return [row[rank] for row in self.sends]

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        """This rank's buffers are its row's and its column's sums (`count`, the busiest
        rank's, is the row's size, not this rank's)."""
        inp = torch.zeros(sum(self.sent(group.rank)), dtype=dtype, device=device)
        out = torch.zeros(sum(self.received(group.rank)), dtype=dtype, device=device)
        return Buffers(inp=inp, out=out)

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        out, inp, pg = bufs.out, bufs.inp, group.handle
        sent, received = self.sent(group.rank), self.received(group.rank)

        def run() -> None:
            work = dist.all_to_all_single(
                out,
                inp,
                output_split_sizes=received,
                input_split_sizes=sent,
                group=pg,
                async_op=async_op,
            )
            if work is not None:
                work.wait()

        return run

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        """Piece s of this rank's output is what rank s sent it: rank s's input from where
        its part for this rank begins (its parts for the lower ranks before it)."""
        r = group.rank
        pieces, at = [], 0
        for source, row in enumerate(self.sends):
            pieces.append(Expect(bufs.out.narrow(0, at, row[r]), sum(row[:r]), source))
            at += row[r]
        return pieces
