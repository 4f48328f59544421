"""`commbench report`: one self-contained document per run (or suite), in markdown or HTML.

The document is a list of blocks (`blocks`): a run's page is its sections, in the order
`sections.SECTIONS` lists them; a suite's document is its entries' table, its shared
topology, the regression gates, and a page per run. One of two small writers (`writers`)
renders the list, so the markdown a CI job posts and the HTML attached to a ticket always
hold the same content. Plots are PNGs embedded as data URIs: the file stands alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from commbench.compare import Comparison
from commbench.formats import Writes, write
from commbench.report.blocks import Block, Bullets, Contents, Heading, Image, Para, Table
from commbench.report.options import Images, ReportFormat
from commbench.report.requests import Report, ReportRequest
from commbench.report.sections import SECTIONS, Page, comparison_blocks, topology_blocks
from commbench.report.writers import Rendered
from commbench.results.runs import Run, Suite, load
from commbench.topology import load_snapshot
from commbench.version import VERSION

Compared = Callable[[Path, Path, bool], list[tuple[str, Comparison]]]
"""The regression gate of `baseline` against `run` (`allow_mismatch`): the suites' comparison."""


def _figures(runs: list[Run], prefix: str = "") -> dict[str, Image]:
    """The runs' figures as images, by name (an op, `strategies`, a p2p heatmap); `prefix`
    starts their file names (a suite's entry name, so `--images files` names say whose)."""
    from commbench.report.figures import all_figures
    from commbench.report.plots import png_bytes

    return {f.name: Image(f.title, png_bytes(f), prefix + f.name) for f in all_figures(runs)}


def run_blocks(
    run: Run,
    level: int,
    images: Images,
    topology: bool = True,
    prefix: str = "",
    history: str | None = None,
) -> list[Block]:
    """A run's page: each of `SECTIONS` in turn, over the run's figures."""
    figures = _figures([run], prefix) if images is not Images.none else {}
    page = Page(
        run=run,
        level=level,
        figures=figures,
        topology=topology,
        history=history,
        images=images is not Images.none,
    )
    return [block for section in SECTIONS for block in section(page)]


def _suite_blocks(
    suite: Suite,
    path: Path,
    images: Images,
    comparisons: list[tuple[str, Comparison]],
    history: str | None = None,
) -> list[Block]:
    """A suite's document: its entries and how each ended, the topology its runs share, the
    regression gates, then a page per run."""
    record = suite.record
    blocks: list[Block] = [
        Heading(1, f"commbench suite {record.name}: {path.name}"),
        Contents((2,)),
    ]
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
    for name, comparison in comparisons:
        blocks += comparison_blocks(name, comparison, 2)
    for entry in record.entries:
        run = suite.run(entry)
        if run is not None:
            blocks.append(Heading(2, f"{entry.name} ({entry.path})"))
            blocks += run_blocks(
                run,
                3,
                images,
                topology=not record.topology_file,
                prefix=f"{entry.name}-",
                history=history,
            )
    return blocks


def _run_document(
    run: Run,
    images: Images,
    comparisons: list[tuple[str, Comparison]],
    history: str | None = None,
) -> list[Block]:
    """A run's document: the gates against its baselines (named when there are several),
    then its page."""
    blocks: list[Block] = [Heading(1, f"commbench report: {run.path.name}"), Contents()]
    for name, comparison in comparisons:
        blocks += comparison_blocks(name if len(comparisons) > 1 else "", comparison, 2)
    return blocks + run_blocks(run, 2, images, history=history)


def build_report(
    path: Path,
    images: Images = Images.embed,
    comparisons: list[tuple[str, Comparison]] | None = None,
    history: str | None = None,
) -> list[Block]:
    """The blocks of a report on a run directory or a suite directory; with `history`, each
    run's trend in it."""
    path = Path(path)
    loaded = load(path)
    if isinstance(loaded, Suite):
        blocks = _suite_blocks(loaded, path, images, comparisons or [], history)
    else:
        loaded.held_here()
        blocks = _run_document(loaded, images, comparisons or [], history)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    blocks.append(Para(f"Generated by commbench {VERSION} on {stamp}."))
    return blocks


def render_report(
    path: Path,
    fmt: str = "md",
    images: Images = Images.embed,
    comparisons: list[tuple[str, Comparison]] | None = None,
    folder: str = "report_files",
    history: str | None = None,
) -> Rendered:
    """The report's text and, with `Images.files`, the PNGs to write under `folder` (a path
    relative to the document's directory, as the links say)."""
    images = Images(images)
    blocks = build_report(path, images, comparisons, history)
    return write(Writes.REPORT, ReportFormat(fmt), blocks, images, folder)  # type: ignore[no-any-return]


def write_report(request: ReportRequest, compared: Compared) -> Report:
    """`report_run`'s work: the images chosen by format and `out`, the output refused
    before the work (its image files after it), then written, or returned as text. Written
    into a run it read whose launcher died, it settles that run (`settle_written`).
    `compared(baseline, run, allow_mismatch)` is the gate (suites' work, above this package)."""
    run, fmt, out, baseline = request.run, request.fmt, request.out, request.baseline
    allow_mismatch, images = request.allow_mismatch, request.images
    from commbench.errors import UserError
    from commbench.files import write_bytes, write_text
    from commbench.results.lifecycle import settle_written
    from commbench.results.runs import stored_at
    from commbench.results.store import check_output, writing

    run_path = stored_at(run)
    out_path = None if out is None else Path(out)
    base_path = None if baseline is None else stored_at(baseline)
    try:
        form = ReportFormat(fmt)
        chosen = None if images is None else Images(images)
    except ValueError:
        raise UserError(f"unknown report format or images: {fmt!r}, {images!r}") from None
    if chosen is None:
        if form == "html":
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
        comparisons = compared(base_path, run_path, allow_mismatch)
    folder = f"{out_path.stem}_files" if out_path is not None else "report_files"
    if request.history is not None:  # a history that cannot be read: before the work
        from commbench.history.store import History

        with History.open(request.history):
            pass
    rendered: Rendered = render_report(
        run_path, form, chosen, comparisons, folder=folder, history=request.history
    )
    if out_path is not None:
        check_output([out_path, *(out_path.parent / rel for rel in rendered.files)], reads)
        with writing(out_path):
            out_path.parent.mkdir(parents=True, exist_ok=True)
            for rel, png in rendered.files.items():
                target = out_path.parent / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                write_bytes(target, png)
            write_text(out_path, rendered.text)
        written = [out_path, *(out_path.parent / rel for rel in rendered.files)]
        settle_written(written, reads, "commbench report")
        return Report(text=rendered.text, out=out_path)
    note = None
    if images is None and form == "md":
        note = (
            "plots left out of markdown on stdout: --out FILE writes them beside it, "
            "--images embed puts them inline"
        )
    return Report(text=rendered.text, out=None, note=note)
