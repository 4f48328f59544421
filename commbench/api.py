"""The Python API: what the commands do, as functions that return data.

    import commbench
    run = commbench.collectives(ops=["all_reduce"], sizes="1K-64K", nproc=2, device="cpu")
    run.status, run.path, run.to_frame()
    gate = commbench.compare(commbench.load("results/baseline"), run)
    gate.passed, gate.exit_code, gate.to_frame()

Keyword names are the CLI's flags in snake_case, with the same defaults and the same checks:
bad input raises `commbench.errors.UserError` carrying the line the CLI prints. The commands
are adapters over these functions (they parse, call, and render what comes back), so the two
cannot drift apart. Nothing here prints; nothing heavy is imported before a function runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import PathLike, Request, RunDirs
from commbench.diagnose.settings import DiagnoseRun
from commbench.flags import FROM
from commbench.history.request import (
    HistoryAdd,
    HistoryChanges,
    HistoryList,
    HistoryPlot,
    HistoryShow,
    Shown,
)
from commbench.importers.request import ImportRequest
from commbench.launch.request import CollectivesRun
from commbench.options import field_of, option, use, verb
from commbench.p2p.settings import P2PRun
from commbench.record.request import RecordRequest
from commbench.replay.settings import ReplayRun
from commbench.report.options import ExportFormat, Images, ReportFormat
from commbench.report.requests import ExportRequest, PlotRequest, Plotted, Report, ReportRequest
from commbench.strategies.request import MAX_WORLD, MAX_WORLDS, Modelled, ModelRequest, parse_worlds
from commbench.suites.compare import CompareRequest
from commbench.suites.request import SuiteRun

if TYPE_CHECKING:
    from commbench.compare import Comparison, Gate
    from commbench.diagnose.run import Diagnosis
    from commbench.history.store import Added, FoundChange, StoredRun
    from commbench.p2p.run import DryRun
    from commbench.record.run import Recorded
    from commbench.replay.program import Program
    from commbench.results.lifecycle import Settled
    from commbench.results.runs import Run, Suite
    from commbench.suites.runner import SuiteOutcome
    from commbench.topology import TopologySnapshot

__all__ = [
    "MAX_WORLD",
    "MAX_WORLDS",
    "CollectivesRun",
    "CompareRequest",
    "DiagnoseRun",
    "ExportFormat",
    "ExportRequest",
    "HistoryAdd",
    "HistoryChanges",
    "HistoryList",
    "HistoryPlot",
    "HistoryShow",
    "Images",
    "ImportRequest",
    "LoadRequest",
    "ModelRequest",
    "Modelled",
    "P2PRun",
    "PlotRequest",
    "Plotted",
    "RecordRequest",
    "ReplayRun",
    "Report",
    "ReportFormat",
    "ReportRequest",
    "SettleRequest",
    "Shown",
    "SuiteRun",
    "TopologyRequest",
    "compare_runs",
    "export_run",
    "history_add",
    "history_changes",
    "history_list",
    "history_plot",
    "history_show",
    "import_nccl_tests",
    "load_run",
    "load_topology",
    "model_strategies",
    "parse_worlds",
    "plot_run",
    "record_job",
    "replay_trace",
    "report_run",
    "run_collectives",
    "run_diagnose",
    "run_p2p",
    "run_suite",
    "settle_runs",
]
"""The verbs, and the records they take and return (each declared in its domain's package,
where the verb's work is too: a verb here is its docstring and the call)."""


@verb(CollectivesRun)
def run_collectives(request: CollectivesRun) -> Run:
    """Time torch.distributed collectives across message sizes (`commbench collectives`).

    Launches torchrun workers, writes a run directory under `out` and returns it as a `Run`
    whatever happened to it: `run.status` says complete, failed (a worker died or hung, or a
    result was wrong: `run.verdict.message` says which) or interrupted. `on_progress(done,
    total, row)` is called as points are measured. Raises UserError for bad input (nothing
    is launched then) and RunFailed when the run directory itself could not be written.
    """
    from commbench.launch.launcher import run_request

    return run_request(request, _plots)


@verb(P2PRun)
def run_p2p(request: P2PRun) -> Run | DryRun:
    """Copy bandwidth from one GPU to the others, explained by the topology (`commbench p2p`).

    Returns the run directory as a `Run` (each row's `p2p` holds the copy, what the topology
    expects of it and the verdict); with `dry_run=True`, the plan and what each copy should
    reach, touching no GPU. `topology`: a snapshot file to explain with instead of NVML's.
    Raises UserError for bad input or when no GPU is visible.
    """
    from commbench.p2p.run import run_request

    return run_request(request)


@verb(SuiteRun)
def run_suite(request: SuiteRun) -> SuiteOutcome:
    """Run a suite file (`commbench run`) into a new suite directory under `out`.

    Returns the outcome: `.path`, `.entries` (each run's status), `.failed`, and with a
    `baseline`, `.gate` (the comparison, as `compare` returns it); `.passed` and `.exit_code`
    judge both. `on_event(line)` gets the progress lines the CLI prints (`[2/3]
    strategies-float32: measuring`); `on_progress(done, total, row)` each entry's points as
    `collectives` gives them, from `(0, total, None)` at the start of every entry.
    """
    from commbench.suites.runner import run_request

    return run_request(request)


@dataclass(kw_only=True)
class LoadRequest(Request):
    """The argument of `load_run`."""

    path: PathLike = field(kw_only=False)
    """A run or suite directory."""


@verb(LoadRequest)
def load_run(request: LoadRequest) -> Run | Suite:
    """Any stored run (collectives, p2p, an nccl-tests import) or suite directory, whatever
    version of commbench wrote it (version 1 is migrated); UserError naming what is wrong."""
    from commbench.results.runs import load as load_stored

    return load_stored(Path(request.path))


@dataclass(kw_only=True)
class SettleRequest(RunDirs, Request):
    """Every option of `commbench settle` and `settle_runs`, declared once (beside
    `LoadRequest`: the package of stored runs, `results`, lies below the records' checks)."""

    runs = use()


@verb(SettleRequest)
def settle_runs(request: SettleRequest) -> list[Settled]:
    """Write into each run whose launcher was killed outright what every reader already
    takes it as (`commbench settle`): the points only its journal holds into results.json
    and results.csv, then run.json saying interrupted and why. A run that ended, whose
    launcher may still run (here, or on another host) or whose workers still run is left as
    it is, saying why. Returns one `Settled` per run; UserError for a path that is not a run
    or suite, or a run that cannot be written."""
    import os

    from commbench.results.lifecycle import settle_paths

    runs = request.runs
    paths = [Path(runs)] if isinstance(runs, str | os.PathLike) else [Path(r) for r in runs]
    return settle_paths(paths)


@verb(CompareRequest)
def compare_runs(request: CompareRequest) -> Gate:
    """The regression gate (`commbench compare`): is `new` significantly slower than
    `baseline`? Runs or suites, as paths or as `load` returns them. Gate values not given
    come from the suites' configs, else the defaults (5%, 15% at latency-bound sizes,
    alpha 0.01). Returns the `Gate`: `.passed`, `.exit_code`, `.verdict`, `.to_frame()`.
    Raises UserError when the two cannot be compared (another GPU model, world size, ...
    unless `allow_mismatch`)."""
    from commbench.suites.compare import judge

    return judge(request)


@dataclass(kw_only=True)
class TopologyRequest(Request):
    """Every input option of `commbench topo` and `load_topology`, declared once."""

    from_snapshot: PathLike | None = field_of(
        FROM,
        kw_only=False,
        metavar="SNAPSHOT.json",
        help="Analyse a snapshot saved with --format json (or a run.json) instead of this machine.",
    )
    from_smi: PathLike | None = option(
        metavar="TOPO.txt",
        type=Path,
        help="Analyse the text `nvidia-smi topo -m` printed on another machine "
        "(- reads it from stdin).",
    )
    gpu: str | None = option(
        metavar="MODEL",
        help="With --from-smi: the GPU model as nvidia-smi names it "
        '("Tesla V100-SXM2-16GB"), for its datasheet link rates; without it rates are '
        "assumed conservatively (PCIe Gen3 x16, oldest NVLink generation).",
    )
    all_nics: bool = option(
        default=False, help="Also list virtual network interfaces (lo, veth, bridges, tun)."
    )


@verb(TopologyRequest)
def load_topology(request: TopologyRequest) -> TopologySnapshot:
    """How this machine's GPUs are wired, through NVML (`commbench topo`); or the snapshot
    file `from_snapshot` (`topo --format json` writes one; a run.json holds one, and a run
    directory names its run.json), or the text
    `nvidia-smi topo -m` printed on another machine (`from_smi`; "-" reads stdin), whose GPU
    model `gpu` names (`"Tesla V100-SXM2-16GB"`: the matrix has no model, so its link rates are
    otherwise assumed). Without NVML or a GPU the snapshot says so (`nvml_error`) rather than
    raising. NICs come from sysfs; virtual ones (lo, veth, bridges) only with `all_nics`."""
    from commbench.results.store import run_file_in
    from commbench.topology import load

    snapshot = None if request.from_snapshot is None else run_file_in(Path(request.from_snapshot))
    return load(snapshot, request.from_smi, gpu=request.gpu, all_nics=request.all_nics)


@verb(DiagnoseRun)
def run_diagnose(request: DiagnoseRun) -> Diagnosis:
    """Find the slow node, GPU or link (`commbench diagnose`); run on every node.

    Returns the `Diagnosis`: `.verdict` (healthy, degraded, failed), `.nodes` (each with its
    host, verdict and evidence), `.exit_code`, `.path` (the run directory, with
    diagnosis.json). `baseline`: an expectations file (`{"inter-node": GB/s, ...}`) or an
    earlier diagnose run, instead of the peers' median."""
    from commbench.diagnose.run import run_diagnose
    from commbench.diagnose.settings import diagnose_settings
    from commbench.launch.launcher import resolve_launch
    from commbench.results.store import check_parent

    out = Path(request.out)
    check_parent(out)
    launch = resolve_launch(request)
    settings, collectives = diagnose_settings(request.placement(), request)
    on_test, on_warning = request.on_test, request.on_warning
    return run_diagnose(settings, collectives, out, launch, on_test=on_test, on_warning=on_warning)


@verb(ReplayRun)
def replay_trace(request: ReplayRun) -> Run | Program:
    """Replay a trace's collectives on this cluster (`commbench replay`).

    Reads the trace (commbench's, or PARAM's, the Flight Recorder's, Chakra's), then launches
    torchrun workers that time each (op, size, dtype, group) of it and replay each rank's
    calls step by step; returns the run directory as a `Run` whose `record.replay` holds the
    recorded and replayed communication time per step (and the bucket advisor's caps, with
    `rebucket`). With `dry_run=True`, the `Program` (its `plan` is what `--dry-run` prints),
    launching nothing. Raises UserError for a trace it cannot read or replay."""
    from commbench.replay.run import run_request

    return run_request(request)


@verb(ModelRequest)
def model_strategies(request: ModelRequest) -> Modelled:
    """Predict each all-reduce strategy with the alpha-beta model (`commbench model`).

    Either `bw` (GB/s) and `latency` (us per step) are given, or `from_run` names a run whose
    direct all_reduce rows they are fitted to (a given one is held while the other is
    fitted). `world`: world sizes ("8,64,1024" or a list); default 8, or with `from_run` the
    run's and then 8, 64, 1024."""
    from commbench.strategies.request import predict_strategies

    return predict_strategies(request)


@verb(PlotRequest)
def plot_run(request: PlotRequest) -> Plotted:
    """Figures of one run or suite, or of several side by side (`commbench plot`).

    `out`: the directory for the figures; default RUN_DIR/plots (SUITE_DIR/plots) for one,
    ./plots for several. `peak`: a theoretical GB/s to draw; default the slowest link among
    the run's GPUs from its topology. `labels`: one legend name per run, in order."""
    from commbench.report.plots import plot_request

    return plot_request(request)


@verb(ReportRequest)
def report_run(request: ReportRequest) -> Report:
    """One self-contained markdown or HTML document of a run or suite (`commbench report`).

    `images`: embed (data URIs; the HTML default), files (PNGs in <name>_files/ beside
    `out`; the markdown default with `out`) or none (the markdown default without `out`).
    With `baseline`, the regression gate against it is in the document. With `out`, the
    document and its images are written there; else `.text` is the document."""
    from commbench.report.document import write_report

    return write_report(request, _compared)


@verb(ExportRequest)
def export_run(request: ExportRequest) -> str:
    """A run's metrics as text (`commbench export`): per point algbw and busbw (bytes per
    second) and the iteration time's quantiles (seconds), the run's link-health counters, a
    diagnose run's verdicts and, with `baseline`, the regression gate's per point, in the
    OpenMetrics or Prometheus text format. With `out`, also written there atomically, so
    that a node_exporter textfile collector never reads half of it."""
    from commbench.report.export import export_request

    return export_request(
        request, lambda base, run, allow: compare_runs(base, run, allow_mismatch=allow)
    )


@verb(ImportRequest)
def import_nccl_tests(request: ImportRequest) -> list[Run]:
    """nccl-tests results (the text output of its *_perf binaries, or their -J JSON files)
    as commbench run directories under `out`, one per log (`commbench import nccl-tests`).

    `op`: the collective, when neither the log nor its file name says; `world_size`: the
    ranks, when the log has no device lines. `on_skipped(line)` hears of every row left
    out (a signed size, zero bytes); `on_imported(run)` of each run as it is written (a
    later log that fails raises, and the runs already written stay)."""
    from commbench.importers.request import import_logs

    return import_logs(request)


@verb(RecordRequest)
def record_job(request: RecordRequest) -> Recorded:
    """Run the job `command` unchanged, with every collective and point-to-point call of its
    Python processes captured into a trace directory (docs/traces.md); returns `Recorded`
    (the directory, the job's exit status, the manifest). UserError for bad input."""
    from commbench.record.run import record

    out = request.out
    return record(request.command, Path(out) if out is not None else None)


@verb(HistoryAdd)
def history_add(request: HistoryAdd) -> Added:
    """Add runs to the history (`commbench history add`): run or suite directories of any
    kind, loaded and never written. A run that did not finish, or failed, is refused
    (UserError) and then nothing is added; a run stored already is left as it is. Returns
    `Added`: each run (`.added` False: it was there), and the change points adding them found.
    `db`: a SQLite file (made if need be) or a postgresql:// URL."""
    from commbench.history.request import add_runs

    return add_runs(request)


@verb(HistoryList)
def history_list(request: HistoryList) -> list[StoredRun]:
    """The runs of the history, oldest first (`commbench history list`): each one's id,
    run_id, time, label, kind, machine and points. Reads only: UserError for a history that
    is not there."""
    from commbench.history.request import list_runs

    return list_runs(request)


@verb(HistoryShow)
def history_show(request: HistoryShow) -> Shown:
    """One run of the history and its points, or one series, its values over the runs and
    its change points (`commbench history show`). `target`: a run_id, a run's or a series'
    history id (or its first digits). UserError when it names none, or several."""
    from commbench.history.request import show

    return show(request)


@verb(HistoryChanges)
def history_changes(request: HistoryChanges) -> list[FoundChange]:
    """The change points of the history's series (`commbench history changes`), oldest
    first: each one's series, first run after it, ratio of the medians (busbw: new over old)
    with its 95% interval and p-value, and `.changed`, what differs between the runs on
    either side. `op`, `sizes`, `series` choose the series."""
    from commbench.history.request import find_changes

    return find_changes(request)


@verb(HistoryPlot)
def history_plot(request: HistoryPlot) -> list[Path]:
    """Each chosen series over its runs, its change points marked and what changed written
    beside them (`commbench history plot`), as PNG and/or SVG files under `out`; returns
    the files. `op`, `sizes`, `series` choose the series."""
    from commbench.history.request import plot_history

    return plot_history(request)


def _plots(run_dir: Path) -> str:
    """A finished run's figures (report's, loaded only when a run is plotted)."""
    from commbench.report.plots import write_run_plots

    return str(write_run_plots(run_dir))


def _compared(baseline: Path, run: Path, allow_mismatch: bool) -> list[tuple[str, Comparison]]:
    """The gate of `report --baseline`: the suites' configs' values, entry by entry."""
    from commbench.suites.gate import compare_targets, gate_for, loaded

    base, new = loaded(baseline), loaded(run)
    return compare_targets(base, new, gate_for(base, new, allow_mismatch=allow_mismatch))
