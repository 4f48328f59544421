"""The sections of a run's page in a report, one function each, in the order `SECTIONS` lists.

Every section is drawn from a `Page` (the run, the heading level, the figures not yet placed)
and returns its blocks, or none when the run has nothing for it (no strategies, no per-rank
times, no link health). A new section is a function here and its place in `SECTIONS`; the
document (`document`) and the writers (`writers`) need no change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from commbench.compare import Comparison, noisy_warning
from commbench.errors import UserError
from commbench.health.findings import report_lines
from commbench.report.blocks import Block, Bullets, Heading, Image, Para, Pre, Table
from commbench.report.figures import context_title
from commbench.results import slow_processes
from commbench.results.exporters import build_tables
from commbench.results.network import network_lines
from commbench.results.runs import Run
from commbench.results.schema import P2P_OP, STRAGGLER_MIN_SHARE, STRAGGLER_MIN_US
from commbench.results.stragglers import summary_lines
from commbench.sizes import format_size
from commbench.topology import TopologySnapshot
from commbench.topology.render import link_matrix, pcie_label


@dataclass(kw_only=True, slots=True)
class Page:
    """What each section of a run's page is drawn from."""

    run: Run
    level: int
    """The level of the sections' headings: 2 in a run's report, 3 under a suite's entry."""
    figures: dict[str, Image] = field(default_factory=dict)
    """The run's figures not yet placed: a section that shows one beside its numbers takes it
    out, and the last section (`plots_section`) shows the rest."""
    topology: bool = True
    """False under a suite whose runs share one topology, shown once at its top."""
    history: str | None = None
    """A runs history (`report --history`): the run's trend in it (`trend_section`)."""
    images: bool = True
    """Whether the page shows figures at all (`--images none`: tables only)."""


Section = Callable[[Page], list[Block]]


def _fmt(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def title_section(page: Page) -> list[Block]:
    """One line of what ran where (`NVIDIA H100 x8, nccl 2.21, ...`), before any heading."""
    return [Para(context_title(page.run.context))]


def summary_section(page: Page) -> list[Block]:
    """Per op the peak busbw (at which size) and the average over the bandwidth-bound sizes,
    and the devices used: what nccl-tests users look for first. The cells are
    `results.summary`'s, as `collectives` prints them; here they are real tables."""
    from commbench.results.summary import summarise, tables

    run, level = page.run, page.level
    found = tables(summarise(run.rows, run.context.ranks)) if run.rows else []
    if not found:
        return []
    blocks: list[Block] = [Heading(level, "Summary")]
    for t in found:
        blocks += [
            Para(t.title, bold=True),
            Table(list(t.headers), t.cells, words=tuple(sorted(t.left))),
        ]
    return blocks


def context_rows(run: Run) -> list[list[str]]:
    record, ctx = run.record, run.context
    status = str(record.status or "?")
    if record.failure:
        status += f": {record.failure}"
    done = record.points_done if record.points_done is not None else len(run.rows)
    total = record.points_total if record.points_total is not None else "?"
    rows = [
        ["run", run.path.name],
        ["kind", _fmt(record.kind.value)],
        ["status", status],
        ["points", f"{done}/{total}"],
        ["devices", f"{_fmt(ctx.device_names)} x{ctx.world_size or '?'}"],
        ["backend", _fmt(ctx.backend)],
        ["world size", _fmt(ctx.world_size)],
        ["nodes", _fmt(ctx.nnodes)],
        ["hosts", _fmt(ctx.hosts or ctx.host)],
        ["torch", _fmt(ctx.torch)],
        ["NCCL", _fmt(ctx.nccl)],
        ["CUDA", _fmt(ctx.cuda)],
        ["driver", _fmt(ctx.driver)],
        ["commbench", _fmt(ctx.commbench)],
        ["started", _fmt(ctx.started_at)]
        if ctx.started_at or not record.imported_at
        else ["imported", _fmt(record.imported_at)],
        ["duration", f"{record.duration_s:.1f} s" if record.duration_s else "-"],
        ["command", _fmt(ctx.command)],
    ]
    if record.source:
        rows.append(["imported from", record.source])
    if ctx.env:
        rows.append(["environment", ", ".join(f"{k}={v}" for k, v in ctx.env.items())])
    return rows


def context_section(page: Page) -> list[Block]:
    """What was run, how it ended, and with which versions: what a reader checks before
    trusting a number."""
    return [
        Heading(page.level, "Context"),
        Table(["field", "value"], context_rows(page.run), numeric=False),
    ]


def topology_blocks(
    snapshot: TopologySnapshot | None, level: int, error: str | None = None
) -> list[Block]:
    """The GPUs and their link matrix (`topology.render`'s view, as tables)."""
    blocks: list[Block] = [Heading(level, "Topology")]
    if snapshot is None and not error:
        return [*blocks, Para("Not recorded (no NVML on the measuring host, or an import).")]
    if error:
        blocks.append(Para(f"Topology discovery failed: {error}"))
    if snapshot is not None and snapshot.nvml_error:
        blocks.append(Para(snapshot.nvml_error))  # already says "NVML: ..."
    if snapshot is None or not snapshot.gpus:
        return [*blocks, Para("No GPU visible to NVML.")]
    rows = [
        [
            f"GPU{g.index}",
            _fmt(g.name),
            _fmt(g.pci_bus_id),
            pcie_label(g.pcie_max_gen, g.pcie_max_width) if g.pcie_max_gen else "-",
            _fmt(g.numa_node),
        ]
        for g in snapshot.gpus
    ]
    blocks.append(Table(["GPU", "model", "PCI bus", "PCIe", "NUMA"], rows, numeric=False))
    if snapshot.pairs:
        labels, matrix = link_matrix(snapshot)
        blocks.append(Table(["GPU", *labels], matrix, numeric=False))
    return blocks


def topology_section(page: Page) -> list[Block]:
    """The run's own topology, unless its suite shows one for all its runs."""
    if not page.topology:
        return []
    context = page.run.context
    return topology_blocks(context.topology, page.level, context.topology_error)


def results_section(page: Page) -> list[Block]:
    """Each table, and after an op's last table its figure (taken out of `figures`): a plot
    next to the numbers it draws, not at the end of a long page."""
    run, level, figures = page.run, page.level, page.figures
    blocks: list[Block] = [Heading(level, "Results")]
    if not run.rows:
        return [*blocks, Para("No measured points.")]
    # strategy tables draw in the strategies figure, placed in their own section; p2p rows
    # name their copy in the strategy field, and the p2p heatmap follows their tables
    tables = build_tables(run.rows)
    ops = [None if t.strategy and t.op != P2P_OP else t.op for t in tables]
    for i, t in enumerate(tables):
        blocks += [Heading(level + 1, t.title), Table(t.headers, t.cells)]
        following = ops[i + 1] if i + 1 < len(tables) else None
        if ops[i] is not None and ops[i] != following and ops[i] in figures:
            blocks.append(figures.pop(str(ops[i])))
    warning = noisy_warning(run.rows)
    if warning:
        blocks.append(Para(warning + "."))
    noted = sorted({(r.op, r.size_bytes, r.note) for r in run.rows if r.note})
    notes = [f"{op} {format_size(size)}: {note}" for op, size, note in noted]
    if notes:
        blocks.append(
            Bullets(notes[:20] + ([f"... {len(notes) - 20} more"] if len(notes) > 20 else []))
        )
    return blocks


def strategies_section(page: Page) -> list[Block]:
    """For a `--strategies` run: the fastest strategy per size and its margin, the strategies
    figure, the alpha-beta model fitted to the direct rows (its winner per size and the factor
    that explains it), and the model at larger world sizes."""
    from commbench.results.exporters import Format
    from commbench.strategies.model import SCALE_WORLDS, Params, fit, predict
    from commbench.strategies.report import render_predictions

    run, level = page.run, page.level
    rows = [r for r in run.rows if r.op == "all_reduce" and r.strategy]
    if not rows:
        return []
    backend = str(run.context.backend or run.record.settings.get("backend") or "nccl")
    if backend not in ("nccl", "gloo"):
        backend = "nccl"
    blocks: list[Block] = [
        Heading(level, "Strategies"),
        Para(
            "Which all-reduce strategy was fastest at each size and by how much (each one's "
            "ratio to the direct all_reduce), then the alpha-beta model (latency + bytes / "
            "bandwidth) fitted to the direct rows: its winner per size and the term that "
            "decides it, here and at larger world sizes. Each strategy's own table is under "
            "Results."
        ),
    ]
    blocks += _strategy_tables(run, level + 1, backend, page.figures)
    try:
        fitted = fit(run.rows, backend, 0.0)
    except UserError as exc:
        return [*blocks, Para(f"No model at other scales: {exc}")]
    params = Params(
        alpha_us=fitted.params.alpha_us,
        bw_gbps=fitted.params.bw_gbps,
        launch_us=0.0,
        backend=backend,
    )
    strategies = list(dict.fromkeys(r.strategy for r in rows if r.strategy))
    sizes = sorted({r.size_bytes for r in rows})
    worlds = list(dict.fromkeys([*fitted.world_sizes, *SCALE_WORLDS]))
    predictions = predict(params, worlds, sizes, strategies)
    return [
        *blocks,
        Heading(level + 1, "Model at other scales"),
        Pre(render_predictions(predictions, params, Format("table"), fitted).rstrip("\n")),
    ]


def _strategy_tables(
    run: Run, level: int, backend: str, figures: dict[str, Image] | None
) -> list[Block]:
    """Per (dtype, reduce op, world size): who was fastest at each size and by how much, the
    strategies figure (after the first such table), then the fitted model's winner per size
    and the term that decides it (`report.strategy_tables`)."""
    from commbench.report.strategy_tables import strategy_tables

    blocks: list[Block] = []
    for group in strategy_tables(run.rows, backend):
        blocks += [
            Heading(level, f"Fastest per size: {group.title}"),
            Table(group.headers, group.cells, words=(len(group.headers) - 2,)),
            Para(group.marks),
        ]
        if figures and "strategies" in figures:
            blocks.append(figures.pop("strategies"))
        blocks += [Heading(level, f"Cost model: {group.title}"), Para(group.model_text)]
        if group.model_cells:
            blocks.append(Table(group.model_headers, group.model_cells, numeric=False))
        if group.legend:
            blocks.append(Bullets(group.legend))
    if figures and "strategies" in figures:
        blocks.append(figures.pop("strategies"))
    return blocks


def replay_section(page: Page) -> list[Block]:
    """For a replay: the recorded against the replayed communication time per step, the rows
    that dominate the recorded traffic's time with the alpha-beta model beside each (and
    whether it is latency- or bandwidth-bound), and the bucket advisor's caps."""
    from commbench.replay.explain import explanation

    run, level = page.run, page.level
    replay = run.record.replay
    if replay is None:
        return []
    world = f"{replay.world} ranks"
    if replay.world != replay.traced_world:
        world += f" (traced on {replay.traced_world})"
    blocks: list[Block] = [
        Heading(level, "Replay"),
        Para(
            f"The trace {replay.trace}, replayed on {world}, {replay.steps} step(s)"
            + ("" if replay.complete else " (the trace is incomplete)")
            + ". A step's communication time: recorded, the time its calls covered on the "
            "busiest rank; replayed, first issue to last completion on the slowest rank."
        ),
    ]
    said = explanation(replay, run.rows, str(run.context.backend or "nccl"))
    blocks += [Table(*said.steps), Para(f"The median row: {said.steps_note}.")]
    if said.dominant is not None:
        headers, cells = said.dominant
        blocks += [
            Heading(level + 1, "What dominates"),
            Para(
                "Each row's share of the recorded traffic's time (its calls x its measured "
                "time), and the model's time for one call beside the measurement."
            ),
            Table(headers, cells, words=(2, 8)),
        ]
    blocks.append(Para(said.model))
    if said.rebucket is not None:
        blocks += [Heading(level + 1, "DDP bucket advisor"), Table(*said.rebucket)]
        if said.advice:
            blocks.append(Para(said.advice))
    if replay.elsewhere is not None:
        e = replay.elsewhere
        blocks += [
            Heading(level + 1, "The caps on another fabric"),
            Para(
                f"Predicted by the model alone on {e.world} ranks, {e.bw_gbps:g} GB/s per link "
                f"and {e.latency_us:g} us per step (`--bw`, `--latency`)."
            ),
            Table(
                ["bucket_cap_mb", "buckets", "predicted / step"],
                [[f"{c / (1 << 20):g}", str(b), f"{t * 1e3:.3g} ms"] for c, b, t in e.caps],
            ),
        ]
        if e.best_cap_mb is not None:
            blocks.append(Para(f"There, bucket_cap_mb={e.best_cap_mb:g}."))
    if replay.notes:
        blocks.append(Bullets(list(replay.notes)))
    return blocks


MAX_STRAGGLER_LINES = 20
"""A report lists the findings about waited-for ranks up to this many lines."""


def stragglers_section(page: Page) -> list[Block]:
    """Which ranks the others waited for (`Run.straggler_summary`); nothing for a run without
    per-rank times (an import, p2p, a run stored before commbench kept them)."""
    run = page.run
    return _per_rank(
        page,
        "Waited-for ranks",
        "At each point, the rank whose own time per iteration was furthest below the slowest "
        "rank's (its median slack) is the one the others waited for: it arrived last. It is "
        "named when its slack exceeds every other rank's by at least "
        f"{STRAGGLER_MIN_SHARE:.0%} of the iteration and {STRAGGLER_MIN_US:g} us (scheduling "
        "noise alone gives every rank some slack).",
        sum(1 for r in run.rows if r.ranks is not None),
        lambda: summary_lines(run.straggler_summary(), limit=MAX_STRAGGLER_LINES),
        "No rank kept the others waiting ({points} with per-rank times).",
    )


def slow_processes_section(page: Page) -> list[Block]:
    """Which process of an imported nccl-tests run was the slowest (`results.slow_processes`);
    nothing for a run without per-process times (every run but an nccl-tests `-I` import)."""
    run = page.run
    return _per_rank(
        page,
        "Slowest processes",
        "nccl-tests timed every iteration in each MPI process (`-I 1`: per process, the "
        "maximum over its GPUs). At each point, the process whose median time exceeds every "
        f"other's by at least {STRAGGLER_MIN_SHARE:.0%} of the iteration and "
        f"{STRAGGLER_MIN_US:g} us is named the slowest, as nccl-tests' analyzer names it. "
        "Inside a collective, a process may spend longer because it waited for the others: "
        "with one GPU per process these times are also the ranks' own times of "
        '"Waited-for ranks", which names the rank that arrived last (the shortest time).',
        sum(1 for r in run.rows if r.processes is not None),
        lambda: slow_processes.summary_lines(
            slow_processes.summarise(run.rows, run.context.ranks), limit=MAX_STRAGGLER_LINES
        ),
        "No process was clearly the slowest ({points} with per-process times).",
    )


def _per_rank(
    page: Page,
    title: str,
    method: str,
    measured: int,
    lines: Callable[[], list[str]],
    nobody: str,
) -> list[Block]:
    """A per-rank analysis's section: how it names a rank, then its findings, or that it named
    nobody at the `measured` points; nothing where no point was measured per rank."""
    if not measured:
        return []
    blocks: list[Block] = [Heading(page.level, title), Para(method)]
    found = lines()
    if not found:
        points = f"{measured} point{'s' if measured > 1 else ''}"
        return [*blocks, Para(nobody.format(points=points))]
    return [*blocks, Bullets(found)]


def network_section(page: Page) -> list[Block]:
    """What the network between the nodes delivered, against its line rate, at every point
    (`results.network`); nothing for a run on one node."""
    network = network_lines(page.run.rows, page.run.context, every_point=True)
    if not network:
        return []
    return [Heading(page.level, "Network efficiency"), Bullets(network)]


def link_health_section(page: Page) -> list[Block]:
    """What the link-health counters said before and after the run (`health.findings`)."""
    health = report_lines(page.run.context.health)
    if not health:
        return []
    return [Heading(page.level, "Link health"), Bullets(health)]


def plots_section(page: Page) -> list[Block]:
    """Figures not already placed beside their tables (the p2p heatmaps, say)."""
    if not page.figures:
        return []
    return [Heading(page.level, "Plots"), *page.figures.values()]


def trend_section(page: Page) -> list[Block]:
    """With a history, where each point of the run stands among its series' runs, and a
    figure of each op's series over time with its change points (`report/trend.py`)."""
    if page.history is None or not page.run.rows:
        return []
    from commbench.report.trend import trend_blocks

    return trend_blocks(page.run, page.history, page.level, figures=page.images)


SECTIONS: tuple[Section, ...] = (
    title_section,
    summary_section,
    context_section,
    topology_section,
    results_section,
    strategies_section,
    replay_section,
    stragglers_section,
    slow_processes_section,
    network_section,
    link_health_section,
    trend_section,
    plots_section,
)
"""A run's page, top to bottom. `plots_section` comes last: it shows the figures that no
section before it placed."""


def comparison_blocks(name: str, comparison: Comparison, level: int) -> list[Block]:
    """The regression gate's verdict on the run against a baseline, and its tables."""
    from commbench.report.comparison import HEADERS as GATE_HEADERS
    from commbench.report.comparison import build_tables as gate_tables
    from commbench.report.comparison import summary_lines as gate_lines

    blocks: list[Block] = [
        Heading(level, f"Regression gate{f': {name}' if name else ''}"),
        Para(comparison.verdict, bold=True),
        Bullets(gate_lines(comparison)),
    ]
    for title, cells in gate_tables(comparison):
        blocks += [Heading(level + 1, title), Table(list(GATE_HEADERS), cells)]
    return blocks
