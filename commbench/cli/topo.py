"""`commbench topo`: how this machine's GPUs are wired, or a saved/imported topology."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from commbench.cli._common import reported_errors
from commbench.files import dump_json, write_text


class Format(str, Enum):
    """Output formats: `table` for people, `json` for the snapshot file."""

    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    @app.command("topo")
    def topo(
        fmt: Format = typer.Option(
            Format.table,
            "--format",
            "-f",
            help="table (readable) or json (the snapshot). With --out, the file gets this "
            "format and stdout the table.",
        ),
        from_snapshot: Path | None = typer.Option(
            None,
            "--from",
            metavar="SNAPSHOT.json",
            help="Analyse a snapshot saved with --format json (or a run.json) instead of "
            "this machine.",
        ),
        from_smi: Path | None = typer.Option(
            None,
            "--from-smi",
            metavar="TOPO.txt",
            help="Analyse the text `nvidia-smi topo -m` printed on another machine "
            "(- reads it from stdin).",
        ),
        gpu: str | None = typer.Option(
            None,
            "--gpu",
            metavar="MODEL",
            help="With --from-smi: the GPU model as nvidia-smi names it "
            '("Tesla V100-SXM2-16GB"), for its datasheet link rates; without it rates are '
            "assumed conservatively (PCIe Gen3 x16, oldest NVLink generation).",
        ),
        all_nics: bool = typer.Option(
            False,
            "--all-nics",
            help="Also list virtual network interfaces (lo, veth, bridges, tun).",
        ),
        out: Path | None = typer.Option(
            None,
            "--out",
            "-o",
            metavar="FILE",
            help="Also write the output (per --format) to FILE; the table still goes to stdout.",
        ),
    ) -> None:
        """Show how this machine's GPUs are wired (NVLink, PCIe, P2P, peak bandwidth)."""
        with reported_errors():
            import commbench.api
            from commbench.results.store import check_output
            from commbench.topology import render

            if out is not None:
                check_output([out], [p for p in (from_snapshot, from_smi) if p is not None])
            snapshot = commbench.api.load_topology(
                from_snapshot, from_smi=from_smi, gpu=gpu, all_nics=all_nics
            )
            table = render(snapshot)
            body = dump_json(snapshot.to_dict()) if fmt is Format.json else table
            if out is not None:
                write_text(out, body)
                typer.echo(table, nl=False)
                typer.echo(f"commbench: topology written to {out}", err=True)
            else:
                typer.echo(body, nl=False)
