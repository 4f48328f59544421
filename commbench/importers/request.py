"""What `commbench import nccl-tests` and `commbench.import_nccl_tests` are asked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import PathLike, Request
from commbench.flags import OP, OUT
from commbench.options import arg, cli, field_of

if TYPE_CHECKING:
    from commbench.results.runs import Run


@dataclass(kw_only=True)
class ImportRequest(Request):
    """Every option of `commbench import nccl-tests` and `import_nccl_tests`, declared once."""

    logs: PathLike | Sequence[PathLike] = field(
        kw_only=False,
        metadata=arg(
            metavar="LOG",
            type=list[Path],
            help="Output of nccl-tests' *_perf binaries (text), or their -J JSON files.",
        ),
    )
    out: PathLike = field_of(
        OUT, default="results", help="Parent directory of the run directories."
    )
    op: str | None = field_of(
        OP, default=None, help="The collective, when neither the log nor its file name says."
    )
    world_size: int | None = field(
        default=None,
        metadata=cli(type=int, minimum=1, help="Ranks, when the log has no device lines."),
    )
    on_skipped: Callable[[str], None] | None = None
    """Hears of every row left out: a signed size, zero bytes (API only)."""
    on_imported: Callable[[Run], None] | None = None
    """Hears of each run as it is written (API only)."""
