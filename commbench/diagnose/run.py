"""Run a diagnosis and conclude it: launch the workers, replay their tests, name the nodes.

The verdict is reached on every node from the tests journalled into its own run directory,
by replaying the same stages (`stages.plan_stages`) on the recorded results, so each node
exits with the same code. A node whose ranks failed or hung (the watchdog names them) is
`failed`; the others keep what was measured before.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from commbench.collectives.settings import CollectivesSettings, Point
from commbench.diagnose.journal import (
    INTER,
    INTRA,
    PEER_ADDRESS,
    TEST_EVENT,
    RecordedTest,
    event_type,
)
from commbench.diagnose.muster import Muster, muster
from commbench.diagnose.plan import Result, Test
from commbench.diagnose.settings import DiagnoseSettings
from commbench.diagnose.stages import Layout, Stage, plan_stages

# the records it concludes in (the API, the CLI and tests import them from here too)
from commbench.diagnose.verdict import (
    DEGRADED,
    DIAGNOSIS_FILE,
    FAILED,
    HEALTHY,
    Diagnosis,
    NodeVerdict,
    StageSummary,
    Suspect,
)
from commbench.health.record import RunHealth
from commbench.launch.launcher import LaunchOptions, run_collectives
from commbench.launch.limits import store_limits
from commbench.launch.protocol import EVENTS_FILE, STARTUP_TIMEOUT, ProtocolError, RollCallView
from commbench.results.record import RunKind, RunStatus
from commbench.results.store import atomic_write, dump_json

WORKER = "commbench.diagnose.worker"
POINTS = 256
"""Rounds the watchdog can name a hang by (more than any diagnosis runs)."""


def _gbps(value: float) -> str:
    """A bandwidth in the unit that reads: GB/s, or MB/s below 1 GB/s."""
    return f"{value:.3g} GB/s" if value >= 1 else f"{value * 1000:.3g} MB/s"


def conclude(
    layout: Layout,
    settings: DiagnoseSettings,
    events: list[dict[str, Any]],
    *,
    status: RunStatus,
    failed_ranks: list[int],
    failure: str | None,
    path: Path,
    store_host: str | None = None,
    this_node: int | None = None,
) -> Diagnosis:
    """Replay the stages on the journalled tests and name each node's verdict. `store_host`:
    the rendezvous endpoint's host, whose node is lost when the job's store is."""
    nodes = [NodeVerdict(host=h, node=i) for i, h in enumerate(layout.hosts)]
    node_of_rank = {r: i for i, ranks in enumerate(layout.ranks) for r in ranks}
    recorded: dict[tuple[str, int, tuple[int, ...]], Result] = {}
    for i, e in enumerate(events):
        line = RecordedTest.from_event(e, f"{EVENTS_FILE}: event {i + 1}:")
        if line is None:
            continue
        test = Test(line.round, line.probe, line.fillers)
        recorded[(line.stage, test.round, test.probe)] = Result(test, line.samples_gbps)
    stages_out: list[StageSummary] = []
    pair_gbps: dict[str, dict[tuple[int, int], float]] = {}
    for stage in plan_stages(layout, settings):
        tests_run = _replay(stage, recorded)
        stages_out.append(StageSummary(stage.name, stage.iso.round, tests_run))
        if not tests_run:
            continue
        _name_findings(stage, nodes)
        pairs = {r.test.units: r.median for r in stage.iso.measured() if len(r.test.units) == 2}
        if pairs:
            pair_gbps[stage.name] = {(a, b): v for (a, b), v in pairs.items()}
    # this node's own failure text names its own address for a peer on the same node
    lost = roll_call(layout, events) or lost_nodes(layout, failure) - {this_node}
    if not lost and store_host and failure and _STORE_LOST.search(failure):
        lost = {i for i, h in enumerate(layout.hosts) if h == store_host}
        lost |= {i for i, a in enumerate(layout.addresses or []) if a == store_host}
    if lost:  # the nodes the survivors lost: their own errors were only the consequence
        for n in sorted(lost):
            nodes[n].verdict = FAILED
            nodes[n].evidence.insert(0, "its peers lost the connection to it (died or cut off)")
    else:
        for rank in failed_ranks:
            at = node_of_rank.get(rank)
            if at is not None and nodes[at].verdict != FAILED:
                nodes[at].verdict = FAILED
                nodes[at].evidence.insert(0, f"rank {rank} failed: {failure or 'see run.json'}")
    if status is not RunStatus.COMPLETE:
        ran = sum(s.tests for s in stages_out)
        for node in nodes:
            if node.verdict == HEALTHY:
                node.evidence.append(f"not fully tested: the diagnosis stopped after {ran} tests")
    return Diagnosis(
        path=path,
        status=status,
        nodes=nodes,
        stages=stages_out,
        failure=failure,
        pair_gbps=pair_gbps,
    )


_STORE_LOST = re.compile(r"RendezvousConnectionError|C10d store has failed")
"""torchrun's words when the job's store, on the rendezvous host, is gone."""


def roll_call(layout: Layout, events: list[dict[str, Any]]) -> set[int]:
    """The nodes lost after a failed round, by the survivors' roll call (`worker._roll_call`):
    the nodes that did not answer, or the node that hosted the store when it is gone. A view
    that does not decode (an edited journal) is left out."""
    views = []
    for i, e in enumerate(events):
        if event_type(e, f"{EVENTS_FILE}: event {i + 1}:") == RollCallView.KIND:
            with contextlib.suppress(ProtocolError):
                views.append(RollCallView.from_doc(e))
    answered = {n for v in views if v.answered is not None for n in v.answered}
    lost = {i for i in range(len(layout.ranks)) if answered and i not in answered}
    gone = {v.store_lost for v in views if v.store_lost}
    for i, (host, address) in enumerate(zip(layout.hosts, layout.addresses or [], strict=False)):
        if host in gone or address in gone:
            lost.add(i)
    return lost


def lost_nodes(layout: Layout, failure: str | None) -> set[int]:
    """The nodes whose address the failed ranks' errors name as the peer they lost."""
    if not failure or not layout.addresses:
        return set()
    named = set(PEER_ADDRESS.findall(failure))
    return {i for i, a in enumerate(layout.addresses) if a is not None and a in named}


def _replay(stage: Stage, recorded: dict[tuple[str, int, tuple[int, ...]], Result]) -> int:
    """Feed the stage the results the workers recorded, round by round, as they ran it."""
    count = 0
    while tests := stage.iso.next_round():
        results = [recorded.get((stage.name, t.round, t.probe)) for t in tests]
        if any(r is None for r in results):
            break  # the run ended within this round: what came before stands
        stage.iso.record([r for r in results if r is not None])
        count += len(results)
    return count


def _name_findings(stage: Stage, nodes: list[NodeVerdict]) -> None:
    # after confirmation passes a test's bandwidth is the median of its passes: say so
    runs = stage.iso.passes_run
    passes = f" (median of {runs} passes)" if runs > 1 else ""
    for unit, finding in stage.iso.findings().items():
        if not (finding.degraded or finding.undecided):
            continue
        node = nodes[stage.node_of(unit)]
        lines = []
        for result, expected in finding.evidence:
            with_ = [stage.unit_name(u) for u in result.test.units if u != unit]
            share = f" ({result.median / expected:.0%})" if expected else ""
            lines.append(
                f"{stage.name}: {stage.unit_name(unit)}"
                + (f" with {', '.join(with_)}" if with_ else "")
                + f": {_gbps(result.median)}{passes}, expected {_gbps(expected)}{share}"
            )
        if finding.undecided:
            lines.append(f"{stage.name}: suspected, but the tests did not agree")
        if finding.degraded and node.verdict != FAILED:
            node.verdict = DEGRADED
        if stage.name != INTER and stage.name != INTRA:
            node.gpus.append(Suspect(stage.unit_name(unit), lines))
        node.evidence.extend(lines)
    for result in stage.iso.short_links():
        a, b = result.test.units
        line = (
            f"{stage.name}: link {stage.unit_name(a)} - {stage.unit_name(b)}: "
            f"{_gbps(result.median)}{passes}, below its peers"
        )
        # once per node: both ends of a link inside one node are that node's one finding
        for at in dict.fromkeys(stage.node_of(u) for u in (a, b)):
            nodes[at].evidence.append(line)
            if nodes[at].verdict == HEALTHY:
                nodes[at].verdict = DEGRADED


def run_diagnose(
    settings: DiagnoseSettings,
    collectives: CollectivesSettings,
    out_parent: Path,
    launch: LaunchOptions | None = None,
    on_test: Callable[[dict[str, Any]], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Diagnosis:
    """Launch the diagnosis on this node, conclude it and write RUN_DIR/diagnosis.json.

    On several nodes, the nodes first sign in (`muster`): a node that never comes is named
    by its host at once, and nothing is launched (torchrun would wait for it for minutes).
    `on_warning` gets the limits this node would hold the job's store under before the
    nodes sign in (run.json keeps them too)."""
    skipped: list[str] = []
    if launch is not None and launch.nnodes > 1:
        ranks = collectives.placement.nproc * launch.nnodes
        for line in store_limits(launch.nnodes, ranks):
            if on_warning is not None:
                on_warning(line)
        came = _muster(launch, collectives)
        if came.missing:
            return _not_all_came(came, settings, collectives, out_parent, launch)
        skipped = came.skipped
    events: list[dict[str, Any]] = []

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        if on_test is not None and event_type(event, EVENTS_FILE) == TEST_EVENT:
            on_test(event)

    points = [
        Point(
            op="all_reduce", strategy=f"diagnose round {i + 1}", requested_bytes=settings.size_bytes
        )
        for i in range(POINTS)
    ]
    outcome = run_collectives(
        collectives,
        out_parent,
        launch,
        kind=RunKind.DIAGNOSE,
        worker=WORKER,
        extra_settings={"diagnose": settings.to_dict()},
        points=points,
        on_event=on_event,
    )
    layout = Layout.from_ranks(outcome.record.context.ranks or [])
    diagnosis = conclude(
        layout,
        settings,
        events,
        status=outcome.status,
        failed_ranks=outcome.failed_ranks,
        failure=outcome.failure,
        path=outcome.run_dir,
        this_node=launch.node_rank if launch else 0,
        store_host=launch.rdzv_endpoint.rpartition(":")[0]
        if launch and launch.rdzv_endpoint
        else None,
    )
    add_health(diagnosis, outcome.record.context.health, launch.node_rank if launch else 0)
    diagnosis.stopped = outcome.stop_requested
    # the run's own warnings (a degraded cross-node watch, values refused on read), each once
    diagnosis.notes = [*settings.baseline_notes, *skipped, *outcome.record.warnings]
    atomic_write(outcome.run_dir / DIAGNOSIS_FILE, dump_json(diagnosis.to_dict()))
    if diagnosis.pair_gbps:
        try:
            from commbench.diagnose.heatmap import write_heatmaps

            write_heatmaps(diagnosis.path, diagnosis.pair_gbps, layout)
        except Exception:  # a figure must never cost the verdict
            pass
    return diagnosis


def add_health(diagnosis: Diagnosis, health: RunHealth | None, node: int) -> None:
    """The link health findings into each node's evidence, and into diagnosis.json: this
    node's (`node`) and, on a multi-node run, every other node's, which their workers gathered
    over the job's process group, so every node's diagnosis names every sick link.

    Evidence, not verdict: every node must reach the same verdict (and exit code) from the
    measurements all of them share, and the health snapshots of the other nodes may be
    missing (a node that died before the end sends no `after`). The findings explain a
    degraded node's numbers, and the verdict line names every node that has some, so a sick
    link that did not (yet) cost bandwidth is still seen."""
    from commbench.health.findings import run_findings

    for finding in run_findings(health):
        at = node if finding.node is None else finding.node
        if not 0 <= at < len(diagnosis.nodes):
            continue
        verdict = diagnosis.nodes[at]
        verdict.health.append(finding)
        verdict.evidence.append(f"link health: {finding.message}")


def _muster(launch: LaunchOptions, collectives: CollectivesSettings) -> Muster:
    names = None
    if launch.source == "slurm":
        import os

        from commbench.launch.slurm import from_env

        job = from_env(dict(os.environ))
        names = job.nodes if job else None
    return muster(launch, wait=min(collectives.timing.timeout, STARTUP_TIMEOUT), names=names)


def _not_all_came(
    came: Muster,
    settings: DiagnoseSettings,
    collectives: CollectivesSettings,
    out_parent: Path,
    launch: LaunchOptions,
) -> Diagnosis:
    """The diagnosis of a cluster some of whose nodes never came: they failed, by name."""
    from commbench.context import host_context
    from commbench.results.lifecycle import start_run
    from commbench.results.record import RunContext

    life = start_run(
        out_parent,
        RunKind.DIAGNOSE,
        settings={**collectives.to_dict(), "diagnose": settings.to_dict()},
        context=RunContext.from_dict(host_context(), "context"),
        health=True,
        launch=launch.to_dict(),
    )
    nodes = []
    for n in range(came.expected):
        if n in came.missing:
            node = NodeVerdict(host=came.name(n), node=n, verdict=FAILED)
            node.evidence.append("did not join the diagnosis (not started, down or unreachable)")
        elif n not in came.joined:
            node = NodeVerdict(host=came.name(n), node=n)
            node.evidence.append("not known: the rendezvous host did not answer")
        else:
            node = NodeVerdict(host=came.name(n), node=n)
            node.evidence.append("not tested: the diagnosis needs every node")
        nodes.append(node)
    failure = came.account()
    diagnosis = Diagnosis(
        path=life.path,
        status=RunStatus.FAILED,
        nodes=nodes,
        stages=[],
        failure=failure,
        notes=[*settings.baseline_notes, *came.skipped],
    )
    atomic_write(life.path / DIAGNOSIS_FILE, dump_json(diagnosis.to_dict()))
    life.finish(RunStatus.FAILED, failure)
    return diagnosis
