"""Report: one module per output format, each `render(reports, options) -> str`.

`renderer(name)` is the one way to a format: it hands the format a sanitized copy of the reports (every
string escaped, see diagnoser/report/sanitize.py) and defuses GitHub workflow-command lines in every format but
`github`, so no format needs its own escaping of control characters.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnoser.analysis.pipeline import Report

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
    "html": "scan_html",
}

Renderer = Callable[..., str]


def renderer(name: str) -> Renderer:
    """The render function of one format, over sanitized reports, its output checked once more."""
    from diagnoser.report.sanitize import clean_output, no_commands, no_legacy_commands, sanitized

    render = import_module(f"{__name__}.{FORMATS[name]}").render

    def safe_render(reports: list[Report], opts: dict | None = None) -> str:
        text = clean_output(render([sanitized(r) for r in reports], opts))
        return no_legacy_commands(text) if name == "github" else no_commands(text)

    return safe_render


def scan_writer(name: str) -> Callable[..., None]:
    """The write function of one scan format, over sanitized documents (as `renderer` gives its formats), so
    `-o FILE` is as inert as stdout."""
    from diagnoser.report.sanitize import OutputFilter, sanitized

    write = import_module(f"{__name__}.{SCAN_FORMATS[name]}").write

    def safe_write(docs: Any, out: Any, opts: dict | None = None) -> None:
        lines = OutputFilter(out, None)  # line by line: no workflow command in an -o file either
        write((sanitized(doc) for doc in docs), lines, opts)
        lines.flush()

    return safe_write


def __getattr__(name: str) -> Any:
    """`Report` without importing the pipeline when only FORMATS is wanted (the CLI's --help)."""
    if name == "Report":
        from diagnoser.analysis.pipeline import Report

        return Report
    raise AttributeError(name)


__all__ = ["FORMATS", "SCAN_FORMATS", "Report", "renderer", "scan_writer"]
