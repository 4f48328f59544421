"""`commbench topo`: how this machine's GPUs are wired, or a saved/imported topology."""

from __future__ import annotations

from pathlib import Path

import typer

from commbench.api import TopologyRequest
from commbench.cli._common import reported_errors, say, verb_command
from commbench.files import write_text
from commbench.flags import OUT, Output
from commbench.formats import Choice, Writes, write
from commbench.options import values


def register(app: typer.Typer) -> None:
    @verb_command(
        app,
        "topo",
        TopologyRequest,
        output=Output(
            Writes.TOPOLOGY,
            lead="",
            tail="With --out, the file gets this format and stdout the table.",
        ),
    )
    def topo(
        request: TopologyRequest,
        fmt: Choice,
        out: Path | None = OUT.option(
            None,
            metavar="FILE",
            help="Also write the output (per --format) to FILE; the table still goes to stdout.",
        ),
    ) -> None:
        """Show how this machine's GPUs are wired (NVLink, PCIe, P2P, peak bandwidth)."""
        with reported_errors():
            import commbench.api
            from commbench.results.store import check_output

            if out is not None:
                inputs = (request.from_snapshot, request.from_smi)
                check_output([out], [Path(p) for p in inputs if p is not None])
            snapshot = commbench.api.load_topology(**values(request))
            table = write(Writes.TOPOLOGY, "table", snapshot)
            body = write(Writes.TOPOLOGY, fmt, snapshot)
            if out is not None:
                write_text(out, body)
                typer.echo(table, nl=False)
                say(f"topology written to {out}")
            else:
                typer.echo(body, nl=False)
