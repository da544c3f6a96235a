"""Report: one module per output format, each `render(reports, options) -> str`."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from ..engine import Report

#: --format name -> module in this package. Each module has render(reports, opts) -> str.
FORMATS = {
    "text": "text",
    "json": "json_format",
    "jsonl": "jsonl",
    "sarif": "sarif",
    "github": "github",
    "markdown": "markdown",
    "otel": "otel",
    "html": "html",
}

#: `scan --format` name -> module in this package. Each has write(docs, out, opts): it streams the scan's
#: documents (one per log, the JSON contract or an error document) to a text stream.
SCAN_FORMATS = {
    "text": "scan_text",
    "jsonl": "scan_jsonl",
    "markdown": "scan_markdown",
    "csv": "scan_csv",
    "otel": "otel",
}

Renderer = Callable[..., str]


def renderer(name: str) -> Renderer:
    """The render function of one format."""
    return import_module(f"{__name__}.{FORMATS[name]}").render


def scan_writer(name: str) -> Callable[..., None]:
    """The write function of one scan format."""
    return import_module(f"{__name__}.{SCAN_FORMATS[name]}").write  # type: ignore[no-any-return]


__all__ = ["FORMATS", "SCAN_FORMATS", "Report", "renderer", "scan_writer"]
