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

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.arguments import PathLike, Request
from commbench.diagnose.settings import DiagnoseRun
from commbench.flags import (
    ALLOW_MISMATCH,
    FROM,
    TOLERANCE,
)
from commbench.importers.request import ImportRequest
from commbench.launch.request import CollectivesRun
from commbench.options import arg, cli, field_of, verb
from commbench.p2p.settings import P2PRun
from commbench.record.request import RecordRequest
from commbench.replay.settings import ReplayRun
from commbench.report.export import ExportFormat
from commbench.report.options import Images, ReportFormat
from commbench.report.requests import ExportRequest, PlotRequest, ReportRequest
from commbench.strategies.request import ModelRequest
from commbench.suites.request import SuiteRun

if TYPE_CHECKING:
    from commbench.compare import Gate
    from commbench.diagnose.run import Diagnosis
    from commbench.p2p.run import DryRun
    from commbench.record.run import Recorded
    from commbench.replay.program import Program
    from commbench.report.document import Rendered
    from commbench.results.runs import Run, Suite
    from commbench.strategies.model import Fit, Params, Prediction
    from commbench.suites.runner import SuiteOutcome
    from commbench.topology import TopologySnapshot

MAX_WORLD = 1 << 24
"""More ranks than any machine runs: a `model --world` beyond it is a typo, not a world."""
MAX_WORLDS = 256
"""World sizes one `model` call tabulates: a table each."""


@verb(CollectivesRun)
def run_collectives(request: CollectivesRun) -> Run:
    """Time torch.distributed collectives across message sizes (`commbench collectives`).

    Launches torchrun workers, writes a run directory under `out` and returns it as a `Run`
    whatever happened to it: `run.status` says complete, failed (a worker died or hung, or a
    result was wrong: `run.verdict.message` says which) or interrupted. `on_progress(done,
    total, row)` is called as points are measured. Raises UserError for bad input (nothing
    is launched then) and RunFailed when the run directory itself could not be written.
    """
    from commbench.errors import Interrupted
    from commbench.launch.launcher import run_collectives
    from commbench.results.runs import Run
    from commbench.results.store import check_parent

    out = Path(request.out)
    check_parent(out)
    launch = request.launch()
    settings = request.settings(request.placement())
    on_progress = request.on_progress
    no_plot = request.no_plot
    outcome = run_collectives(settings, out, launch=launch, on_progress=on_progress)
    run = Run(
        path=outcome.run_dir,
        record=outcome.record,
        rows=outcome.rows,
        stopped=outcome.stop_requested,
    )
    verdict = outcome.verdict
    # A run that measured what it should is plotted; a stop request leaves that to `plot`.
    if not no_plot and outcome.rows and not verdict.stopped and verdict.message is None:
        from commbench.report.plots import write_run_plots

        try:
            run.plots = str(write_run_plots(outcome.run_dir))
        except KeyboardInterrupt:  # the record is whole: say so, not just "interrupted"
            raise Interrupted(
                f"interrupted while plotting; every point was measured and is in {outcome.run_dir}"
            ) from None
    return run


@verb(P2PRun)
def run_p2p(request: P2PRun) -> Run | DryRun:
    """Copy bandwidth from one GPU to the others, explained by the topology (`commbench p2p`).

    Returns the run directory as a `Run` (each row's `p2p` holds the copy, what the topology
    expects of it and the verdict); with `dry_run=True`, the plan and what each copy should
    reach, touching no GPU. `topology`: a snapshot file to explain with instead of NVML's.
    Raises UserError for bad input or when no GPU is visible.
    """
    from commbench.p2p.run import dry_run as plan_dry_run
    from commbench.p2p.run import load_topology, run_p2p
    from commbench.results.runs import Run
    from commbench.results.store import check_parent

    settings = request.settings()
    out, dry_run, topology, on_step = (
        request.out,
        request.dry_run,
        request.topology,
        request.on_step,
    )
    out = Path(out)
    if not dry_run:
        check_parent(out)
    snapshot = load_topology(None if topology is None else Path(topology))
    if dry_run:
        return plan_dry_run(settings, snapshot)
    outcome = run_p2p(settings, out, snapshot=snapshot, on_step=on_step)
    return Run(path=outcome.run_dir, record=outcome.record, rows=outcome.rows)


@verb(SuiteRun)
def run_suite(request: SuiteRun) -> SuiteOutcome:
    """Run a suite file (`commbench run`) into a new suite directory under `out`.

    Returns the outcome: `.path`, `.entries` (each run's status), `.failed`, and with a
    `baseline`, `.gate` (the comparison, as `compare` returns it); `.passed` and `.exit_code`
    judge both. `on_event(line)` gets the progress lines the CLI prints (`[2/3]
    strategies-float32: measuring`); `on_progress(done, total, row)` each entry's points as
    `collectives` gives them, from `(0, total, None)` at the start of every entry.
    """
    from commbench.collectives.placement import resolve_placement
    from commbench.results.store import check_parent
    from commbench.suites.runner import prepare_suite
    from commbench.suites.runner import run_suite as run

    out = Path(request.out)
    check_parent(out)
    launch = request.launch()
    config, baseline = request.config, request.baseline
    nproc, device, backend = request.nproc, request.device, request.backend
    tolerance, allow_mismatch = request.tolerance, request.allow_mismatch
    no_plot, on_event, on_progress = request.no_plot, request.on_event, request.on_progress
    suite, machine, gate = prepare_suite(
        Path(config),
        launch,
        resolve_placement,
        nproc=nproc,
        device=device,
        backend=backend,
        tolerance=tolerance,
        allow_mismatch=allow_mismatch,
    )
    return run(
        suite,
        out,
        machine,
        baseline=None if baseline is None else Path(baseline),
        gate=gate,
        plot=not no_plot,
        on_event=on_event,
        on_progress=on_progress,
    )


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
class CompareRequest(Request):
    """Every option of `commbench compare` and `compare_runs`, declared once."""

    baseline: PathLike | Run | Suite = field(
        kw_only=False,
        metadata=arg(
            metavar="BASELINE", type=Path, help="Baseline run directory (or suite directory)."
        ),
    )
    new: PathLike | Run | Suite = field(
        kw_only=False,
        metadata=arg(metavar="NEW", type=Path, help="New run directory (or suite directory)."),
    )
    tolerance: str | float | None = field_of(
        TOLERANCE,
        default=None,
        help="Largest busbw drop accepted at bandwidth-bound sizes. Default 5%, or what "
        "the suite's config says when comparing suites.",
    )
    latency_tolerance: str | float | None = field(
        default=None,
        metadata=cli(
            type=str,
            help="Largest drop accepted at latency-bound sizes (busbw under half the peak). "
            "Default 15%, or the suite's.",
        ),
    )
    alpha: float | None = field(
        default=None,
        metadata=cli(
            type=float,
            help="Significance level of the one-sided Mann-Whitney test. Default 0.01.",
        ),
    )
    noisy_cv: float | None = field(
        default=None,
        metadata=cli(
            type=float,
            help="Robust spread (IQR / 1.349 median) above which a point, or the whole "
            "baseline, is called noisy in the notes (the noise bands, not this, set the "
            "limits). Default 0.2.",
        ),
    )
    allow_mismatch: bool = field_of(
        ALLOW_MISMATCH,
        default=False,
        help="Compare runs whose GPU model, world size, backend or topology differ.",
    )


@verb(CompareRequest)
def compare_runs(request: CompareRequest) -> Gate:
    """The regression gate (`commbench compare`): is `new` significantly slower than
    `baseline`? Runs or suites, as paths or as `load` returns them. Gate values not given
    come from the suites' configs, else the defaults (5%, 15% at latency-bound sizes,
    alpha 0.01). Returns the `Gate`: `.passed`, `.exit_code`, `.verdict`, `.to_frame()`.
    Raises UserError when the two cannot be compared (another GPU model, world size, ...
    unless `allow_mismatch`)."""
    from commbench.compare import Gate, parse_fraction
    from commbench.suites.gate import compare_targets, gate_for

    baseline, new, tolerance = request.baseline, request.new, request.tolerance
    latency_tolerance, allow_mismatch = request.latency_tolerance, request.allow_mismatch
    alpha, noisy_cv = request.alpha, request.noisy_cv
    base_path, new_path = _path(baseline), _path(new)
    settings = gate_for(
        base_path,
        new_path,
        allow_mismatch=allow_mismatch,
        tolerance=None if tolerance is None else parse_fraction(tolerance, "--tolerance"),
        latency_tolerance=None
        if latency_tolerance is None
        else parse_fraction(latency_tolerance, "--latency-tolerance"),
        alpha=alpha,
        noisy_cv=noisy_cv,
    )
    return Gate(compare_targets(base_path, new_path, settings))


@dataclass(kw_only=True)
class TopologyRequest(Request):
    """Every input option of `commbench topo` and `load_topology`, declared once."""

    from_snapshot: PathLike | None = field_of(
        FROM,
        default=None,
        kw_only=False,
        metavar="SNAPSHOT.json",
        help="Analyse a snapshot saved with --format json (or a run.json) instead of this machine.",
    )
    from_smi: PathLike | None = field(
        default=None,
        metadata=cli(
            metavar="TOPO.txt",
            type=Path,
            help="Analyse the text `nvidia-smi topo -m` printed on another machine "
            "(- reads it from stdin).",
        ),
    )
    gpu: str | None = field(
        default=None,
        metadata=cli(
            metavar="MODEL",
            type=str,
            help="With --from-smi: the GPU model as nvidia-smi names it "
            '("Tesla V100-SXM2-16GB"), for its datasheet link rates; without it rates are '
            "assumed conservatively (PCIe Gen3 x16, oldest NVLink generation).",
        ),
    )
    all_nics: bool = field(
        default=False,
        metadata=cli(help="Also list virtual network interfaces (lo, veth, bridges, tun)."),
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
    from_snapshot, from_smi = request.from_snapshot, request.from_smi
    gpu, all_nics = request.gpu, request.all_nics
    from commbench.errors import UserError
    from commbench.files import read_stdin, read_text
    from commbench.results.store import RUN_FILE
    from commbench.topology import discover, load_snapshot, parse_nvidia_smi

    if from_snapshot is not None and from_smi is not None:
        raise UserError("--from and --from-smi both name an input; give one")
    if gpu is not None and from_smi is None:
        raise UserError("--gpu names the model of an imported matrix: give --from-smi too")
    if from_snapshot is not None:
        source = Path(from_snapshot)
        with contextlib.suppress(OSError):  # a name the system refuses: load_snapshot says so
            if source.is_dir() and (source / RUN_FILE).is_file():  # a run directory
                source = source / RUN_FILE
        return load_snapshot(source)
    if from_smi is None:
        return discover(all_nics=all_nics)
    from commbench.topology.rates import gpu_model

    if gpu is not None:  # an unknown model is refused before the file is read
        gpu_model(gpu)
    what = "nvidia-smi topo -m output"
    smi = Path(from_smi)
    text = read_stdin(what) if str(smi) == "-" else read_text(smi, what, lenient=True)
    try:
        return parse_nvidia_smi(text, gpu=gpu)
    except UserError as exc:
        raise UserError(f"{smi}: {exc}") from None


def _path(target: PathLike | Run | Suite) -> Path:
    """Where a run or suite is stored: a path as given, or a loaded one's directory."""
    return Path(target) if isinstance(target, str | os.PathLike) else target.path


@verb(DiagnoseRun)
def run_diagnose(request: DiagnoseRun) -> Diagnosis:
    """Find the slow node, GPU or link (`commbench diagnose`); run on every node.

    Returns the `Diagnosis`: `.verdict` (healthy, degraded, failed), `.nodes` (each with its
    host, verdict and evidence), `.exit_code`, `.path` (the run directory, with
    diagnosis.json). `baseline`: an expectations file (`{"inter-node": GB/s, ...}`) or an
    earlier diagnose run, instead of the peers' median."""
    from commbench.diagnose.run import run_diagnose
    from commbench.diagnose.settings import diagnose_settings
    from commbench.results.store import check_parent

    out = Path(request.out)
    check_parent(out)
    launch = request.launch()
    settings, collectives = diagnose_settings(request.placement(), request)
    on_test = request.on_test
    return run_diagnose(settings, collectives, out, launch, on_test=on_test)


@verb(ReplayRun)
def replay_trace(request: ReplayRun) -> Run | Program:
    """Replay a trace's collectives on this cluster (`commbench replay`).

    Reads the trace (commbench's, or PARAM's, the Flight Recorder's, Chakra's), then launches
    torchrun workers that time each (op, size, dtype, group) of it and replay each rank's
    calls step by step; returns the run directory as a `Run` whose `record.replay` holds the
    recorded and replayed communication time per step (and the bucket advisor's caps, with
    `rebucket`). With `dry_run=True`, the `Program` (its `plan` is what `--dry-run` prints),
    launching nothing. Raises UserError for a trace it cannot read or replay."""
    from commbench.replay.run import run_replay
    from commbench.replay.settings import prepare
    from commbench.results.store import check_parent

    out = Path(request.out)
    launch = request.launch()
    trace, program, settings, collectives = prepare(request, request, launch)
    if request.bw is not None and request.latency is not None:
        from commbench.replay.explain import predict_elsewhere

        elsewhere = predict_elsewhere(
            program.reducer, settings.rebucket, program.world, request.bw, request.latency
        )
        program = dataclasses.replace(program, elsewhere=elsewhere)
    if request.dry_run:
        return program
    check_parent(out)
    return run_replay(
        trace, program, settings, collectives, out, launch, on_progress=request.on_progress
    )


@dataclass(frozen=True, slots=True)
class Modelled:
    """What `model_strategies` predicts: each strategy at each world size and size, the
    alpha-beta parameters used, and the fit they came from (None when given)."""

    predictions: list[Prediction]
    params: Params
    fitted: Fit | None


@verb(ModelRequest)
def model_strategies(request: ModelRequest) -> Modelled:
    """Predict each all-reduce strategy with the alpha-beta model (`commbench model`).

    Either `bw` (GB/s) and `latency` (us per step) are given, or `from_run` names a run whose
    direct all_reduce rows they are fitted to (a given one is held while the other is
    fitted). `world`: world sizes ("8,64,1024" or a list); default 8, or with `from_run` the
    run's and then 8, 64, 1024."""
    world, bw, latency, launch = request.world, request.bw, request.latency, request.launch
    sizes, backend, strategies = request.sizes, request.backend, request.strategies
    from_run = request.from_run
    from commbench.collectives.specs import parse_strategies
    from commbench.errors import UserError
    from commbench.sizes import parse_sizes
    from commbench.strategies.model import SCALE_WORLDS, Params, fit, predict

    names = parse_strategies(strategies)
    size_list = parse_sizes(sizes)
    worlds = parse_worlds(world) if world is not None else [8]
    fitted = None
    if from_run is not None:
        from commbench.results.runs import load_run as load_one

        run = load_one(Path(from_run))
        backend = backend or str(run.record.settings.get("backend") or "nccl")
        fitted = fit(run.rows, backend, launch, alpha_us=latency, bw_gbps=bw)
        if world is None:
            worlds = list(dict.fromkeys([*fitted.world_sizes, *SCALE_WORLDS]))
        alpha, beta = fitted.params.alpha_us, fitted.params.bw_gbps
    else:
        if bw is None or latency is None:
            raise UserError("give --bw and --latency, or --from RUN to fit them")
        alpha, beta = latency, bw
    params = Params(alpha_us=alpha, bw_gbps=beta, launch_us=launch, backend=backend or "nccl")
    return Modelled(predict(params, worlds, size_list, names), params, fitted)


def parse_worlds(value: str | Sequence[int]) -> list[int]:
    """`--world 8,64,1024` (or a list) as distinct world sizes, each at least 2."""
    from commbench.errors import UserError, quoted
    from commbench.lists import split_list
    from commbench.numbers import MAX_DIGITS, check_range, is_digits

    if isinstance(value, str):
        items = split_list(value, "--world", max_items=MAX_WORLDS)
        if not all(is_digits(t) and len(t) <= MAX_DIGITS for t in items):  # ASCII digits only
            raise UserError(f"--world must be a comma list of integers, got {quoted(value)}")
        numbers = [int(t) for t in items]
    else:
        numbers = list(value)
        if not all(isinstance(w, int) and not isinstance(w, bool) for w in numbers):
            raise UserError(f"world sizes must be integers, got {numbers!r}")
        if len(numbers) > MAX_WORLDS:
            raise UserError(f"--world: at most {MAX_WORLDS} world sizes, got {len(numbers)}")
    worlds = [check_range(w, "--world", maximum=MAX_WORLD) for w in numbers]
    if not worlds:
        raise UserError("--world is empty")
    bad = [w for w in worlds if w < 2]
    if bad:
        raise UserError(
            f"--world: a world size must be at least 2 (one rank has nothing to reduce), got {bad[0]}"
        )
    return list(dict.fromkeys(worlds))


@dataclass(frozen=True, slots=True)
class Plotted:
    """What `plot_run` wrote, and what it has to say of the runs it drew (a run that did not
    finish is drawn, with a warning)."""

    written: list[Path]
    warnings: list[str]


@verb(PlotRequest)
def plot_run(request: PlotRequest) -> Plotted:
    """Figures of one run or suite, or of several side by side (`commbench plot`).

    `out`: the directory for the figures; default RUN_DIR/plots (SUITE_DIR/plots) for one,
    ./plots for several. `peak`: a theoretical GB/s to draw; default the slowest link among
    the run's GPUs from its topology. `labels`: one legend name per run, in order."""
    runs, out, formats = request.runs, request.out, request.formats
    peak, labels = request.peak, request.labels or None
    from commbench.lists import split_list
    from commbench.numbers import parse_number
    from commbench.report.plots import check_labels, check_peak, plot_runs
    from commbench.results.runs import is_suite, load_suite
    from commbench.results.runs import load_run as load_one
    from commbench.results.store import PLOTS_DIR

    paths = [Path(runs)] if isinstance(runs, str | os.PathLike) else [Path(r) for r in runs]
    peak_gbps = None
    if peak is not None:
        peak_gbps = check_peak(parse_number(str(peak), "--peak"))
    expanded: list[Path] = []
    for path in paths:  # a suite directory stands for every run it holds
        if is_suite(path):
            expanded += [path / e.path for e in load_suite(path).entries if e.path]
        else:
            expanded.append(path)
    loaded = [load_one(p).held_here() for p in expanded]
    warnings = [f"{run.path} {run.unfinished}" for run in loaded if run.unfinished]
    single = paths[0] if len(paths) == 1 else None  # one run, or one suite
    target = Path(out) if out is not None else None
    if target is None:
        target = single / PLOTS_DIR if single is not None else Path(PLOTS_DIR)
    names = check_labels(list(labels) if labels else None, loaded)
    fmts = split_list(formats, "--formats") if isinstance(formats, str) else list(formats)
    written = plot_runs(loaded, target, fmts, peak_gbps=peak_gbps, labels=names, reads=paths)
    return Plotted(written=list(written), warnings=warnings)


@dataclass(frozen=True, slots=True)
class Report:
    """A rendered report: its text, and where it was written (None: the caller prints it)
    with the image files beside it; `note` is a hint for the person reading it."""

    text: str
    out: Path | None
    note: str | None = None


@verb(ReportRequest)
def report_run(request: ReportRequest) -> Report:
    """One self-contained markdown or HTML document of a run or suite (`commbench report`).

    `images`: embed (data URIs; the HTML default), files (PNGs in <name>_files/ beside
    `out`; the markdown default with `out`) or none (the markdown default without `out`).
    With `baseline`, the regression gate against it is in the document. With `out`, the
    document and its images are written there; else `.text` is the document."""
    run, fmt, out, baseline = request.run, request.fmt, request.out, request.baseline
    allow_mismatch, images = request.allow_mismatch, request.images
    from commbench.errors import UserError
    from commbench.files import write_bytes, write_text
    from commbench.report.document import render_report
    from commbench.results.store import check_output, writing

    run_path = Path(run)
    out_path = None if out is None else Path(out)
    base_path = None if baseline is None else Path(baseline)
    try:
        form = ReportFormat(fmt)
        chosen = None if images is None else Images(images)
    except ValueError:
        raise UserError(f"unknown report format or images: {fmt!r}, {images!r}") from None
    if chosen is None:
        if form is ReportFormat.html:
            chosen = Images.embed
        else:
            chosen = Images.files if out_path is not None else Images.none
    if chosen is Images.files and out_path is None:
        raise UserError("--images files writes PNGs beside the report: give --out FILE")
    reads = [run_path] if base_path is None else [run_path, base_path]
    if out_path is not None:  # refused before the work, its image files after it
        check_output([out_path], reads)
    comparisons = None
    if base_path is not None:
        from commbench.suites.gate import compare_targets, gate_for

        settings = gate_for(base_path, run_path, allow_mismatch=allow_mismatch)
        comparisons = compare_targets(base_path, run_path, settings)
    folder = f"{out_path.stem}_files" if out_path is not None else "report_files"
    rendered: Rendered = render_report(run_path, form, chosen, comparisons, folder=folder)
    if out_path is not None:
        check_output([out_path, *(out_path.parent / rel for rel in rendered.files)], reads)
        with writing(out_path):
            out_path.parent.mkdir(parents=True, exist_ok=True)
            for rel, png in rendered.files.items():
                target = out_path.parent / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                write_bytes(target, png)
            write_text(out_path, rendered.text)
        return Report(text=rendered.text, out=out_path)
    note = None
    if images is None and form is ReportFormat.md:
        note = (
            "plots left out of markdown on stdout: --out FILE writes them beside it, "
            "--images embed puts them inline"
        )
    return Report(text=rendered.text, out=None, note=note)


@verb(ExportRequest)
def export_run(request: ExportRequest) -> str:
    """A run's metrics as text (`commbench export`): per point algbw and busbw (bytes per
    second) and the iteration time's quantiles (seconds), the run's link-health counters, a
    diagnose run's verdicts and, with `baseline`, the regression gate's per point, in the
    OpenMetrics or Prometheus text format. With `out`, also written there atomically, so
    that a node_exporter textfile collector never reads half of it."""
    from commbench.diagnose.verdict import DIAGNOSIS_FILE, load_diagnosis
    from commbench.errors import UserError
    from commbench.files import shown
    from commbench.report.export import EXPORTS, ExportSource, export, one_op_formats
    from commbench.results.record import RunKind
    from commbench.results.runs import is_suite
    from commbench.results.runs import load_run as load_one
    from commbench.results.store import atomic_write, check_output, writing

    run_path, out, baseline = Path(request.run), request.out, request.baseline
    out_path = None if out is None else Path(out)
    base_path = None if baseline is None else Path(baseline)
    try:
        fmt = ExportFormat(request.fmt)
    except ValueError:
        known = ", ".join(f.value for f in ExportFormat)
        raise UserError(f"--format: unknown format {request.fmt!r}; choose from {known}") from None
    for path in (run_path, base_path):
        if path is not None and is_suite(path):
            raise UserError(f"{shown(path)}: a suite directory; export one of its runs")
    if out_path is not None:
        check_output([out_path], [run_path] if base_path is None else [run_path, base_path])
        out_path = _regular_file(out_path)
    if request.op is not None and not request.op.strip():
        raise UserError("--op is empty: name the op to write")
    written = EXPORTS[fmt]
    if base_path is not None and written.no_gate is not None:
        raise UserError(
            f"--baseline adds the regression gate to the metrics; {written.no_gate} has no "
            "place for it"
        )
    # a node that did not run global rank 0 holds no rows: it would publish an empty run
    run = load_one(run_path).held_here()
    diagnosis = None
    if run.kind is RunKind.DIAGNOSE and (run.path / DIAGNOSIS_FILE).exists():
        diagnosis = load_diagnosis(run.path)
    gate = base = None
    if base_path is not None:
        base = load_one(base_path)
        gate = compare_runs(base_path, run_path, allow_mismatch=request.allow_mismatch)
    if request.op is not None and not written.one_op:
        chosen = ", ".join(one_op_formats())
        raise UserError(f"--op chooses the op of --format {chosen}; the others hold every op")
    source = ExportSource(run, diagnosis=diagnosis, gate=gate, baseline=base, op=request.op)
    text = export(source, fmt)
    if out_path is not None:
        with writing(out_path):
            out_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out_path, text)
    return text


def _regular_file(out: Path) -> Path:
    """Where `--out` is replaced atomically: the file a symlink names (the link stays), and
    nothing but a regular file (a rename would put the file in place of a FIFO or device)."""
    import os
    import stat

    from commbench.errors import UserError
    from commbench.files import shown

    real = Path(os.path.realpath(out))
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return real  # nothing there yet, or the write says why it cannot be
    if not stat.S_ISREG(mode):
        raise UserError(f"--out {shown(out)}: not a regular file (it is replaced by a rename)")
    return real


@verb(ImportRequest)
def import_nccl_tests(request: ImportRequest) -> list[Run]:
    """nccl-tests results (the text output of its *_perf binaries, or their -J JSON files)
    as commbench run directories under `out`, one per log (`commbench import nccl-tests`).

    `op`: the collective, when neither the log nor its file name says; `world_size`: the
    ranks, when the log has no device lines. `on_skipped(line)` hears of every row left
    out (a signed size, zero bytes); `on_imported(run)` of each run as it is written (a
    later log that fails raises, and the runs already written stay)."""
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


@verb(RecordRequest)
def record_job(request: RecordRequest) -> Recorded:
    """Run the job `command` unchanged, with every collective and point-to-point call of its
    Python processes captured into a trace directory (docs/traces.md); returns `Recorded`
    (the directory, the job's exit status, the manifest). UserError for bad input."""
    from commbench.record.run import record

    out = request.out
    return record(request.command, Path(out) if out is not None else None)
