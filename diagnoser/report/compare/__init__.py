"""Compare reports: one module per format over one shared model (`compare.Comparison`, rows in `rows.py`).

Each module has `render(comparison, opts) -> str`; `renderer` checks its output as the report package does
(no terminal escape, no workflow command), whether it goes to stdout or to `-o FILE`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

#: --format name -> module in this package
FORMATS = {"text": "text", "json": "json_format", "markdown": "markdown", "html": "html"}


def renderer(name: str) -> Callable[..., str]:
    """The render function of one compare format, its output made inert."""
    from diagnoser.report.sanitize import clean_output, no_commands

    render = import_module(f"{__name__}.{FORMATS[name]}").render

    def safe_render(comp: Any, opts: dict[str, Any] | None = None) -> str:
        return no_commands(clean_output(render(comp, opts)))

    return safe_render


__all__ = ["FORMATS", "renderer"]
