"""What `commbench diagnose` is asked to do, beside the launch it shares with `collectives`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from commbench.errors import UserError

STAGES = ("intra", "inter")
GPU_DEFAULT_SIZE = "64M"
CPU_DEFAULT_SIZE = "1M"
"""Bandwidth-bound on each: a GPU link needs tens of MiB to reach its peak, gloo ~1 MiB."""
DEFAULT_TOLERANCE = 0.25
DEFAULT_ALPHA = 0.01
DEFAULT_ITERS = 10
DEFAULT_WARMUP = 3
MAX_ROUNDS = 20


@dataclass(kw_only=True, slots=True)
class DiagnoseSettings:
    size_bytes: int
    """Bytes per rank of each test's all_reduce."""
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    tolerance: float = DEFAULT_TOLERANCE
    """A test is short when more than this below its expectation (and significantly so)."""
    alpha: float = DEFAULT_ALPHA
    group: int = 2
    """Nodes per screening test (screen mode: more than `plan.SMALL` nodes)."""
    max_rounds: int = MAX_ROUNDS
    expected_gbps: dict[str, float] = field(default_factory=dict)
    """Expectations by stage (an expectations file or a baseline); peers' median otherwise."""

    def __post_init__(self) -> None:
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            raise UserError(
                f"--stages: choose from {', '.join(STAGES)}, got {','.join(self.stages) or 'none'}"
            )
        if not 0 < self.tolerance < 1:
            raise UserError(f"--tolerance must be between 0% and 100%, got {self.tolerance}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiagnoseSettings:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})
