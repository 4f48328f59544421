"""`commbench p2p`: copy bandwidth from one GPU to the others, explained by the topology."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commbench.api import P2PRun
from commbench.cli._common import progress_bar, reported_errors, say, verb_command
from commbench.flags import Output
from commbench.formats import Writes
from commbench.options import values
from commbench.results.exporters import Format

if TYPE_CHECKING:  # imported inside the command at run time (torch and NVML behind them)
    from rich.progress import Progress, TaskID

    from commbench.p2p.plan import Step
    from commbench.p2p.run import DryRun
    from commbench.results.runs import Run
    from commbench.topology import TopologySnapshot


def _topology_words(snapshot: TopologySnapshot, path: Path | None) -> str:
    gpus = snapshot.gpus
    names = sorted({g.name for g in gpus})
    what = f"{len(gpus)}x {names[0]}" if len(names) == 1 else f"{len(gpus)} GPUs"
    return f"{what} ({path.name if path else 'this machine'})"


def register(app: typer.Typer) -> None:
    @verb_command(app, "p2p", P2PRun, output=Output(Writes.TABLES, "Output format on stdout"))
    def p2p(request: P2PRun, fmt: Format) -> None:
        """Peer-to-peer copy bandwidth from one GPU to the others, explained by the topology."""
        with reported_errors(), contextlib.ExitStack() as shown:
            import commbench.api
            from commbench.p2p.run import DryRun

            bar: list[tuple[Progress, TaskID]] = []  # made at the first copy (rich: 30 ms)

            def on_step(done: int, total: int, step: Step) -> None:
                if not bar:
                    progress = shown.enter_context(progress_bar())
                    bar.append((progress, progress.add_task("p2p", total=None)))
                progress, task = bar[0]
                label = f"{step.mode} {step.label}"
                progress.update(task, completed=done, total=total, description=label)

            request.on_step = on_step
            result = commbench.api.run_p2p(**values(request))
            shown.close()  # the bar gone before the table
            topology = None if request.topology is None else Path(request.topology)
            if isinstance(result, DryRun):
                _show_dry_run(result, topology, fmt)
            else:
                _report(result, fmt)


def _show_dry_run(dry: DryRun, topology: Path | None, fmt: Format) -> None:
    from commbench.p2p.render import render_expectations

    for note in dry.plan.notes:
        say(note)
    if fmt.human:
        typer.echo(
            f"Dry run on {_topology_words(dry.snapshot, topology)}: what each copy "
            "should reach; nothing was measured.\n"
        )
    typer.echo(render_expectations(dry.expectations, fmt), nl=False)


def _report(run: Run, fmt: Format) -> None:
    """The copies on stdout; the notes, a warning for numbers above the peak and the status
    line on stderr; exit as the run's verdict says."""
    from commbench.p2p.render import render_rows

    typer.echo(render_rows(run.rows, fmt), nl=False)
    for note in run.record.notes:
        say(note)
    odd = [r for r in run.rows if r.p2p and r.p2p.suspicious]
    if odd:
        pairs = ", ".join(r.p2p.label for r in odd[:5] if r.p2p)
        say(
            f"warning: {len(odd)} measurement(s) above the theoretical peak: {pairs}; "
            "such numbers are not to be trusted as they stand (see the diagnosis)"
        )
    for line in run.health_findings():
        say(f"link health: {line.message}")
    say(f"{run.record.status}: {len(run.rows)} rows in {run.path}")
    error = run.verdict.error()
    if error is not None:
        raise error
