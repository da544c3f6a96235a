"""`--format text`: for a person at a terminal. Colour only on a TTY; NO_COLOR is honoured."""

from __future__ import annotations

import os
import sys
from typing import Any

from diagnoser.analysis.advise import Finding
from diagnoser.analysis.pipeline import Report
from diagnoser.report.model import no_vllm_note, shown_numbers

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


def _finding(f: Finding, index: int, paint: Any, report: Report | None = None) -> list[str]:
    head = f"{paint(f.severity, f.severity.upper())} [{f.rule.id}] {paint('bold', f.title)}"
    where = f"stage: {f.stage or 'unknown'}" + (f" ({f.fine_stage})" if f.fine_stage else "")
    where += f", line {f.line}" + (f"-{f.end_line}" if f.end_line > f.line else "")
    if f.ranks:
        where += f", ranks {', '.join(str(r) for r in f.ranks)}"
    if f.occurrences > 1:
        where += f", seen {f.occurrences} times"
    out = [f"{index}. {head}", f"   {where}"]
    for ln in f.evidence:
        out.append(paint("dim", f"   {ln.number:>6} | {ln.raw[:300]}"))
    shown = shown_numbers(f)
    if shown:
        numbers = ", ".join(f"{label} {_fmt(v)}{unit if unit == '%' else (' ' + unit if unit else '')}"
                            for label, unit, v in shown)
        out.append(f"   numbers: {numbers}")
    out.extend(_sparks(f, report))
    if f.advice:
        out.append("")
        out.extend("   " + line if line else "" for line in f.advice.splitlines())
    if f.command:
        out.append("")
        out.append(f"   run: {f.command}")
        if f.python:
            out.append(f"   python: {f.python}")
    if f.command_notes and f.severity == "error":
        if not f.command:
            out.append("")
        out.extend(f"   note: {n}" for n in f.command_notes)
    return out


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    opts = opts or {}
    color = opts.get("color", use_color())

    def paint(kind: str, text: str) -> str:
        return f"{COLORS[kind]}{text}{COLORS['reset']}" if color else text

    out: list[str] = []
    for r in reports:
        out.append(paint("bold", f"== {r.path} ({r.lines:,} lines)"))
        ctx = r.context.as_dict()
        known = [f"{label}={_fmt(ctx[k])}" for k, label in CONTEXT_KEYS if k in ctx]
        if known:
            out.append("context: " + ", ".join(known))
        if not r.findings and not getattr(r, "vllm_seen", True):
            out.append(no_vllm_note(r))
        elif not r.findings:
            out.append("no problems found" + (" (the server started)" if r.context.server_started
                                              or r.context.engine_ready else ""))
        for i, f in enumerate(r.findings, 1):
            out.append("")
            out.extend(_finding(f, i, paint, r))
        c = r.counts()
        tail = f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} info"
        if r.redactions:
            tail += f"; {sum(r.redactions.values())} secret(s) redacted"
        out.append("")
        out.append(tail)
        out.append("")
    return "\n".join(out).rstrip() + "\n"
