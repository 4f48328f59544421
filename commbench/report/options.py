"""Choices of `commbench report`, apart from the report code so `--help` imports nothing heavy."""

from __future__ import annotations

from enum import Enum


class ReportFormat(str, Enum):
    md = "md"
    html = "html"


class Images(str, Enum):
    embed = "embed"
    """PNG data URIs in the document (self-contained)."""
    none = "none"
    """Tables only: for places that strip data URIs (GitHub step summaries)."""
