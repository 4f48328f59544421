"""`commbench topo` (placeholder until the topology module lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("topo")
    def topo() -> None:
        """Show how this machine's GPUs are wired (NVLink, PCIe, P2P, peak bandwidth)."""
        typer.echo("topology: not implemented yet")
