"""`commbench import nccl-tests`: nccl-tests logs as commbench run directories."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from commbench.api import ImportRequest
from commbench.cli._common import reported_errors, say
from commbench.options import command, values

if TYPE_CHECKING:
    from commbench.results.runs import Run

import_app = typer.Typer(
    name="import",
    help="Import results from other tools as run directories (then plot, report, compare).",
    no_args_is_help=True,
)


@import_app.command("nccl-tests")
@command(ImportRequest)
def nccl_tests(request: ImportRequest) -> None:
    """Read nccl-tests results (out-of-place and in-place) into commbench run directories.

    Each run directory is printed on stdout (a script captures it); what it holds (the
    devices, the peak and average bus bandwidth per series, the slowest process of a -I JSON
    file, the log's own "Avg bus bandwidth") on stderr."""
    with reported_errors():
        import commbench.api

        def imported(run: Run) -> None:
            typer.echo(str(run.path))
            typer.echo(_summary(run), err=True, nl=False)

        request.on_skipped = lambda said: say(f"warning: {said}")
        request.on_imported = imported
        commbench.api.import_nccl_tests(**values(request))


MAX_FINDINGS = 5
"""Lines of slowest-process and waited-for findings the import prints (`report` lists all)."""


def _summary(run: Run) -> str:
    """The imported run's devices and bandwidth summary, the slowest process and the rank the
    others waited for (a `-I` JSON file's per-process times), then the average nccl-tests
    printed, which every size goes into (latency-bound ones too), so it reads lower than ours."""
    from commbench.results import slow_processes, stragglers
    from commbench.results.summary import render, summarise
    from commbench.tables import fixed

    out = render(summarise(run.rows, run.context.ranks))
    slowest = slow_processes.summarise(run.rows, run.context.ranks)
    for title, lines in (
        ("Slowest process", slow_processes.summary_lines(slowest, limit=MAX_FINDINGS)),
        ("Waited-for ranks", stragglers.summary_lines(run.straggler_summary(), MAX_FINDINGS)),
    ):
        if lines:
            out += f"\n# {title}\n" + "".join(f"{line}\n" for line in lines)
    for section in run.record.sections:
        avg = section.get("avg_busbw_gbps")
        if isinstance(avg, int | float):
            out += (
                f"nccl-tests' own Avg bus bandwidth ({section.get('op')}, every size, "
                f"out-of-place and in-place): {fixed(float(avg))} GB/s\n"
            )
    return out + "\n"


def register(app: typer.Typer) -> None:
    app.add_typer(import_app, name="import")
