"""Choices of `commbench report` and `export`, apart from the report code so `--help` imports
nothing heavy. Their formats are the registry's (`commbench.formats.FORMATS`): those that
write a report page, and those that write an export."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from commbench.formats import Choice, Writes, choices

if TYPE_CHECKING:
    ReportFormat = Choice
    ExportFormat = Choice
else:
    ReportFormat = choices(Writes.REPORT, "ReportFormat")
    ExportFormat = choices(Writes.EXPORT, "ExportFormat")


class Images(str, Enum):
    embed = "embed"
    """PNG data URIs in the document (self-contained)."""
    files = "files"
    """PNG files in a directory beside the document (`<stem>_files/`), linked relatively: a
    markdown file stays small and readable, and renders with its plots where it is viewed."""
    none = "none"
    """Tables only: for places that strip data URIs (GitHub step summaries)."""
