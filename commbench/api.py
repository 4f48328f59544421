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
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commbench.compare import Gate
    from commbench.diagnose.run import Diagnosis
    from commbench.p2p.plan import Step
    from commbench.p2p.run import DryRun
    from commbench.results.runs import Run, Suite
    from commbench.results.schema import ResultRow
    from commbench.suites.runner import SuiteOutcome
    from commbench.topology import TopologySnapshot

__all__ = ["collectives", "compare", "diagnose", "load", "p2p", "run_suite", "topology"]

PathLike = str | Path


def collectives(
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
    timeout: float = 300.0,
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


def p2p(
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


def load(path: PathLike) -> Run | Suite:
    """Any stored run (collectives, p2p, an nccl-tests import) or suite directory, whatever
    version of commbench wrote it (version 1 is migrated); UserError naming what is wrong."""
    from commbench.results.runs import load as load_stored

    return load_stored(Path(path))


def compare(
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
    from commbench.suites.store import compare_targets, gate_for

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


def topology(
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


def diagnose(
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
