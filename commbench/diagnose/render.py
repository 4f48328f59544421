"""A diagnosis for people (a table, markdown), for tools (JSON) and for CI dashboards (JUnit)."""

from __future__ import annotations

from commbench.diagnose.verdict import HEALTHY, Diagnosis
from commbench.escape import markdown_text, visible, xml_text
from commbench.files import dump_json


def _md(text: str) -> str:
    return markdown_text(text, where="cell")


def _rows(diagnosis: Diagnosis) -> list[tuple[str, str, list[str]]]:
    return [(n.host or f"node {n.node}", n.verdict, n.evidence) for n in diagnosis.nodes]


def _verdict_line(diagnosis: Diagnosis) -> str:
    tested = ", ".join(f"{s.name} {s.tests} tests in {s.rounds} rounds" for s in diagnosis.stages)
    sick = [n.host or f"node {n.node}" for n in diagnosis.nodes if n.health]
    return (
        f"verdict: {diagnosis.verdict}"
        + (f" ({tested})" if tested else "")
        + (f"; link health findings on {', '.join(sick)}" if sick else "")
    )


def table(diagnosis: Diagnosis) -> str:
    """A node per row, its evidence one line each under the evidence column; a line break or
    control in a host name or evidence (what another node sent) written as its escape."""
    rows = [(visible(h), visible(v), [visible(e) for e in ev]) for h, v, ev in _rows(diagnosis)]
    width = max([len(h) for h, _, _ in rows] + [4])
    out = [f"{'node':<{width}}  {'verdict':<9} evidence"]
    for host, verdict, evidence in rows:
        first, *rest = evidence or ["-"]
        out.append(f"{host:<{width}}  {verdict:<9} {first}")
        out += [f"{'':<{width}}  {'':<9} {line}" for line in rest]
    return "\n".join([*out, "", visible(_verdict_line(diagnosis))]) + "\n"


def markdown(diagnosis: Diagnosis) -> str:
    """A node per row, its evidence lines joined by line breaks inside the cell."""
    out = ["| node | verdict | evidence |", "|---|---|---|"]
    out += [
        f"| {_md(h)} | {_md(v)} | {'<br>'.join(_md(line) for line in e) or '-'} |"
        for h, v, e in _rows(diagnosis)
    ]
    return "\n".join([*out, "", _verdict_line(diagnosis)]) + "\n"


def json_text(diagnosis: Diagnosis) -> str:
    return dump_json(diagnosis.to_dict())


def junit(diagnosis: Diagnosis) -> str:
    failures = sum(n.verdict != HEALTHY for n in diagnosis.nodes)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name="commbench diagnose" tests="{len(diagnosis.nodes)}" '
        f'failures="{failures}">',
    ]
    for n in diagnosis.nodes:
        name = xml_text(n.host or f"node {n.node}", attribute=True)
        if n.verdict == HEALTHY:
            lines.append(f'  <testcase classname="diagnose" name={name}/>')
            continue
        message = xml_text(f"{n.verdict}: {n.evidence[0] if n.evidence else ''}", attribute=True)
        lines.append(f'  <testcase classname="diagnose" name={name}>')
        lines.append(
            f"    <failure message={message}>{xml_text(chr(10).join(n.evidence))}</failure>"
        )
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"


def render_diagnosis(diagnosis: Diagnosis, fmt: str) -> str:
    """`diagnosis` in `fmt`: its writer in the format registry (`commbench.formats`), one of
    the functions above. Not the shared document writers (`tables.Document`): a node's
    evidence is several lines in one cell (lines under the column on a terminal, `<br>` in
    markdown), which the shared tables do not hold, and JUnit is diagnose's alone (one test
    case per node for a CI dashboard)."""
    from commbench.formats import Writes, write

    return write(Writes.DIAGNOSIS, fmt, diagnosis)  # type: ignore[no-any-return]
