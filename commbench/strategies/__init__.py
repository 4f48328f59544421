"""All-reduce strategies (`commbench collectives --strategies`) and their cost model.

An all-reduce is also a reduce followed by a broadcast, or a reduce-scatter followed by an
all-gather, or a ring of point-to-point steps. `registry` names them, `calls` and `ring`
run them on torch tensors, `model` predicts them with the alpha-beta cost model, and
`report` sets measurement and prediction side by side.

This package imports torch only when a call is built, so the CLI and the model stay light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from commbench.strategies.registry import STRATEGIES, parse_strategies

if TYPE_CHECKING:
    from commbench.collectives.ops import Buffers, Group


def make_strategy_call(
    strategy: str, bufs: Buffers, group: Group, reduce_op: str
) -> Callable[[], None]:
    """See `commbench.strategies.calls.make_strategy_call`."""
    from commbench.strategies.calls import make_strategy_call as make

    return make(strategy, bufs, group, reduce_op)


def check_strategy(
    strategy: str, bufs: Buffers, call: Callable[[], None], group: Group, reduce_op: str
) -> bool:
    """See `commbench.strategies.calls.check_strategy`."""
    from commbench.strategies.calls import check_strategy as check

    return check(strategy, bufs, call, group, reduce_op)


__all__ = ["STRATEGIES", "check_strategy", "make_strategy_call", "parse_strategies"]
