"""What `commbench record` and `commbench.record_job` are asked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from commbench.arguments import PathLike, Request
from commbench.flags import OUT
from commbench.options import field_of


@dataclass(kw_only=True)
class RecordRequest(Request):
    """Every option of `commbench record` and `record_job`, declared once."""

    command: Sequence[str] = field(default=(), kw_only=False)
    """The job's command as a list (`["torchrun", "--nproc-per-node", "2", "train.py"]`):
    on the command line, everything after `--`."""
    out: PathLike | None = field_of(
        OUT,
        default=None,
        metavar="DIR",
        help="Trace directory to write (new or empty). Default: results/trace-<time>.",
    )
