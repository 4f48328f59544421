"""What `commbench import nccl-tests` and `commbench.import_nccl_tests` are asked."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import OneOp, OutDir, PathLike, Request
from commbench.options import option, paths, use

if TYPE_CHECKING:
    from commbench.results.runs import Run


@dataclass(kw_only=True)
class ImportRequest(OutDir, OneOp, Request):
    """Every option of `commbench import nccl-tests` and `import_nccl_tests`, declared once."""

    logs: PathLike | Sequence[PathLike] = field(
        kw_only=False,
        metadata=paths(
            "LOG", help="Output of nccl-tests' *_perf binaries (text), or their -J JSON files."
        ),
    )
    out = use(help="Parent directory of the run directories.")
    op = use(help="The collective, when neither the log nor its file name says.")
    world_size: int | None = option(minimum=1, help="Ranks, when the log has no device lines.")
    on_skipped: Callable[[str], None] | None = None
    """Hears of every row left out: a signed size, zero bytes (API only)."""
    on_imported: Callable[[Run], None] | None = None
    """Hears of each run as it is written (API only)."""


def import_logs(request: ImportRequest) -> list[Run]:
    """`import_nccl_tests`' work: the op checked before any log is read, then each log
    written as a run directory and read back."""
    logs, out, op, world_size = request.logs, request.out, request.op, request.world_size
    on_skipped, on_imported = request.on_skipped, request.on_imported
    from commbench.errors import UserError
    from commbench.importers.nccl_tests import OP_NAMES, import_log
    from commbench.results.runs import load_run as load_one
    from commbench.results.store import check_parent

    names = sorted(set(OP_NAMES.values()))
    if op is not None and op not in names:
        raise UserError(f"--op: unknown op {op!r}; choose from: {', '.join(names)}")
    out = Path(out)
    check_parent(out)
    paths = [Path(logs)] if isinstance(logs, str | os.PathLike) else [Path(p) for p in logs]
    runs = []
    for log in paths:
        run_dir = import_log(log, out, op=op, world_size=world_size, on_skipped=on_skipped)
        runs.append(load_one(run_dir))
        if on_imported is not None:
            on_imported(runs[-1])
    return runs
