"""Choices of `commbench report`, apart from the report code so `--help` imports nothing heavy."""

from __future__ import annotations

from enum import Enum


class ReportFormat(str, Enum):
    md = "md"
    html = "html"


class Images(str, Enum):
    embed = "embed"
    """PNG data URIs in the document (self-contained)."""
    files = "files"
    """PNG files in a directory beside the document (`<stem>_files/`), linked relatively: a
    markdown file stays small and readable, and renders with its plots where it is viewed."""
    none = "none"
    """Tables only: for places that strip data URIs (GitHub step summaries)."""
