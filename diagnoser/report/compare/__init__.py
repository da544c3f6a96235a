"""Compare reports: one module per format over one shared model (`compare.Comparison`, rows in `rows.py`).

Each module has `render(comparison, opts) -> str`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

#: --format name -> module in this package
FORMATS = {"text": "text", "json": "json_format", "markdown": "markdown"}


def renderer(name: str) -> Callable[..., str]:
    """The render function of one compare format."""
    return import_module(f"{__name__}.{FORMATS[name]}").render


__all__ = ["FORMATS", "renderer"]
