"""Run a suite: every section it enables, each into its own run directory under one suite dir.

Collectives and strategies go through `run_collectives` (one run per dtype); the topology
through `commbench.topology.discover`; p2p through `commbench.p2p.run_p2p(options, parent)`
(GPU runs only). A section that cannot run here (no GPU for p2p, a module missing) is
skipped with a warning, never a crash; a run that fails does not stop the next one; Ctrl-C
stops the suite and keeps what was measured. With a baseline, every entry is
compared with the baseline's entry of the same name, as `commbench compare` would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.compare import Comparison, Gate, GateSettings, context_mismatches
from commbench.errors import (
    EXIT_FAILED,
    EXIT_OK,
    CommbenchError,
    Interrupted,
    RunFailed,
    UserError,
)
from commbench.launch import procs
from commbench.launch.limits import store_limits
from commbench.numbers import check_range
from commbench.results.lifecycle import INTERRUPTED, start_suite
from commbench.results.names import MAX_NPROC
from commbench.results.record import Entry, RunContext, RunKind, RunStatus, SuiteRecord
from commbench.results.schema import SCHEMA_VERSION
from commbench.results.store import SuiteDir, atomic_write, dump_json
from commbench.suites.config import Sizes, SuiteConfig, Timing
from commbench.suites.gate import ReferenceFn, compare_targets, compare_to_history, load_runs
from commbench.torch_version import require_torch

if TYPE_CHECKING:
    from commbench.collectives.placement import Placement
    from commbench.launch.job import MultiNodeJob
    from commbench.launch.launcher import LaunchOptions
    from commbench.suites.request import SuiteRun

EventFn = Callable[[str], None]
_DONE = (RunStatus.COMPLETE, RunStatus.SKIPPED)
"""An entry in any other state fails the suite."""
ProgressFn = Callable[[int, int, Any], None]


@dataclass(kw_only=True, slots=True)
class Machine:
    """Where the suite runs, resolved by the caller (the CLI knows how to find GPUs)."""

    device: str
    nproc: int
    backend: str
    launch: LaunchOptions = field(default_factory=lambda: _one_node())
    """How its workers start: one node, or a rendezvous every node of the suite meets at."""

    def __post_init__(self) -> None:
        if self.device not in ("cuda", "cpu"):
            raise UserError(f"unknown device {self.device!r}; choose cuda or cpu")
        if self.backend not in ("nccl", "gloo"):
            raise UserError(f"unknown backend {self.backend!r}; choose nccl or gloo")
        check_range(self.nproc, "--nproc", 1, MAX_NPROC)

    def entry_launch(self, entry: str) -> LaunchOptions:
        """The launch options for one suite entry: a rendezvous id of its own per entry, so
        the nodes meet again for every run of the suite. (Its run.json has always said the
        launch came from flags.)"""
        from dataclasses import replace

        from commbench.launch.launcher import LaunchOptions

        if self.launch.rdzv_endpoint is None:  # one node: a standalone rendezvous of its own
            return LaunchOptions(debug=self.launch.debug)
        return replace(self.launch, rdzv_id=f"{self.launch.rdzv_id}-{entry}", source="flags")


def _one_node() -> LaunchOptions:
    from commbench.launch.launcher import LaunchOptions

    return LaunchOptions()


@dataclass(kw_only=True, slots=True)
class SuiteOutcome:
    path: Path
    entries: list[Entry]
    warnings: list[str] = field(default_factory=list)
    comparisons: list[tuple[str, Comparison]] | None = None

    @property
    def failed(self) -> list[Entry]:
        return [e for e in self.entries if e.status not in _DONE]

    @property
    def gate(self) -> Gate | None:
        """The comparison with the baseline; None when the suite ran without one."""
        return None if self.comparisons is None else Gate(self.comparisons)

    @property
    def exit_code(self) -> int:
        gate = self.gate.exit_code if self.gate is not None else EXIT_OK
        return max(gate, EXIT_FAILED if self.failed else EXIT_OK)

    @property
    def passed(self) -> bool:
        """Every entry ran (or was skipped as it should be) and the gate, if any, passed."""
        return self.exit_code == EXIT_OK


def _collectives_settings(
    machine: Machine,
    timing: Timing,
    *,
    ops: list[str],
    strategies: list[str],
    sizes: list[int],
    dtype: str,
    reduce_op: str,
    in_place: bool | str = False,
    check: bool = True,
) -> Any:
    from commbench.collectives.settings import build_settings, in_place_choice, parse_reduce_ops

    reduce_ops = parse_reduce_ops(reduce_op)  # one, a comma list or all, as --reduce-op
    return build_settings(
        machine,
        timing,
        ops=ops,
        strategies=strategies,
        sizes=sizes,
        dtype=dtype,
        reduce_op=reduce_ops[0],
        reduce_ops=reduce_ops,
        in_place=in_place_choice(in_place),
        check=check,
    )


def _strategies_available(names: list[str]) -> str | None:
    """None when the strategies can run here, else why not."""
    try:
        from commbench.collectives.specs import STRATEGIES
    except ImportError as exc:
        return f"the strategies module is not available ({exc})"
    unknown = [n for n in names if n not in STRATEGIES]
    return f"unknown strategy {unknown[0]!r}" if unknown else None


class _Suite:
    """The state of one suite run: its directory, its entries, and writing them down."""

    def __init__(
        self,
        config: SuiteConfig,
        out_parent: Path,
        machine: Machine,
        on_event: EventFn,
        on_progress: ProgressFn | None,
        plot: bool,
    ) -> None:
        self.config = config
        self.machine = machine
        self.on_event = on_event
        self.on_progress = on_progress
        self.plot = plot
        self.life = start_suite(
            out_parent,
            SuiteRecord(
                name=config.name,
                description=config.description,
                config_path=config.source,
                config=config.to_dict(),
                machine=asdict(machine),
            ),
        )
        self.dir = self.life.dir
        self.path = self.dir.path
        self.record = self.life.record
        self.entries = self.record.entries
        self.warnings = self.record.warnings
        self.measured = 0
        self.to_measure = 0
        """Entries that launch something (collectives, strategies, p2p): `[i/n]` counts them."""
        self.held_elsewhere: list[str] = []
        """Entries whose rows another node holds (it ran global rank 0): it gates them."""

    def save(self) -> None:
        self.life.save()

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        self.on_event(f"warning: {message}")

    def skip(self, name: str, section: str, why: str) -> None:
        self.entries.append(
            Entry(name=name, section=section, status=RunStatus.SKIPPED, failure=why)
        )
        self.warn(f"{name} skipped: {why}")
        self.save()

    def run_collectives(self, name: str, section: str, settings: Any) -> None:
        from commbench.launch.launcher import run_collectives

        entry = Entry(name=name, section=section, status=RunStatus.RUNNING)
        self.entries.append(entry)
        self.save()
        self.on_event(f"{self.counter()} {name}: measuring")
        try:
            outcome = run_collectives(
                settings,
                self.path,
                launch=self.machine.entry_launch(name),
                on_progress=self.on_progress,
                name=name,
            )
        except CommbenchError as exc:
            entry.status, entry.failure = RunStatus.FAILED, str(exc)
            self.on_event(f"{name}: failed: {exc}")
            self.save()
            if isinstance(exc, RunFailed) and exc.stop_requested:
                raise KeyboardInterrupt from None
            return
        entry.path = outcome.run_dir.name
        verdict = outcome.verdict
        entry.status = verdict.status
        entry.failure = None if verdict.passed else verdict.message
        if outcome.record.holds_results is False:
            self.held_elsewhere.append(name)
        if verdict.status is RunStatus.INTERRUPTED:
            self.save()
            raise KeyboardInterrupt
        self.on_event(
            f"{name}: {entry.status}: {len(outcome.rows)}/{outcome.points_total} points"
            + (f" ({entry.failure})" if entry.failure else "")
        )
        self.save()
        if verdict.stopped:  # asked to stop: its plots can be made later (`plot`)
            raise KeyboardInterrupt
        if self.plot and outcome.rows:
            self.write_plots(outcome.run_dir)

    def run_all(self, planned: list[_Planned]) -> list[Entry]:
        """Run the suite's sections in order (topology, the planned runs, p2p), then finish
        its record; the entries that did not end complete or skipped. Ctrl-C, SIGTERM (a CI
        job's timeout) and SIGHUP end the suite with what was measured saved, as Interrupted
        (exit 130); an entry still running then is marked interrupted."""
        config = self.config
        self.to_measure = sum(1 for item in planned if item.skip is None) + (
            1 if config.p2p and self.machine.device == "cuda" else 0
        )
        interrupted = False
        try:
            with procs.termination_as_interrupt():
                if config.topo:
                    self.run_topology()
                for item in planned:
                    if item.skip is not None:
                        self.skip(item.name, item.section, item.skip)
                    else:
                        self.run_collectives(item.name, item.section, item.settings)
                if config.p2p:
                    self.run_p2p(config.p2p.options)
        except KeyboardInterrupt:
            interrupted = True
            for entry in self.entries:
                if entry.status is RunStatus.RUNNING:  # stopped before its launch reported back
                    entry.status, entry.failure = RunStatus.INTERRUPTED, INTERRUPTED
        failed = [e for e in self.entries if e.status not in _DONE]
        if interrupted:
            self.life.finish(RunStatus.INTERRUPTED)
        else:
            self.life.finish(RunStatus.FAILED if failed else RunStatus.COMPLETE)
        if interrupted:
            raise Interrupted(f"interrupted; what was measured is in {self.path}")
        return failed

    def confirmation(self, name: str, i: int, settings: Any) -> Path | None:
        """Measure `settings` (an entry's worse points) again into `confirm/`, a run that
        is no entry of the suite (a history adds entries only); None when it failed."""
        from commbench.launch.launcher import run_collectives

        parent = self.path / "confirm"
        parent.mkdir(exist_ok=True)
        try:
            outcome = run_collectives(
                settings,
                parent,
                launch=self.machine.entry_launch(f"{name}-confirm{i}"),
                name=f"{name}-confirm{i}",
            )
        except CommbenchError as exc:
            self.warn(f"{name}: confirmation {i} failed: {exc}")
            if isinstance(exc, RunFailed) and exc.stop_requested:
                raise KeyboardInterrupt from None
            return None
        if outcome.verdict.stopped:
            raise KeyboardInterrupt
        return outcome.run_dir

    def counter(self) -> str:
        """`[2/3]`: which of the suite's measuring entries starts now."""
        self.measured += 1
        return f"[{self.measured}/{self.to_measure}]"

    def write_plots(self, run_dir: Path) -> None:
        from commbench.report.plots import write_run_plots

        plots = write_run_plots(run_dir)
        if plots.problem is not None:
            self.warn(f"{run_dir.name}: {plots}")

    def run_topology(self) -> None:
        try:
            from commbench.topology import discover
        except ImportError as exc:
            self.skip("topo", "topo", f"the topology module is not available ({exc})")
            return
        snapshot = discover()
        atomic_write(self.dir.topology_file, dump_json(snapshot.to_dict()))
        self.record.topology_file = self.dir.topology_file.name
        self.entries.append(Entry(name="topo", section="topo", status=RunStatus.COMPLETE))
        self.on_event("topo: written to topology.json")
        self.save()

    def run_p2p(self, options: dict[str, Any]) -> None:
        if self.machine.device != "cuda":
            self.skip(
                "p2p", "p2p", f"p2p measures GPU copies; this suite runs on {self.machine.device}"
            )
            return
        try:
            from commbench.p2p import run_p2p
        except ImportError:
            self.skip("p2p", "p2p", "p2p is not available in this commbench (no commbench.p2p)")
            return
        entry = Entry(name="p2p", section="p2p", status=RunStatus.RUNNING)
        self.entries.append(entry)
        self.save()
        self.on_event(f"{self.counter()} p2p: measuring")
        try:
            outcome = run_p2p(_p2p_options(options, self.machine.device), self.path)
        except Interrupted:
            entry.status = RunStatus.INTERRUPTED
            self.save()
            raise KeyboardInterrupt from None
        except CommbenchError as exc:
            entry.status, entry.failure = RunStatus.FAILED, str(exc)
        else:
            entry.path = Path(outcome.run_dir).name
            entry.status = RunStatus(outcome.status)
            entry.failure = outcome.failure
            if self.plot:
                self.write_plots(Path(outcome.run_dir))
        self.on_event(f"p2p: {entry.status}" + (f" ({entry.failure})" if entry.failure else ""))
        self.save()


def _check_baseline(baseline: Path, machine: Machine, gate: GateSettings) -> None:
    runs = load_runs(baseline)
    if gate.allow_mismatch:
        return
    here = RunContext(
        backend=machine.backend,
        device=machine.device,
        world_size=machine.nproc * machine.launch.nnodes,
        nnodes=machine.launch.nnodes,
    )
    for name, run in runs.items():
        if run.kind is not RunKind.COLLECTIVES:
            continue  # p2p and topology entries carry no launch to hold against this one
        mismatches = context_mismatches(run.context, here)
        if mismatches:
            raise UserError(
                f"{baseline}: {name} is not comparable with this run: "
                + "; ".join(mismatches)
                + " (pass --allow-mismatch to compare anyway)"
            )


def prepare_suite(
    request: SuiteRun, launch: LaunchOptions, placer: Callable[..., Placement]
) -> tuple[SuiteConfig, Machine, GateSettings]:
    """The suite file of `request`, the machine it runs on and the gate it is judged with,
    as the `run` command line asks (its flags override the suite's keys), every run's
    settings validated; `placer(device, nproc, backend)` fills in what neither says.
    `commbench run` and `commbench.run_suite` run what this returns; `slurm-script` checks
    the `run` it wraps with it on the submit host, with the job's nodes as placer."""
    from dataclasses import replace

    from commbench.suites.config import load_suite

    suite = load_suite(Path(request.config))
    place = placer(
        request.device or suite.device,
        request.nproc if request.nproc is not None else suite.nproc,
        request.backend or suite.backend,
    )
    machine = Machine(device=place.device, nproc=place.nproc, backend=place.backend, launch=launch)
    gate = suite.gate
    if request.tolerance is not None:  # a fraction already (`arguments.Fraction`)
        gate = replace(gate, tolerance=request.tolerance)
    if request.allow_mismatch:
        gate = replace(gate, allow_mismatch=True)
    plan_runs(suite, machine)
    return suite, machine, gate


def check_wrapped(request: SuiteRun, job: MultiNodeJob) -> None:
    """What `slurm-script` and `k8s-manifest` check of the `run` they wrap: the suite file,
    every run's settings on the job's nodes, and the baseline it is gated by."""
    from commbench.launch.launcher import LaunchOptions

    # the nodes build the rendezvous from the job; any endpoint stands for it here
    endpoint = "head-node:29400" if job.nodes > 1 else None
    launch = LaunchOptions(nnodes=job.nodes, rdzv_endpoint=endpoint)
    _, machine, _ = prepare_suite(request, launch, job.place)
    job.check_gpus(machine.device, machine.nproc)
    if request.baseline is not None:
        load_runs(Path(request.baseline))


def require_suite_torch(config: SuiteConfig) -> None:
    """Refuse a missing or too old torch before the first section, not in each one (a suite
    of topology only needs none)."""
    if config.collectives or config.strategies or config.p2p:
        require_torch()


@dataclass(kw_only=True, slots=True)
class _Planned:
    """One collectives or strategies run of the suite, its settings already validated."""

    name: str
    section: str
    settings: Any = None
    skip: str | None = None
    """Why it cannot run here (it is recorded as skipped)."""


def plan_runs(config: SuiteConfig, machine: Machine) -> list[_Planned]:
    """Every collectives and strategies run of the suite on `machine`, its settings built
    and validated as `commbench collectives` validates its own; p2p's settings validated.
    Touches nothing: `slurm-script` checks a wrapped `run` with it on the submit host."""
    planned: list[_Planned] = []
    if config.collectives:
        c = config.collectives
        for dtype in c.dtypes:
            settings = _collectives_settings(
                machine,
                c.timing,
                ops=c.ops,
                strategies=[],
                sizes=c.sizes.for_device(machine.device),
                dtype=dtype,
                reduce_op=c.reduce_op,
                in_place=c.in_place,
                check=c.check,
            )
            planned.append(
                _Planned(name=f"collectives-{dtype}", section="collectives", settings=settings)
            )
    if config.strategies:
        s = config.strategies
        why = _strategies_available(s.names)
        for dtype in s.dtypes:
            name = f"strategies-{dtype}"
            if why:
                planned.append(_Planned(name=name, section="strategies", skip=why))
                continue
            settings = _collectives_settings(
                machine,
                s.timing,
                ops=[],
                strategies=s.names,
                sizes=s.sizes.for_device(machine.device),
                dtype=dtype,
                reduce_op=s.reduce_op,
            )
            planned.append(_Planned(name=name, section="strategies", settings=settings))
    if config.p2p and machine.device == "cuda":
        try:
            from commbench.p2p.settings import P2PSettings
        except ImportError:
            pass  # skipped when its turn comes, with the reason
        else:
            P2PSettings.from_options(_p2p_options(config.p2p.options, machine.device))
    return planned


def _plan(config: SuiteConfig, machine: Machine) -> list[_Planned]:
    """`plan_runs`, then the launcher's preflight of each run (what this node's torch and
    memory cannot do), all before the suite creates anything: bad input leaves no
    half-made suite directory behind."""
    from commbench.launch.launcher import preflight

    planned = plan_runs(config, machine)
    for item in planned:
        if item.settings is not None:
            preflight(item.settings, machine.entry_launch(item.name))
    return planned


def _p2p_options(options: dict[str, Any], device: str) -> dict[str, Any]:
    """The suite's p2p section for this device (sizes may differ by device)."""
    return {k: v.for_device(device) if isinstance(v, Sizes) else v for k, v in options.items()}


def run_suite(
    config: SuiteConfig,
    out_parent: Path,
    machine: Machine,
    *,
    baseline: Path | None = None,
    gate: GateSettings | None = None,
    plot: bool = True,
    on_event: EventFn | None = None,
    on_progress: ProgressFn | None = None,
    confirm: int = 0,
    history: str | None = None,
    gate_history: bool = False,
    label: str | None = None,
) -> SuiteOutcome:
    """Run every enabled section of `config`; compare with `baseline` when given, or with
    `history` (`gate_history`), the points that look worse measured again `confirm` times;
    then add the suite's runs to `history`, when given."""
    _check_request(config, machine, baseline, gate, confirm, history, gate_history)
    planned = _plan(config, machine)
    on_event = on_event or (lambda _: None)
    suite = _Suite(config, out_parent, machine, on_event, on_progress, plot)
    # announced once everything is checked and its directory made: a refused suite prints
    # its one error line only
    on_event(f"suite {config.name}: {machine.nproc} x {machine.device} ({machine.backend})")
    # said once for the suite, before its first launch (each entry's run.json keeps them too)
    nodes = machine.launch.nnodes
    for line in store_limits(nodes, machine.nproc * nodes):
        suite.warn(line)
    failed = suite.run_all(planned)
    outcome = SuiteOutcome(path=suite.path, entries=suite.entries, warnings=suite.warnings)
    settings = gate or config.gate
    reference = _history_link().reference_in(history) if gate_history and history else None
    if baseline is not None or reference is not None:
        _gate_suite(suite, outcome, planned, settings, confirm, baseline, reference, history)
    if history is not None and not failed and not suite.held_elsewhere:
        try:  # what was measured and judged stands whether the history takes it or not
            on_event(f"history: {_history_link().add(history, suite.path, label)}")
        except UserError as exc:
            suite.warn(f"history: {exc}")
    return outcome


def _check_request(
    config: SuiteConfig,
    machine: Machine,
    baseline: Path | None,
    gate: GateSettings | None,
    confirm: int,
    history: str | None,
    gate_history: bool,
) -> None:
    """Refuse what `run_suite` cannot do before it measures or makes anything: a torch the
    suite's sections need and this one lacks, a gate or confirmation with nothing to judge
    against, a bad or incomparable baseline, a history that cannot be read or written."""
    require_suite_torch(config)
    if gate_history and history is None:
        raise UserError("--gate judges the suite against a history: pass --history DB")
    if confirm and baseline is None and not gate_history:
        raise UserError(
            "--confirm measures again what the gate found worse: pass --baseline or --gate"
        )
    if baseline is not None:  # refuse a bad or incomparable baseline before measuring
        _check_baseline(baseline, machine, gate or GateSettings())
    if history is not None:  # a history that cannot be read or written: before measuring
        _history_link().check(history)


def _gate_suite(
    suite: _Suite,
    outcome: SuiteOutcome,
    planned: list[_Planned],
    settings: GateSettings,
    confirm: int,
    baseline: Path | None,
    reference: ReferenceFn | None,
    history: str | None,
) -> None:
    """Compare the suite's entries with `baseline`, or else with the history's `reference`,
    the points that look worse measured again `confirm` times; put the comparisons of the
    entries this node holds in `outcome` and `comparison.json`, the verdict in the record.
    Apart from `run_suite` because it runs only when the suite has something to judge against."""
    if baseline is not None:
        comparisons = compare_targets(baseline, suite.path, settings, reference)
        against = str(baseline)
    else:
        assert reference is not None
        comparisons = compare_to_history(suite.path, reference, settings)
        against = f"the history {history}"
        if not any(p for _, c in comparisons for p in c.points if p.mark.value != "new"):
            suite.warn(
                f"the history {history} holds fewer than 5 comparable runs of this suite's "
                "points: nothing judged yet (every run added makes it longer)"
            )
    if confirm:
        comparisons = _confirmed(
            suite, planned, comparisons, confirm, baseline, reference, settings
        )
    if suite.held_elsewhere:
        # Each node of a multi-node suite gates what it holds; the job fails if any does.
        outcome.comparisons = [(n, c) for n, c in comparisons if n not in suite.held_elsewhere]
        suite.warn(
            f"{', '.join(suite.held_elsewhere)}: gated on the node that ran global rank 0, "
            "which holds the results"
        )
    else:
        outcome.comparisons = comparisons
    write_comparison(suite.path, against, outcome.comparisons)
    suite.record.baseline = against
    suite.record.exit_code = outcome.exit_code
    suite.save()


def _history_link() -> Any:
    """The runs history, imported when a suite uses one (`suites/history.py`)."""
    from commbench.suites import history

    return history


def _confirmed(
    suite: _Suite,
    planned: list[_Planned],
    comparisons: list[tuple[str, Comparison]],
    k: int,
    baseline: Path | None,
    reference: ReferenceFn | None,
    settings: GateSettings,
) -> list[tuple[str, Comparison]]:
    """Each comparison whose points look worse, with those points measured `k` times more
    (a run of just them each time, under the suite's `confirm/`) and judged against the
    same reference (`suites.confirm`)."""
    from commbench.compare import compare_history, compare_runs
    from commbench.results.runs import load_run
    from commbench.suites.confirm import confirm, confirmation_settings, worse_keys

    by_name = {item.name: item for item in planned if item.settings is not None}
    base_runs = load_runs(baseline) if baseline is not None else {}
    out = []
    for name, comparison in comparisons:
        keys = worse_keys(comparison)
        item = by_name.get(name)
        if not keys or item is None:
            out.append((name, comparison))
            continue
        base = base_runs.get(name) or (
            next(iter(base_runs.values())) if len(base_runs) == 1 else None
        )
        settings_k = confirmation_settings(item.settings, keys)
        judged = []
        for i in range(1, k + 1):
            suite.on_event(f"{name}: confirming {len(keys)} worse point(s), {i}/{k}")
            run_dir = suite.confirmation(name, i, settings_k)
            if run_dir is None:
                continue
            run = load_run(run_dir)
            if base is not None:
                history, runs = reference(run) if reference is not None else (None, ())
                judged.append(compare_runs(base, run, settings, history=history, history_runs=runs))
            elif reference is not None:
                history, runs = reference(run)
                judged.append(compare_history(run, history or {}, runs, settings))
        out.append((name, confirm(comparison, judged)))
    return out


def write_comparison(path: Path, baseline: str, results: list[tuple[str, Comparison]]) -> None:
    """comparison.json (every decision) and comparison.md (what CI publishes)."""
    from commbench.escape import markdown_text
    from commbench.report.comparison import to_markdown

    payload = {
        "schema_version": SCHEMA_VERSION,
        "baseline": str(baseline),
        "entries": {n: c.to_dict() for n, c in results},
    }
    atomic_write(SuiteDir(path).comparison_json, dump_json(payload))
    parts = [f"# commbench gate: {markdown_text(f'{path.name} vs {baseline}', where='cell')}\n"]
    parts += [
        f"## {markdown_text(name, where='cell')}\n\n{to_markdown(c, heading='###')}"
        for name, c in results
    ]
    atomic_write(SuiteDir(path).comparison_md, "\n".join(parts))


def run_request(request: SuiteRun) -> SuiteOutcome:
    """`run_suite`'s work: the suite file read and checked against the launch, then run."""
    from commbench.collectives.placement import resolve_placement
    from commbench.launch.launcher import resolve_launch
    from commbench.results.store import check_parent

    out = Path(request.out)
    check_parent(out)
    launch = resolve_launch(request)
    baseline = request.baseline
    no_plot, on_event, on_progress = request.no_plot, request.on_event, request.on_progress
    suite, machine, gate = prepare_suite(request, launch, resolve_placement)
    return run_suite(
        suite,
        out,
        machine,
        baseline=None if baseline is None else Path(baseline),
        gate=gate,
        plot=not no_plot,
        on_event=on_event,
        on_progress=on_progress,
        confirm=request.confirm,
        history=request.history,
        gate_history=request.gate,
        label=request.label,
    )
