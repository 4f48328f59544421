"""`commbench collectives` (being written)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("collectives")
    def collectives() -> None:
        """Time every torch.distributed collective across message sizes."""
