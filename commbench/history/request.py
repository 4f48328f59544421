"""What `commbench history add|list|show|changes|plot` (and their verbs) are asked, declared
once, and the work of each over the store. Light at import: `--help` reads these records."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import Labelled, OutDir, PathLike, Request, RunDirs
from commbench.flags import FORMAT, OP, SIZES
from commbench.options import arg, field_of, option, use

if TYPE_CHECKING:
    from commbench.history.store import Added, FoundChange, Selection, Series, StoredRun, Value
    from commbench.results.runs import Run

DEFAULT_DB = "results/history.db"
DEFAULT_PLOTS = "results/history-plots"
MAX_FIGURES = 100
"""Series `history plot` draws at most in one go: narrow a larger history with --op,
--sizes or --series."""


@dataclass(kw_only=True)
class HistoryDb:
    """`--db`, declared once for every history command."""

    db: PathLike = option(
        default=DEFAULT_DB,
        type=str,
        metavar="PATH|URL",
        help="The history: a SQLite file, or a team's PostgreSQL database as a "
        "postgresql://USER@HOST/DB URL (needs `pip install 'commbench[postgres]'`).",
    )


@dataclass(kw_only=True)
class HistorySelection:
    """Which series a read takes, declared once for `changes` and `plot`."""

    op: str | None = field_of(OP, help="Only these ops (a comma list).")
    sizes: str | None = field_of(
        SIZES,
        metavar="SIZES",
        help="Only these message sizes, as --sizes takes them (64K,1M or 1K-1M).",
    )
    series: str | None = option(
        metavar="ID",
        help="Only the series whose id starts with ID (`history show RUN` lists them).",
    )

    def selection(self) -> Selection:
        from commbench.errors import UserError
        from commbench.history.store import Selection
        from commbench.lists import split_list
        from commbench.sizes import parse_sizes

        ops = tuple(split_list(self.op, "--op")) if self.op is not None else ()
        sizes = tuple(parse_sizes(self.sizes)) if self.sizes is not None else ()
        if self.series is not None and not all(c in "0123456789abcdefABCDEF" for c in self.series):
            raise UserError(f"--series {self.series!r}: a series id is hexadecimal digits")
        return Selection(ops=ops, sizes=sizes, series=self.series)


@dataclass(kw_only=True)
class HistoryAdd(RunDirs, Labelled, HistoryDb, Request):
    """Every option of `commbench history add` and `history_add`, declared once."""

    runs = use(
        help="Run directories of any kind (collectives, p2p, replay, an nccl-tests "
        "import...), or suite directories (each adds its runs).",
    )
    label = use(
        help="What the runs measured, usually the commit. Default: the CI's commit "
        "variable (GITHUB_SHA, CI_COMMIT_SHA, BUILDKITE_COMMIT, GIT_COMMIT, ...), else "
        "the git commit the run was started in.",
    )


@dataclass(kw_only=True)
class HistoryList(HistoryDb, Request):
    """Every option of `commbench history list` and `history_list`, declared once."""


@dataclass(kw_only=True)
class HistoryShow(HistoryDb, Request):
    """Every option of `commbench history show` and `history_show`, declared once."""

    target: str = field(
        kw_only=False,
        metadata=arg(
            metavar="RUN|SERIES",
            type=str,
            help="A run (its run_id, or its history id from `history list`), or a series "
            "(its id, or its first digits).",
        ),
    )


@dataclass(kw_only=True)
class HistoryChanges(HistorySelection, HistoryDb, Request):
    """Every option of `commbench history changes` and `history_changes`, declared once."""


@dataclass(kw_only=True)
class HistoryPlot(OutDir, HistorySelection, HistoryDb, Request):
    """Every option of `commbench history plot` and `history_plot`, declared once."""

    out = use(default=DEFAULT_PLOTS, help="Directory for the figures.")
    formats: str = field_of(
        FORMAT, default="png", type=str, metavar="png|svg", help="png, svg, or both: png,svg."
    )


@dataclass(frozen=True, slots=True)
class Shown:
    """What `history show` found: a run and its points, or a series, its values and its
    change points."""

    run: StoredRun | None = None
    points: list[tuple[Series, Value]] = field(default_factory=list)
    series: Series | None = None
    values: list[Value] = field(default_factory=list)
    changes: list[FoundChange] = field(default_factory=list)


# -- the work of each verb ---------------------------------------------------------------------


def add_runs(request: HistoryAdd) -> Added:
    """Every run named (a suite's too) loaded and checked before the history is opened: one
    that did not finish, or failed, is refused, and then nothing is added."""
    from commbench.history.identity import environment, label_of
    from commbench.history.store import History

    names = request.runs
    paths = [Path(names)] if isinstance(names, str | os.PathLike) else [Path(p) for p in names]
    environ = environment()
    runs = []
    for path in paths:
        for run in runs_at(path):
            label, source = label_of(request.label, environ, run.context)
            runs.append((run, label, source))
    with History.open(request.db, write=True) as history:
        return history.add(runs)


def runs_at(path: Path) -> list[Run]:
    """The runs at `path` (a run, or a suite's runs), each complete, passed and with a
    measured point: what the history takes. UserError, one line naming it, for any other."""
    from commbench.errors import UserError
    from commbench.files import shown
    from commbench.history.identity import points_of
    from commbench.results.runs import is_suite, load_run, load_suite

    if is_suite(path):
        suite = load_suite(path)
        if suite.record.unfinished:
            raise UserError(
                f"{shown(path)}: not added: the suite {suite.record.unfinished}; only complete "
                "runs go into the history (nothing was added)"
            )
        runs = [load_run(path / e.path) for e in suite.entries if e.path]
    else:
        runs = [load_run(path)]
    for run in runs:
        if run.unfinished or not run.verdict.passed:
            why = run.unfinished or run.verdict.message or str(run.status)
            raise UserError(
                f"{shown(run.path)}: not added: the run {why.removeprefix('the run ')}; only "
                "complete runs go into the history (nothing was added)"
            )
        run.held_here()
        if not points_of(run):
            raise UserError(
                f"{shown(run.path)}: not added: it has no measured point (nothing was added)"
            )
    return runs


def list_runs(request: HistoryList) -> list[StoredRun]:
    from commbench.history.store import History

    with History.open(request.db) as history:
        return history.runs()


def show(request: HistoryShow) -> Shown:
    """The run or the series `request.target` names; UserError for none, or more than one."""
    from commbench.errors import UserError, quoted
    from commbench.history.store import History, Selection

    target = request.target.strip()
    with History.open(request.db) as history:
        runs = history.find_runs(target)
        series = (
            history.series(Selection(series=target.lower()))
            if len(target) >= 4 and all(c in "0123456789abcdefABCDEF" for c in target)
            else []
        )
        found = len(runs) + len(series)
        if found == 0:
            raise UserError(
                f"{quoted(target)}: no run or series of that name in {history.db.where.shown} "
                "(`commbench history list` lists the runs)"
            )
        if found > 1:
            names = [f"run {r.id} ({r.run_id}, {r.machine})" for r in runs[:4]]
            names += [f"series {s.id} ({s.label})" for s in series[:4]]
            raise UserError(
                f"{quoted(target)} names {found} runs or series: {'; '.join(names)}; give more "
                "digits of the id"
            )
        if runs:
            return Shown(run=runs[0], points=history.run_points(runs[0]))
        one = series[0]
        return Shown(
            series=one, values=history.values(one), changes=history.changes(series_pk=one.pk)
        )


def find_changes(request: HistoryChanges) -> list[FoundChange]:
    from commbench.history.store import History

    selection = request.selection()
    with History.open(request.db) as history:
        return history.changes(selection)


def plot_history(request: HistoryPlot) -> list[Path]:
    """Each selected series' figure; UserError when none is selected, or too many."""
    from commbench.errors import UserError
    from commbench.history import plot
    from commbench.history.store import History
    from commbench.lists import split_list
    from commbench.results.store import check_output

    formats = split_list(request.formats, "--format")
    bad = [f for f in formats if f not in plot.FORMATS]
    if bad:
        raise UserError(f"--format: unknown {bad[0]!r}; choose from: {', '.join(plot.FORMATS)}")
    selection = request.selection()
    out = Path(request.out)
    with History.open(request.db) as history:
        chosen = history.series(selection)
        if not chosen:
            raise UserError(f"no series in {history.db.where.shown} matches the selection")
        if len(chosen) > MAX_FIGURES:
            raise UserError(
                f"{len(chosen)} series match, more than {MAX_FIGURES} figures: choose with "
                "--op, --sizes or --series"
            )
        drawn = [(s, history.values(s), history.changes(series_pk=s.pk)) for s in chosen]
        where = history.db.where
    files = [out / plot.figure_name(s, fmt) for s, _, _ in drawn for fmt in formats]
    reads = [where.path] if where.dialect == "sqlite" else []
    check_output(files, reads)
    return plot.write(drawn, out, formats)
