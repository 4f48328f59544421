"""`commbench report`: one self-contained document per run (or suite), in markdown or HTML.

The document is a list of blocks (headings, paragraphs, tables, lists, images) rendered by
one of two small writers, so the markdown a CI job posts and the HTML attached to a ticket
always hold the same content. Plots are PNGs embedded as data URIs: the file stands alone.
"""

from __future__ import annotations

import base64
import html
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench import __version__
from commbench.compare import Comparison, noisy_warning
from commbench.errors import UserError
from commbench.health.findings import report_lines
from commbench.report.figures import context_title
from commbench.report.options import Images, ReportFormat
from commbench.results.exporters import build_tables
from commbench.results.network import network_lines
from commbench.results.runs import Run, Suite, load
from commbench.results.schema import P2P_OP, STRAGGLER_MIN_SHARE, STRAGGLER_MIN_US
from commbench.results.stragglers import summary_lines
from commbench.sizes import format_size
from commbench.topology import TopologySnapshot, load_snapshot
from commbench.topology.render import link_matrix, pcie_label


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Para:
    text: str


@dataclass(frozen=True, slots=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True, slots=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    numeric: bool = True
    """Right-align every column but the first (and those in `words`)."""
    words: tuple[int, ...] = ()
    """Columns of words in a numeric table: left-aligned."""

    def right(self, column: int) -> bool:
        return self.numeric and column > 0 and column not in self.words


@dataclass(frozen=True, slots=True)
class Image:
    alt: str
    png: bytes
    name: str = "figure"
    """File stem when the image is written beside the document (`--images files`)."""


@dataclass(frozen=True, slots=True)
class Pre:
    """Preformatted text: a fixed-width table from another command's renderer, as printed."""

    text: str


@dataclass(frozen=True, slots=True)
class Contents:
    """The contents list; filled in by the writer from the document's headings."""

    levels: tuple[int, ...] = (2, 3)


Block = Heading | Para | Bullets | Table | Image | Pre | Contents


# -- content -----------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


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


def _figures(runs: list[Run], prefix: str = "") -> dict[str, Image]:
    """The runs' figures as images, by name (an op, `strategies`, a p2p heatmap); `prefix`
    starts their file names (a suite's entry name, so `--images files` names say whose)."""
    from commbench.report.figures import all_figures
    from commbench.report.plots import png_bytes

    return {f.name: Image(f.title, png_bytes(f), prefix + f.name) for f in all_figures(runs)}


def result_blocks(run: Run, level: int, figures: dict[str, Image] | None = None) -> list[Block]:
    """Each table, and after an op's last table its figure (taken out of `figures`): a plot
    next to the numbers it draws, not at the end of a long page."""
    blocks: list[Block] = [Heading(level, "Results")]
    if not run.rows:
        return [*blocks, Para("No measured points.")]
    figures = {} if figures is None else figures
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


def summary_blocks(run: Run, level: int) -> list[Block]:
    """Per op the peak busbw (at which size) and the average over the bandwidth-bound sizes,
    and the devices used: what nccl-tests users look for first. The cells are
    `results.summary`'s, as `collectives` prints them; here they are real tables."""
    from commbench.results.summary import summarise, tables

    found = tables(summarise(run.rows, run.context.ranks)) if run.rows else []
    if not found:
        return []
    blocks: list[Block] = [Heading(level, "Summary")]
    for t in found:
        blocks += [
            Para(f"**{t.title}**"),
            Table(list(t.headers), t.cells, words=tuple(sorted(t.left))),
        ]
    return blocks


def strategies_blocks(run: Run, level: int, figures: dict[str, Image] | None = None) -> list[Block]:
    """For a `--strategies` run: the fastest strategy per size and its margin, the strategies
    figure, the alpha-beta model fitted to the direct rows (its winner per size and the factor
    that explains it), and the model at larger world sizes."""
    from commbench.results.exporters import Format
    from commbench.strategies.model import SCALE_WORLDS, Params, fit, predict
    from commbench.strategies.report import render_predictions

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
    blocks += _strategy_tables(run, level + 1, backend, figures)
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
        Pre(render_predictions(predictions, params, Format.table, fitted).rstrip("\n")),
    ]


def _strategy_tables(
    run: Run, level: int, backend: str, figures: dict[str, Image] | None
) -> list[Block]:
    """Per (dtype, reduce op, world size): who was fastest at each size and by how much, the
    strategies figure (after the first such table), then the fitted model's winner per size
    and the term that decides it (`report.strategy_tables`)."""
    from commbench.report.strategy_tables import strategy_groups

    blocks: list[Block] = []
    for group in strategy_groups(run.rows, backend):
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


MAX_STRAGGLER_LINES = 20
"""A report lists the findings about waited-for ranks up to this many lines."""


def straggler_blocks(run: Run, level: int) -> list[Block]:
    """Which ranks the others waited for (`Run.straggler_summary`); nothing for a run without
    per-rank times (an import, p2p, a run stored before commbench kept them)."""
    measured = sum(1 for r in run.rows if r.ranks is not None)
    if not measured:
        return []
    blocks: list[Block] = [
        Heading(level, "Waited-for ranks"),
        Para(
            "At each point, the rank whose own time per iteration was furthest below the slowest "
            "rank's (its median slack) is the one the others waited for: it arrived last. It is "
            "named when its slack exceeds every other rank's by at least "
            f"{STRAGGLER_MIN_SHARE:.0%} of the iteration and {STRAGGLER_MIN_US:g} us (scheduling "
            "noise alone gives every rank some slack)."
        ),
    ]
    lines = summary_lines(run.straggler_summary(), limit=MAX_STRAGGLER_LINES)
    if not lines:
        points = f"{measured} point{'s' if measured > 1 else ''}"
        return [*blocks, Para(f"No rank kept the others waiting ({points} with per-rank times).")]
    return [*blocks, Bullets(lines)]


def plot_blocks(figures: dict[str, Image], level: int) -> list[Block]:
    """Figures not already placed beside their tables (the p2p heatmaps, say)."""
    if not figures:
        return []
    return [Heading(level, "Plots"), *figures.values()]


def comparison_blocks(name: str, comparison: Comparison, level: int) -> list[Block]:
    from commbench.report.comparison import HEADERS as GATE_HEADERS
    from commbench.report.comparison import build_tables as gate_tables
    from commbench.report.comparison import summary_lines

    blocks: list[Block] = [
        Heading(level, f"Regression gate{f': {name}' if name else ''}"),
        Para(f"**{comparison.verdict}**"),
        Bullets(summary_lines(comparison)),
    ]
    for title, cells in gate_tables(comparison):
        blocks += [Heading(level + 1, title), Table(list(GATE_HEADERS), cells)]
    return blocks


def run_blocks(
    run: Run, level: int, images: Images, topology: bool = True, prefix: str = ""
) -> list[Block]:
    figures = _figures([run], prefix) if images is not Images.none else {}
    blocks: list[Block] = [Para(context_title(run.context))]
    blocks += summary_blocks(run, level)
    blocks += [
        Heading(level, "Context"),
        Table(["field", "value"], context_rows(run), numeric=False),
    ]
    if topology:
        blocks += topology_blocks(run.context.topology, level, run.context.topology_error)
    blocks += result_blocks(run, level, figures)
    blocks += strategies_blocks(run, level, figures)
    blocks += straggler_blocks(run, level)
    network = network_lines(run.rows, run.context, every_point=True)
    if network:
        blocks += [Heading(level, "Network efficiency"), Bullets(network)]
    health = report_lines(run.context.health)
    if health:
        blocks += [Heading(level, "Link health"), Bullets(health)]
    blocks += plot_blocks(figures, level)
    return blocks


def build_report(
    path: Path,
    images: Images = Images.embed,
    comparisons: list[tuple[str, Comparison]] | None = None,
) -> list[Block]:
    """The blocks of a report on a run directory or a suite directory."""
    path = Path(path)
    blocks: list[Block]
    loaded = load(path)
    if isinstance(loaded, Suite):
        record = loaded.record
        blocks = [Heading(1, f"commbench suite {record.name}: {path.name}"), Contents((2,))]
        if record.description:
            blocks.append(Para(record.description))
        if record.unfinished:
            blocks.append(Para(f"This suite {record.unfinished}."))
        blocks.append(
            Table(
                ["entry", "status", "run directory", "why"],
                [[e.name, str(e.status), e.path or "-", e.failure or ""] for e in record.entries],
                numeric=False,
            )
        )
        if record.warnings:
            blocks.append(Bullets([f"warning: {w}" for w in record.warnings]))
        if record.topology_file:
            blocks += topology_blocks(load_snapshot(path / record.topology_file), 2)
        for name, comparison in comparisons or []:
            blocks += comparison_blocks(name, comparison, 2)
        for entry in record.entries:
            run = loaded.run(entry)
            if run is not None:
                blocks.append(Heading(2, f"{entry.name} ({entry.path})"))
                blocks += run_blocks(
                    run, 3, images, topology=not record.topology_file, prefix=f"{entry.name}-"
                )
    else:
        run = loaded
        blocks = [Heading(1, f"commbench report: {run.path.name}"), Contents()]
        for name, comparison in comparisons or []:
            blocks += comparison_blocks(name if len(comparisons or []) > 1 else "", comparison, 2)
        blocks += run_blocks(run, 2, images)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    blocks.append(Para(f"Generated by commbench {__version__} on {stamp}."))
    return blocks


# -- writers -----------------------------------------------------------------------------------


def _slug(text: str, seen: dict[str, int]) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens, and a
    -1, -2 suffix on repeats, so the markdown contents list links work where it is viewed;
    the HTML writer uses the same ids."""
    base = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def _anchors(blocks: list[Block]) -> dict[int, str]:
    """Each heading's anchor, by its position in `blocks`."""
    seen: dict[str, int] = {}
    return {i: _slug(b.text, seen) for i, b in enumerate(blocks) if isinstance(b, Heading)}


def _contents(
    blocks: list[Block], anchors: dict[int, str], levels: tuple[int, ...]
) -> Iterator[tuple[int, str, str]]:
    top = min(levels)
    for i, b in enumerate(blocks):
        if isinstance(b, Heading) and b.level in levels:
            yield b.level - top, b.text, anchors[i]


@dataclass(slots=True)
class Rendered:
    """A written report: its text, and the image files that go beside it (`--images files`:
    relative path -> PNG bytes; the links in `text` point at these paths)."""

    text: str
    files: dict[str, bytes] = field(default_factory=dict)


def _image_ref(b: Image, images: Images, files: dict[str, bytes], folder: str) -> str:
    """The image's URL: a data URI, or a relative path to a file added to `files`."""
    if images is Images.files:
        stem = re.sub(r"[^\w.-]", "_", b.name) or "figure"
        rel = f"{folder}/{stem}.png"
        k = 1
        while rel in files:
            k += 1
            rel = f"{folder}/{stem}-{k}.png"
        files[rel] = b.png
        return rel
    return "data:image/png;base64," + base64.b64encode(b.png).decode()


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(
    blocks: list[Block], images: Images = Images.embed, folder: str = "report_files"
) -> Rendered:
    files: dict[str, bytes] = {}
    anchors = _anchors(blocks)
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, Contents):
            entries = list(_contents(blocks, anchors, b.levels))
            if not entries:
                continue
            out.append(
                "\n".join(f"{'  ' * depth}- [{_md_cell(t)}](#{a})" for depth, t, a in entries)
            )
        elif isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Pre):
            out.append(f"```\n{b.text}\n```")
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            align = ["---:" if b.right(i) else "---" for i in range(len(b.headers))]
            lines = ["| " + " | ".join(_md_cell(h) for h in b.headers) + " |"]
            lines.append("|" + "|".join(align) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Image):
            if images is Images.none:
                continue
            out.append(f"![{_md_cell(b.alt)}]({_image_ref(b, images, files, folder)})")
        out.append("")
    return Rendered("\n".join(out).rstrip() + "\n", files)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; display: block;
  overflow-x: auto; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; display: block; margin: 1em 0; }
nav ul { list-style: none; padding-left: 1.2em; }
h1, h2, h3, h4 { margin-top: 1.4em; }
"""


def _inline(text: str) -> str:
    """Escape, then honour the one markdown emphasis the blocks use (`**bold**`)."""
    escaped = html.escape(text)
    parts = escaped.split("**")
    return "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))


def to_html(
    blocks: list[Block], images: Images = Images.embed, folder: str = "report_files"
) -> Rendered:
    files: dict[str, bytes] = {}
    anchors = _anchors(blocks)
    title = next((b.text for b in blocks if isinstance(b, Heading)), "commbench report")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    for i, b in enumerate(blocks):
        if isinstance(b, Heading):
            level = min(b.level, 6)
            out.append(f'<h{level} id="{anchors[i]}">{html.escape(b.text)}</h{level}>')
        elif isinstance(b, Contents):
            entries = list(_contents(blocks, anchors, b.levels))
            if entries:
                items = "".join(
                    f'<li style="margin-left:{depth * 1.2}em"><a href="#{a}">{html.escape(t)}</a></li>'
                    for depth, t, a in entries
                )
                out.append(f"<nav><strong>Contents</strong><ul>{items}</ul></nav>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Pre):
            out.append(f"<pre>{html.escape(b.text)}</pre>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
            body = []
            for row in b.rows:
                cells = "".join(
                    f'<td class="num">{html.escape(c)}</td>'
                    if b.right(i)
                    else f"<td>{html.escape(c)}</td>"
                    for i, c in enumerate(row)
                )
                body.append(f"<tr>{cells}</tr>")
            out.append(
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            )
        elif isinstance(b, Image):
            if images is Images.none:
                continue
            ref = _image_ref(b, images, files, folder)
            out.append(f'<img alt="{html.escape(b.alt)}" src="{html.escape(ref)}">')
    out.append("</body></html>")
    return Rendered("\n".join(out) + "\n", files)


WRITERS: dict[ReportFormat, Callable[[list[Block], Images, str], Rendered]] = {
    ReportFormat.md: to_markdown,
    ReportFormat.html: to_html,
}


def render_report(
    path: Path,
    fmt: ReportFormat = ReportFormat.md,
    images: Images = Images.embed,
    comparisons: list[tuple[str, Comparison]] | None = None,
    folder: str = "report_files",
) -> Rendered:
    """The report's text and, with `Images.files`, the PNGs to write under `folder` (a path
    relative to the document's directory, as the links say)."""
    images = Images(images)
    blocks = build_report(path, images, comparisons)
    return WRITERS[ReportFormat(fmt)](blocks, images, folder)
