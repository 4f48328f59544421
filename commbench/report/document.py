"""`commbench report`: one self-contained document per run (or suite), in markdown or HTML.

The document is a list of blocks (headings, paragraphs, tables, lists, images) rendered by
one of two small writers, so the markdown a CI job posts and the HTML attached to a ticket
always hold the same content. Plots are PNGs embedded as data URIs: the file stands alone.
"""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench import __version__
from commbench.compare import Comparison, noisy_warning
from commbench.report.figures import context_title
from commbench.report.options import Images, ReportFormat
from commbench.results.exporters import HEADERS, build_tables
from commbench.results.runs import Run, Suite, load
from commbench.results.schema import STRAGGLER_MIN_SHARE, STRAGGLER_MIN_US
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
    """Right-align every column but the first."""


@dataclass(frozen=True, slots=True)
class Image:
    alt: str
    png: bytes


Block = Heading | Para | Bullets | Table | Image


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
        blocks.append(Table(["", *labels], matrix, numeric=False))
    return blocks


def result_blocks(run: Run, level: int) -> list[Block]:
    blocks: list[Block] = [Heading(level, "Results")]
    if not run.rows:
        return [*blocks, Para("No measured points.")]
    for title, cells in build_tables(run.rows):
        blocks += [Heading(level + 1, title), Table(list(HEADERS), cells)]
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


def plot_blocks(runs: list[Run], level: int) -> list[Block]:
    from commbench.report.figures import all_figures
    from commbench.report.plots import png_bytes

    figures = all_figures(runs)
    if not figures:
        return []
    return [Heading(level, "Plots"), *(Image(f.title, png_bytes(f)) for f in figures)]


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


def run_blocks(run: Run, level: int, images: Images, topology: bool = True) -> list[Block]:
    blocks: list[Block] = [
        Para(context_title(run.context)),
        Heading(level, "Context"),
        Table(["", ""], context_rows(run), numeric=False),
    ]
    if topology:
        blocks += topology_blocks(run.context.topology, level, run.context.topology_error)
    blocks += result_blocks(run, level)
    blocks += straggler_blocks(run, level)
    if images is Images.embed:
        blocks += plot_blocks([run], level)
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
        blocks = [Heading(1, f"commbench suite {record.name}: {path.name}")]
        if record.description:
            blocks.append(Para(record.description))
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
                blocks += run_blocks(run, 3, images, topology=not record.topology_file)
    else:
        run = loaded
        blocks = [Heading(1, f"commbench report: {run.path.name}")]
        for name, comparison in comparisons or []:
            blocks += comparison_blocks(name if len(comparisons or []) > 1 else "", comparison, 2)
        blocks += run_blocks(run, 2, images)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    blocks.append(Para(f"Generated by commbench {__version__} on {stamp}."))
    return blocks


# -- writers -----------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            align = ["---"] + ["---:" if b.numeric else "---"] * (len(b.headers) - 1)
            lines = ["| " + " | ".join(_md_cell(h) for h in b.headers) + " |"]
            lines.append("|" + "|".join(align) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode()
            out.append(f"![{_md_cell(b.alt)}](data:image/png;base64,{data})")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; display: block; margin: 1em 0; }
h1, h2, h3, h4 { margin-top: 1.4em; }
"""


def _inline(text: str) -> str:
    """Escape, then honour the one markdown emphasis the blocks use (`**bold**`)."""
    escaped = html.escape(text)
    parts = escaped.split("**")
    return "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))


def to_html(blocks: list[Block]) -> str:
    title = next((b.text for b in blocks if isinstance(b, Heading)), "commbench report")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    for b in blocks:
        if isinstance(b, Heading):
            level = min(b.level, 6)
            out.append(f"<h{level}>{html.escape(b.text)}</h{level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
            body = []
            for row in b.rows:
                cells = "".join(
                    f'<td class="num">{html.escape(c)}</td>'
                    if b.numeric and i > 0
                    else f"<td>{html.escape(c)}</td>"
                    for i, c in enumerate(row)
                )
                body.append(f"<tr>{cells}</tr>")
            out.append(
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            )
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode()
            out.append(f'<img alt="{html.escape(b.alt)}" src="data:image/png;base64,{data}">')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


WRITERS: dict[ReportFormat, Callable[[list[Block]], str]] = {
    ReportFormat.md: to_markdown,
    ReportFormat.html: to_html,
}


def render_report(
    path: Path,
    fmt: ReportFormat = ReportFormat.md,
    images: Images = Images.embed,
    comparisons: list[tuple[str, Comparison]] | None = None,
) -> str:
    return WRITERS[ReportFormat(fmt)](build_report(path, Images(images), comparisons))
