"""The two writers of a report: its blocks as markdown, or as one HTML page.

Each writer walks the same list of blocks (`blocks`); neither decides what a report says.
Every text of a block is plain text, much of it from run.json: the markdown writer escapes
each one with `escape.markdown_text` (no heading, list, table cell, code span, link or HTML
of the text's own), the HTML writer with `html.escape`. Images are embedded as data URIs (the file stands alone) or, with `--images files`, written
beside the document and linked.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from commbench.escape import markdown_fence, markdown_text
from commbench.report.blocks import (
    Block,
    Bullets,
    Contents,
    Heading,
    Image,
    Para,
    Pre,
    Table,
)
from commbench.report.options import Images


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
    return markdown_text(text, where="cell")


def _md_link(text: str) -> str:
    return markdown_text(text, where="link")


def to_markdown(
    blocks: list[Block], images: Images = Images.embed, folder: str = "report_files"
) -> Rendered:
    files: dict[str, bytes] = {}
    anchors = _anchors(blocks)
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {_md_cell(b.text)}")
        elif isinstance(b, Contents):
            entries = list(_contents(blocks, anchors, b.levels))
            if not entries:
                continue
            out.append(
                "\n".join(f"{'  ' * depth}- [{_md_link(t)}](#{a})" for depth, t, a in entries)
            )
        elif isinstance(b, Para):
            text = markdown_text(b.text, where="bold" if b.bold else "block")
            out.append(f"**{text}**" if b.bold and text else text)
        elif isinstance(b, Pre):
            out.append(markdown_fence(b.text))
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {markdown_text(item)}" for item in b.items))
        elif isinstance(b, Table):
            align = ["---:" if b.right(i) else "---" for i in range(len(b.headers))]
            lines = ["| " + " | ".join(_md_cell(h) for h in b.headers) + " |"]
            lines.append("|" + "|".join(align) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Image):
            if images is Images.none:
                continue
            out.append(f"![{_md_link(b.alt)}]({_image_ref(b, images, files, folder)})")
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
            text = html.escape(b.text)
            out.append(f"<p><strong>{text}</strong></p>" if b.bold else f"<p>{text}</p>")
        elif isinstance(b, Pre):
            out.append(f"<pre>{html.escape(b.text)}</pre>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in b.items) + "</ul>")
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
