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
}

Renderer = Callable[..., str]


def renderer(name: str) -> Renderer:
    """The render function of one format."""
    return import_module(f"{__name__}.{FORMATS[name]}").render


__all__ = ["FORMATS", "Report", "renderer"]
