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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.collectives.settings import DEFAULT_TIMEOUT, GPU_DEFAULT_SIZES

if TYPE_CHECKING:
    from commbench.compare import Gate
    from commbench.diagnose.run import Diagnosis
    from commbench.p2p.plan import Step
    from commbench.p2p.run import DryRun
    from commbench.report.document import Rendered
    from commbench.results.runs import Run, Suite
    from commbench.results.schema import ResultRow
    from commbench.strategies.model import Fit, Params, Prediction
    from commbench.suites.runner import SuiteOutcome
    from commbench.topology import TopologySnapshot

__all__ = [
    "compare_runs",
    "import_nccl_tests",
    "load_run",
    "load_topology",
    "model_strategies",
    "plot_run",
    "report_run",
    "run_collectives",
    "run_diagnose",
    "run_p2p",
    "run_suite",
]

PathLike = str | Path

MAX_WORLD = 1 << 24
"""More ranks than any machine runs: a `model --world` beyond it is a typo, not a world."""
MAX_WORLDS = 256
"""World sizes one `model` call tabulates: a table each."""


def run_collectives(
    *,
    ops: str | Sequence[str] | None = None,
    sizes: str | Sequence[int | str] | None = None,
    strategies: str | Sequence[str] | None = None,
    nproc: int | None = None,
    backend: str | None = None,
    device: str | None = None,
    dtype: str | Sequence[str] = "float32",
    reduce_op: str = "sum",
    warmup: int | None = None,
    iters: int | None = None,
    min_time: float | None = None,
    in_place: bool | str = False,
    check: bool = True,
    async_op: bool = False,
    graph: bool = False,
    ranks: str | Sequence[int] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    out: PathLike = "results",
    nnodes: int | None = None,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    debug: bool = False,
    profile: bool = False,
    no_plot: bool = False,
    on_progress: Callable[[int, int, ResultRow | None], None] | None = None,
) -> Run:
    """Time torch.distributed collectives across message sizes (`commbench collectives`).

    Launches torchrun workers, writes a run directory under `out` and returns it as a `Run`
    whatever happened to it: `run.status` says complete, failed (a worker died or hung, or a
    result was wrong: `run.verdict.message` says which) or interrupted. `on_progress(done,
    total, row)` is called as points are measured. Raises UserError for bad input (nothing
    is launched then) and RunFailed when the run directory itself could not be written.
    """
    from commbench.collectives.placement import resolve_placement
    from commbench.collectives.settings import CollectivesSettings
    from commbench.errors import Interrupted
    from commbench.launch.launcher import resolve_launch, run_collectives
    from commbench.results.runs import Run
    from commbench.results.store import check_parent

    out = Path(out)
    check_parent(out)
    launch = resolve_launch(
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        debug=debug,
    )
    settings = CollectivesSettings.from_options(
        resolve_placement(device, nproc, backend),
        ops=ops,
        strategies=strategies,
        sizes=sizes,
        dtype=dtype,
        reduce_op=reduce_op,
        warmup=warmup,
        iters=iters,
        min_time=min_time,
        in_place=in_place,
        check=check,
        async_op=async_op,
        graph=graph,
        ranks=ranks,
        timeout=timeout,
        profile=profile,
    )
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


def run_p2p(
    *,
    src: int | str | None = None,
    dst: str | Sequence[int] | None = None,
    size: str | int | Sequence[int] | None = None,
    mode: str = "both",
    bidirectional: bool = False,
    matrix: bool = False,
    host: bool = False,
    latency: bool = False,
    warmup: int = 5,
    iters: int | None = None,
    topology: PathLike | None = None,
    dry_run: bool = False,
    out: PathLike = "results",
    on_step: Callable[[int, int, Step], None] | None = None,
) -> Run | DryRun:
    """Copy bandwidth from one GPU to the others, explained by the topology (`commbench p2p`).

    Returns the run directory as a `Run` (each row's `p2p` holds the copy, what the topology
    expects of it and the verdict); with `dry_run=True`, the plan and what each copy should
    reach, touching no GPU. `topology`: a snapshot file to explain with instead of NVML's.
    Raises UserError for bad input or when no GPU is visible.
    """
    from commbench.p2p.run import dry_run as plan_dry_run
    from commbench.p2p.run import load_topology, run_p2p
    from commbench.p2p.settings import P2PSettings
    from commbench.results.runs import Run
    from commbench.results.store import check_parent

    settings = P2PSettings.from_flags(
        src=src,
        dst=dst,
        size=size,
        mode=mode,
        bidirectional=bidirectional,
        matrix=matrix,
        host=host,
        latency=latency,
        warmup=warmup,
        iters=iters,
    )
    out = Path(out)
    if not dry_run:
        check_parent(out)
    snapshot = load_topology(None if topology is None else Path(topology))
    if dry_run:
        return plan_dry_run(settings, snapshot)
    outcome = run_p2p(settings, out, snapshot=snapshot, on_step=on_step)
    return Run(path=outcome.run_dir, record=outcome.record, rows=outcome.rows)


def run_suite(
    config: PathLike,
    *,
    baseline: PathLike | None = None,
    out: PathLike = "results/suites",
    nproc: int | None = None,
    device: str | None = None,
    backend: str | None = None,
    tolerance: str | float | None = None,
    allow_mismatch: bool = False,
    no_plot: bool = False,
    nnodes: int | None = None,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    debug: bool = False,
    on_event: Callable[[str], None] | None = None,
    on_progress: Callable[[int, int, ResultRow | None], None] | None = None,
) -> SuiteOutcome:
    """Run a suite file (`commbench run`) into a new suite directory under `out`.

    Returns the outcome: `.path`, `.entries` (each run's status), `.failed`, and with a
    `baseline`, `.gate` (the comparison, as `compare` returns it); `.passed` and `.exit_code`
    judge both. `on_event(line)` gets the progress lines the CLI prints (`[2/3]
    strategies-float32: measuring`); `on_progress(done, total, row)` each entry's points as
    `collectives` gives them, from `(0, total, None)` at the start of every entry.
    """
    from commbench.collectives.placement import resolve_placement
    from commbench.launch.launcher import resolve_launch
    from commbench.results.store import check_parent
    from commbench.suites.runner import prepare_suite
    from commbench.suites.runner import run_suite as run

    out = Path(out)
    check_parent(out)
    launch = resolve_launch(
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        debug=debug,
    )
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


def load_run(path: PathLike) -> Run | Suite:
    """Any stored run (collectives, p2p, an nccl-tests import) or suite directory, whatever
    version of commbench wrote it (version 1 is migrated); UserError naming what is wrong."""
    from commbench.results.runs import load as load_stored

    return load_stored(Path(path))


def compare_runs(
    baseline: PathLike | Run | Suite,
    new: PathLike | Run | Suite,
    *,
    tolerance: str | float | None = None,
    latency_tolerance: str | float | None = None,
    alpha: float | None = None,
    noisy_cv: float | None = None,
    allow_mismatch: bool = False,
) -> Gate:
    """The regression gate (`commbench compare`): is `new` significantly slower than
    `baseline`? Runs or suites, as paths or as `load` returns them. Gate values not given
    come from the suites' configs, else the defaults (5%, 15% at latency-bound sizes,
    alpha 0.01). Returns the `Gate`: `.passed`, `.exit_code`, `.verdict`, `.to_frame()`.
    Raises UserError when the two cannot be compared (another GPU model, world size, ...
    unless `allow_mismatch`)."""
    from commbench.compare import Gate, parse_fraction
    from commbench.suites.gate import compare_targets, gate_for

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


def load_topology(
    from_snapshot: PathLike | None = None,
    *,
    from_smi: PathLike | None = None,
    gpu: str | None = None,
    all_nics: bool = False,
) -> TopologySnapshot:
    """How this machine's GPUs are wired, through NVML (`commbench topo`); or the snapshot
    file `from_snapshot` (`topo --format json` writes one; a run.json holds one, and a run
    directory names its run.json), or the text
    `nvidia-smi topo -m` printed on another machine (`from_smi`; "-" reads stdin), whose GPU
    model `gpu` names (`"Tesla V100-SXM2-16GB"`: the matrix has no model, so its link rates are
    otherwise assumed). Without NVML or a GPU the snapshot says so (`nvml_error`) rather than
    raising. NICs come from sysfs; virtual ones (lo, veth, bridges) only with `all_nics`."""
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
    return Path(target) if isinstance(target, str | Path) else target.path


def run_diagnose(
    *,
    nproc: int | None = None,
    device: str | None = None,
    backend: str | None = None,
    sizes: str | int | None = None,
    tolerance: str | float | None = None,
    stages: str | Sequence[str] | None = None,
    baseline: PathLike | None = None,
    iters: int | None = None,
    warmup: int | None = None,
    timeout: float | None = None,
    out: PathLike = "results",
    nnodes: int | None = None,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    debug: bool = False,
    on_test: Callable[[dict[str, object]], None] | None = None,
) -> Diagnosis:
    """Find the slow node, GPU or link (`commbench diagnose`); run on every node.

    Returns the `Diagnosis`: `.verdict` (healthy, degraded, failed), `.nodes` (each with its
    host, verdict and evidence), `.exit_code`, `.path` (the run directory, with
    diagnosis.json). `baseline`: an expectations file (`{"inter-node": GB/s, ...}`) or an
    earlier diagnose run, instead of the peers' median."""
    from commbench.collectives.placement import resolve_placement
    from commbench.diagnose.run import run_diagnose
    from commbench.diagnose.settings import diagnose_settings
    from commbench.launch.launcher import resolve_launch
    from commbench.results.store import check_parent

    out = Path(out)
    check_parent(out)
    launch = resolve_launch(
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        debug=debug,
    )
    settings, collectives = diagnose_settings(
        resolve_placement(device, nproc, backend),
        sizes=sizes,
        tolerance=tolerance,
        stages=stages,
        baseline=baseline,
        iters=iters,
        warmup=warmup,
        timeout=timeout,
    )
    return run_diagnose(settings, collectives, out, launch, on_test=on_test)


@dataclass(frozen=True, slots=True)
class Modelled:
    """What `model_strategies` predicts: each strategy at each world size and size, the
    alpha-beta parameters used, and the fit they came from (None when given)."""

    predictions: list[Prediction]
    params: Params
    fitted: Fit | None


def model_strategies(
    *,
    world: str | Sequence[int] | None = None,
    bw: float | None = None,
    latency: float | None = None,
    launch: float = 0.0,
    sizes: str = GPU_DEFAULT_SIZES,
    backend: str | None = None,
    strategies: str = "all",
    from_run: PathLike | None = None,
) -> Modelled:
    """Predict each all-reduce strategy with the alpha-beta model (`commbench model`).

    Either `bw` (GB/s) and `latency` (us per step) are given, or `from_run` names a run whose
    direct all_reduce rows they are fitted to (a given one is held while the other is
    fitted). `world`: world sizes ("8,64,1024" or a list); default 8, or with `from_run` the
    run's and then 8, 64, 1024."""
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


def plot_run(
    runs: PathLike | Sequence[PathLike],
    *,
    out: PathLike | None = None,
    formats: str | Sequence[str] = "png,svg",
    peak: str | float | None = None,
    labels: Sequence[str] | None = None,
) -> Plotted:
    """Figures of one run or suite, or of several side by side (`commbench plot`).

    `out`: the directory for the figures; default RUN_DIR/plots (SUITE_DIR/plots) for one,
    ./plots for several. `peak`: a theoretical GB/s to draw; default the slowest link among
    the run's GPUs from its topology. `labels`: one legend name per run, in order."""
    from commbench.lists import split_list
    from commbench.numbers import parse_number
    from commbench.report.plots import check_labels, check_peak, plot_runs
    from commbench.results.runs import is_suite, load_suite
    from commbench.results.runs import load_run as load_one
    from commbench.results.store import PLOTS_DIR

    paths = [Path(runs)] if isinstance(runs, str | Path) else [Path(r) for r in runs]
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


def report_run(
    run: PathLike,
    *,
    fmt: str = "md",
    out: PathLike | None = None,
    baseline: PathLike | None = None,
    allow_mismatch: bool = False,
    images: str | None = None,
) -> Report:
    """One self-contained markdown or HTML document of a run or suite (`commbench report`).

    `images`: embed (data URIs; the HTML default), files (PNGs in <name>_files/ beside
    `out`; the markdown default with `out`) or none (the markdown default without `out`).
    With `baseline`, the regression gate against it is in the document. With `out`, the
    document and its images are written there; else `.text` is the document."""
    from commbench.errors import UserError
    from commbench.files import write_bytes, write_text
    from commbench.report.document import render_report
    from commbench.report.options import Images, ReportFormat
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


def import_nccl_tests(
    logs: PathLike | Sequence[PathLike],
    *,
    out: PathLike = "results",
    op: str | None = None,
    world_size: int | None = None,
    on_skipped: Callable[[str], None] | None = None,
    on_imported: Callable[[Run], None] | None = None,
) -> list[Run]:
    """nccl-tests results (the text output of its *_perf binaries, or their -J JSON files)
    as commbench run directories under `out`, one per log (`commbench import nccl-tests`).

    `op`: the collective, when neither the log nor its file name says; `world_size`: the
    ranks, when the log has no device lines. `on_skipped(line)` hears of every row left
    out (a signed size, zero bytes); `on_imported(run)` of each run as it is written (a
    later log that fails raises, and the runs already written stay)."""
    from commbench.errors import UserError
    from commbench.importers.nccl_tests import OP_NAMES, import_log
    from commbench.results.runs import load_run as load_one
    from commbench.results.store import check_parent

    names = sorted(set(OP_NAMES.values()))
    if op is not None and op not in names:
        raise UserError(f"--op: unknown op {op!r}; choose from: {', '.join(names)}")
    if world_size is not None and world_size < 1:
        raise UserError(f"--world-size must be at least 1, got {world_size}")
    out = Path(out)
    check_parent(out)
    paths = [Path(logs)] if isinstance(logs, str | Path) else [Path(p) for p in logs]
    runs = []
    for log in paths:
        run_dir = import_log(log, out, op=op, world_size=world_size, on_skipped=on_skipped)
        runs.append(load_one(run_dir))
        if on_imported is not None:
            on_imported(runs[-1])
    return runs
