"""`--ranks` given out of order: every op and every strategy on an unsorted subgroup.

`dist.new_group` sorts its ranks, so a worker that took its group rank from the order typed
put its chunk in the wrong place (all_gather, reduce_scatter, the ring) and failed its own
check. Real torchrun, gloo on CPU; one launch per world size, tiny sizes and two iterations.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.collectives.specs import OPS, STRATEGIES
from commbench.launch.launcher import run_collectives
from commbench.results.record import RunStatus
from tests.factories import collectives_settings

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("world", "ranks"), [(3, [2, 0]), (4, [3, 0, 2])])
def test_an_unsorted_subgroup_passes_every_check(
    tmp_path: Path, world: int, ranks: list[int]
) -> None:
    settings = collectives_settings(
        ops=list(OPS),
        strategies=list(STRATEGIES),
        sizes=[1000],  # 250 float32: uneven chunks at a subgroup of 3
        nproc=world,
        backend="gloo",
        device="cpu",
        ranks=ranks,
        iters=2,
        warmup=1,
        timeout=120,
    )
    outcome = run_collectives(settings, tmp_path)
    assert outcome.status == RunStatus.COMPLETE, outcome.failure
    measured = {(r.op, r.strategy) for r in outcome.rows}
    assert measured == {(op, "") for op in OPS} | {("all_reduce", s) for s in STRATEGIES}
    wrong = [(r.op, r.strategy, r.note) for r in outcome.rows if r.check not in ("ok", "n/a")]
    assert not wrong
    assert all(r.world_size == len(ranks) for r in outcome.rows)
