"""`commbench topo`: how this machine's GPUs are wired, or a saved/imported topology."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commbench.api import TopologyRequest
from commbench.cli._common import reported_errors, verb_command
from commbench.files import dump_json, write_text
from commbench.flags import OUT, Output
from commbench.options import values

if TYPE_CHECKING:
    from commbench.topology.model import TopologySnapshot


class Format(str, Enum):
    """Output formats: `table` for people, `json` for the snapshot file."""

    table = "table"
    json = "json"


def _json(snapshot: TopologySnapshot) -> str:
    return dump_json(snapshot.to_dict())


def _table(snapshot: TopologySnapshot) -> str:
    from commbench.topology import render

    return render(snapshot)


FORMATS: dict[Format, Callable[[TopologySnapshot], str]] = {
    Format.table: _table,
    Format.json: _json,
}
"""topo's formats, one writer each. Not the shared document writers
(`results.exporters.FORMATS`): the table is the machine's report (host, GPUs, the link
matrix, pairs, NICs, each with its legend), the JSON the snapshot file `--from-snapshot`
reads back."""


def register(app: typer.Typer) -> None:
    @verb_command(
        app,
        "topo",
        TopologyRequest,
        output=Output(
            Format,
            "table (readable) or json (the snapshot). With --out, the file gets this "
            "format and stdout the table.",
        ),
    )
    def topo(
        request: TopologyRequest,
        fmt: Format,
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
            table = _table(snapshot)
            body = FORMATS[fmt](snapshot)
            if out is not None:
                write_text(out, body)
                typer.echo(table, nl=False)
                typer.echo(f"commbench: topology written to {out}", err=True)
            else:
                typer.echo(body, nl=False)
