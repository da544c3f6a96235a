"""`--format text`: for a person at a terminal. Colour only on a TTY; NO_COLOR is honoured."""

from __future__ import annotations

import os
import sys
import textwrap
from typing import Any

from diagnoser.analysis.advise import Finding
from diagnoser.analysis.contract import no_vllm_note
from diagnoser.analysis.pipeline import Report
from diagnoser.report.model import shown_numbers

COLORS = {"error": "\x1b[1;31m", "warning": "\x1b[1;33m", "info": "\x1b[1;36m", "dim": "\x1b[2m",
          "bold": "\x1b[1m", "reset": "\x1b[0m"}
CONTEXT_KEYS = (
    ("version", "vLLM"), ("engine", "engine"), ("model", "model"), ("gpu_name", "GPU"),
    ("gpu_total_gib", "GPU GiB"), ("gpu_memory_utilization", "utilization"), ("max_model_len", "max_model_len"),
    ("tensor_parallel_size", "TP"), ("dtype", "dtype"), ("kv_cache_dtype", "kv_cache_dtype"),
    ("quantization", "quantization"), ("weights_gib", "weights GiB"),
    ("available_kv_cache_gib", "KV cache GiB"), ("kv_cache_tokens", "KV tokens"),
    ("max_concurrency", "max concurrency"),
)


def use_color(stream: Any = None) -> bool:
    """Colour when writing to a terminal, unless NO_COLOR is set (any value)."""
    if "NO_COLOR" in os.environ:
        return False
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


#: without a terminal (a pipe, a file) a log line is cut here; with one, at the terminal's width
EVIDENCE_CHARS = 300
#: a text fact longer than this is prose (a whole log line): the advice quotes it, the numbers line does not
NUMBER_TEXT_CHARS = 60


def text_width(opts: dict[str, Any], stream: Any = None) -> int | None:
    """The columns to fit: opts['width'] (0: none, as in a CI log), else $COLUMNS, else the terminal's width;
    None in a pipe or a file."""
    if "width" in opts:
        return int(opts["width"]) or None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) >= 40:
        return int(columns)
    stream = stream or sys.stdout
    try:
        if getattr(stream, "isatty", lambda: False)():
            return max(os.get_terminal_size(stream.fileno()).columns, 40)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: cut at a word boundary, with an ellipsis when something was cut.

    >>> clip("CUDA out of memory. Tried to allocate", 24)
    'CUDA out of memory. …'
    >>> clip("short", 24)
    'short'
    """
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space + 1]
    return cut + "…"


def _evidence_text(line: Any, limit: int) -> str:
    """The raw line when it fits; else, when its prefixes (process, level, time, file) would take a third of the
    room, the message alone: in a narrow terminal the message is what tells the failure."""
    raw, text = line.raw, line.text
    if len(raw) > limit and text and raw.endswith(text) and len(raw) - len(text) > limit // 3:
        return text
    return str(raw)


def vllm_size(gib: float) -> str:
    """A size as PyTorch and vLLM print it: MiB below 1 GiB, two decimals.

    >>> vllm_size(0.01953)
    '20.00 MiB'
    >>> vllm_size(23.67)
    '23.67 GiB'
    """
    if abs(gib) < 1:
        return f"{gib * 1024:.2f} MiB"
    return f"{_fmt(gib)} GiB"


def number_items(f: Finding) -> list[str]:
    """The numbers line's items: 'tried to allocate 20.00 MiB', 'kv usage 99.7%'; prose facts left out."""
    items = []
    for label, unit, v in shown_numbers(f):
        if isinstance(v, str) and len(v) > NUMBER_TEXT_CHARS:
            continue
        if unit == "GiB" and isinstance(v, (int, float)) and not isinstance(v, bool):
            items.append(f"{label} {vllm_size(float(v))}")
        else:
            items.append(f"{label} {_fmt(v)}{unit if unit == '%' else (' ' + unit if unit else '')}")
    return items


def _wrap(text: str, width: int | None, indent: str = "   ") -> list[str]:
    """One line of text at `indent`, wrapped at words to `width` (a bullet's lines hang under its text)."""
    if not text:
        return [""]
    if width is None:
        return [indent + text]
    hang = indent + ("  " if text.startswith(("- ", "* ")) else "")
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=hang,
                         break_long_words=False, break_on_hyphens=False) or [indent]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60


def sparkline(values: list[float], top: float | None = None) -> str:
    """Values as one line of block characters, resampled to SPARK_WIDTH (the max of each slot).

    >>> sparkline([0, 50, 100], top=100)
    '▁▅█'
    """
    if not values:
        return ""
    if len(values) > SPARK_WIDTH:
        n = len(values)
        values = [max(values[i * n // SPARK_WIDTH:max((i + 1) * n // SPARK_WIDTH, i * n // SPARK_WIDTH + 1)])
                  for i in range(SPARK_WIDTH)]
    top = top or max(values) or 1.0
    return "".join(SPARKS[min(int(v / top * (len(SPARKS) - 1) + 0.5), len(SPARKS) - 1)] for v in values)


def _sparks(f: Finding, report: Report | None) -> list[str]:
    """KV % and waiting over the whole serving time, for a finding with windows."""
    if report is None or report.series is None or not f.facts.get("windows"):
        return []
    s = report.series
    engine = str(f.facts["windows"][0].get("engine", "0"))
    track = s.tracks.get(engine) or next(iter(s.tracks.values()))
    out = []
    for name, label, top in (("kv_pct", "KV %   ", 100.0), ("waiting", "waiting", None)):
        vals = [b["f"][name][1] for b in track.buckets.items if name in b["f"]]
        if vals:
            out.append(f"   {label} {sparkline(vals, top)} max {_fmt(max(vals))}")
    if out and track.first_t is not None and track.last_t is not None:
        out.append(f"           {s.clock.label(track.first_t)} .. {s.clock.label(track.last_t)}")
    return out


def _finding(f: Finding, index: int, paint: Any, report: Report | None = None, width: int | None = None) -> list[str]:
    """One finding's block; `index` 0 marks context (the start-up figures): shown, never numbered or counted."""
    label = "CONTEXT" if f.rule.context else f.severity.upper()
    head = f"{paint(f.severity, label)} [{f.rule.id}] {paint('bold', f.title)}"
    where = f"stage: {f.stage or 'unknown'}" + (f" ({f.fine_stage})" if f.fine_stage else "")
    where += f", line {f.line}" + (f"-{f.end_line}" if f.end_line > f.line else "")
    if f.ranks:
        where += f", ranks {', '.join(str(r) for r in f.ranks)}"
    if f.occurrences > 1:
        where += f", seen {f.occurrences} times"
    out = [f"{index}. {head}" if index else head, *_wrap(where, width)]
    for ln in sorted(f.evidence, key=lambda line: line.number):
        prefix = f"   {ln.number:>6} | "
        limit = EVIDENCE_CHARS if width is None else max(width - len(prefix), 20)
        out.append(paint("dim", prefix + clip(_evidence_text(ln, limit), limit)))
    numbers = number_items(f)
    if numbers:
        out.extend(_wrap("numbers: " + ", ".join(numbers), width))
    out.extend(_sparks(f, report))
    if f.advice:
        out.append("")
        for line in f.advice.splitlines():
            out.extend(_wrap(line, width))
    if f.command:
        diagnostic = bool(f.fixes) and all(x.get("diagnostic") for x in f.fixes if x.get("flag") or x.get("env"))
        out.append("")
        out.append(f"   {'diagnostic run' if diagnostic else 'run'}: {f.command}")
        if f.python:
            out.append(f"   python: {f.python}")
    if f.command_notes and f.severity == "error":
        if not f.command:
            out.append("")
        for n in f.command_notes:
            out.extend(_wrap(f"note: {n}", width))
    return out


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    opts = opts or {}
    color = opts.get("color", use_color())

    def paint(kind: str, text: str) -> str:
        return f"{COLORS[kind]}{text}{COLORS['reset']}" if color else text

    width = text_width(opts)
    out: list[str] = []
    for r in reports:
        out.append(paint("bold", f"== {r.path} ({r.lines:,} lines)"))
        ctx = r.context.as_dict()
        known = [f"{label}={_fmt(ctx[k])}" for k, label in CONTEXT_KEYS if k in ctx]
        if known:
            out.extend(_wrap("context: " + ", ".join(known), width, indent=""))
        problems = [f for f in r.findings if not f.rule.context]
        if not r.findings and not getattr(r, "vllm_seen", True):
            out.append(no_vllm_note(r))
        elif not problems:
            out.append("no problems found" + (" (the server started)" if r.context.server_started
                                              or r.context.engine_ready else ""))
        for i, f in enumerate(problems, 1):
            out.append("")
            out.extend(_finding(f, i, paint, r, width))
        for f in r.findings:
            if f.rule.context:
                out.append("")
                out.extend(_finding(f, 0, paint, r, width))
        c = r.counts()
        tail = f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} info"
        if r.redactions:
            tail += f"; {sum(r.redactions.values())} secret(s) redacted"
        out.append("")
        out.append(tail)
        out.append("")
    return "\n".join(out).rstrip() + "\n"
