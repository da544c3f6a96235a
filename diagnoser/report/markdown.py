"""`--format markdown`: a compact report to paste into a GitHub issue or an LLM prompt.

Per input: the environment (vLLM version, GPU, model, key flags), then each finding with its numbers, advice
and corrected command, and a few evidence lines in a fence. It is made to fit: at most MAX_FINDINGS
findings, MAX_EVIDENCE evidence lines each, lines cut at MAX_LINE_CHARS, lines that differ only in their
numbers collapsed, and every cut says what was left out. Fences are longer than any run of backticks in the
text they hold, so log lines cannot close them; log-derived values elsewhere are inline code, and prose that
can hold log-derived text (titles, advice, notes) goes through md_text(): no HTML tag, link, image or autolink
can come out of a log.
"""

from __future__ import annotations

import json
import re
from typing import Any

from diagnoser.analysis.contract import finding_dict, report_dict
from diagnoser.analysis.pipeline import Report
from diagnoser.lazyre import lazy
from diagnoser.report.model import shown_numbers
from diagnoser.report.text import CONTEXT_KEYS, _fmt

MAX_FINDINGS = 20
MAX_EVIDENCE = 8
MAX_LINE_CHARS = 500
MAX_FLAGS = 16
MAX_VALUE_CHARS = 80
SEVERITY_LABEL = {"error": "Error", "warning": "Warning", "info": "Info"}
#: Context keys already shown in the environment line (the flags line shows the other settings).
#: More settings than this: a full `Namespace(...)` dump (defaults included), not `non-default args`.
FULL_DUMP = 30
#: The settings worth showing from a full dump (when not None/False).
KEY_FLAGS = ("max_num_seqs", "max_num_batched_tokens", "pipeline_parallel_size", "data_parallel_size",
             "enforce_eager", "enable_prefix_caching", "enable_chunked_prefill", "block_size", "swap_space",
             "cpu_offload_gb", "speculative_model", "speculative_config", "num_speculative_tokens", "enable_lora",
             "max_lora_rank", "trust_remote_code", "load_format", "distributed_executor_backend",
             "served_model_name", "api_key", "hf_token", "rope_scaling", "max_seq_len_to_capture",
             "num_scheduler_steps", "compilation_config")
_SHOWN = {"model", "model_tag", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "dtype",
          "kv_cache_dtype", "quantization"}


def _longest_run(text: str, char: str) -> int:
    runs = re.findall(re.escape(char) + "+", text)
    return max((len(r) for r in runs), default=0)


def fence(body: str, info: str = "text") -> str:
    """A fenced block that the body cannot close: one backtick more than its longest run (at least 3)."""
    ticks = "`" * max(3, _longest_run(body, "`") + 1)
    return f"{ticks}{info}\n{body}\n{ticks}"


def code(value: Any) -> str:
    """Inline code that survives backticks in the value."""
    s = " ".join(str(value).split())
    ticks = "`" * (_longest_run(s, "`") + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


#: what GitHub's Markdown turns into a link on its own (GFM autolinks), and schemes a link may run
_URL = lazy(r"(?i)\b(?:https?|ftp|javascript|vbscript|data|file|mailto):\S*|\bwww\.\S+")
#: characters that start HTML, links, images or code spans (and the escape itself): escaped with a backslash
#: (emphasis is left alone: it changes how text looks, never what it does)
_MD_SPECIAL = lazy(r"([\\`\[\]<])")
_MD_SPECIAL_BUT_TICKS = lazy(r"([\\\[\]<])")


def md_text(text: str) -> str:
    """Prose that may carry text from a log, as Markdown that shows it and does nothing else: URLs become code
    spans (no autolink), and every character that could start HTML, a link or an image is escaped, and backticks
    too unless they pair up on a line without a URL (then they only make code spans). Line breaks and `- ` list
    items stay.

    >>> print(md_text("see <b> [a](https://e.x) and https://e.x/p"))
    see \\<b> \\[a\\](`https://e.x)` and `https://e.x/p`
    """
    urls = list(_URL.finditer(text))
    # backticks in pairs, on a line with no URL, only make code spans (inert text): the advice's own `flags` stay
    special = _MD_SPECIAL if urls or text.count("`") % 2 else _MD_SPECIAL_BUT_TICKS
    out, pos = [], 0
    for m in urls:
        out += [special.sub(r"\\\1", text[pos:m.start()]), code(m.group(0))]
        pos = m.end()
    out.append(special.sub(r"\\\1", text[pos:]))
    return "".join(out)


def md_cell(value: Any) -> str:
    """A table cell of prose: md_text on one line, `|` escaped (inside code spans too, as GFM tables need)."""
    return md_text(" ".join(str(value).split())).replace("|", "\\|")


def code_cell(value: Any) -> str:
    """A table cell of inline code (a path, a model name): `|` escaped even inside the span, as GFM tables need."""
    return code(value).replace("|", "\\|")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, (int, float)):
        return _fmt(value)
    text = _fmt(value) if isinstance(value, list) else str(value)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return code(text)


def _environment(ctx: dict[str, Any]) -> list[str]:
    parts = [f"{label} {_value(ctx[key])}" for key, label in CONTEXT_KEYS if key in ctx]
    out = []
    if parts:
        out.append("**Environment:** " + " · ".join(parts))
    args = {k: v for k, v in (ctx.get("args") or {}).items() if k not in _SHOWN and v is not None}
    if len(args) > FULL_DUMP:  # an old `Namespace(...)` dump lists every setting: keep the ones that matter
        args = {k: v for k, v in args.items() if k in KEY_FLAGS and v is not False and v not in ("", [], {})}
    if args:
        shown = list(args.items())[:MAX_FLAGS]
        flags = " ".join(code(f"--{k.replace('_', '-')}" + ("" if v is True else f" {_plain(v)}"))
                         for k, v in shown)
        more = f" ({len(args) - len(shown)} more left out)" if len(args) > len(shown) else ""
        out.append(f"**Flags:** {flags}{more}")
    status = ("the API server started" if ctx.get("server_started")
              else "the engine was ready" if ctx.get("engine_ready") else None)
    if status:
        out.append(f"**Status:** {status}.")
    return out


def _plain(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


_NUMBERS = lazy(r"\d+(?:[.,]\d+)*")


def evidence_block(evidence: list[dict[str, Any]], limit: int = MAX_EVIDENCE) -> tuple[str, list[str]]:
    """The fenced evidence and the notes on what was left out (repeats collapsed, lines cut, lines capped)."""
    from diagnoser.ingest.line import parse_line

    groups: list[list[dict[str, Any]]] = []
    index: dict[str, int] = {}
    for ev in evidence:
        key = _NUMBERS.sub("#", parse_line(0, ev["text"]).text.strip())
        if key in index:
            groups[index[key]].append(ev)
        else:
            index[key] = len(groups)
            groups.append([ev])
    width = max((len(str(ev["line"])) for ev in evidence), default=1)
    lines, cut_chars = [], 0
    for group in groups[:limit]:
        ev = group[0]
        body = ev["text"]
        if len(body) > MAX_LINE_CHARS:
            cut_chars += len(body) - MAX_LINE_CHARS
            body = body[:MAX_LINE_CHARS] + " …"
        suffix = f"   [+{_plural(len(group) - 1, 'similar line')}]" if len(group) > 1 else ""
        lines.append(f"{ev['line']:>{width}} | {body}{suffix}")
    notes = []
    if len(groups) > limit:
        notes.append(f"{len(groups) - limit} more lines left out")
    if cut_chars:
        notes.append(f"{cut_chars:,} characters of long lines left out")
    return fence("\n".join(lines)), notes


def advice_markdown(advice: str) -> str:
    """Advice keeps its line breaks: each sentence line its own paragraph, `- ` lines a list; the rest is text
    (md_text: a fact from the log cannot become HTML or a link)."""
    out: list[str] = []
    for line in advice.splitlines():
        item = line.lstrip().startswith(("- ", "* "))
        if out and out[-1] and not item:
            out.append("")
        out.append(md_text(line))
    return "\n".join(out)


def _finding(fd: dict[str, Any], number: int, level: str) -> list[str]:
    label = SEVERITY_LABEL.get(fd["severity"], fd["severity"])
    out = [f"{level} {number}. {label}: {md_text(fd['title'])} ({code(fd['rule'])})", ""]
    where = [f"stage {code(fd['stage'] or 'unknown')}" + (f" ({code(fd['fine_stage'])})" if fd["fine_stage"]
                                                            else "")]
    where.append(f"log line {fd['line']}" + (f"–{fd['end_line']}" if fd["end_line"] > fd["line"] else ""))
    if fd["ranks"]:
        where.append("ranks " + ", ".join(str(r) for r in fd["ranks"]))
    if fd["occurrences"] > 1:
        where.append(f"seen {fd['occurrences']} times")
    out.append("*" + " · ".join(where) + "*")
    if fd.get("numbers"):
        shown = (f"{md_text(label)} {_value(v)}{unit if unit == '%' else (' ' + md_text(unit) if unit else '')}"
                 for label, unit, v in fd["numbers"])
        out += ["", "**Numbers:** " + " · ".join(shown)]
    if fd["advice"]:
        out += ["", advice_markdown(fd["advice"])]
    if fd["command"]:
        out += ["", "**Run:**", "", fence(fd["command"], "sh")]
    if fd.get("command_notes"):
        out += ["", *(f"- {md_text(n)}" for n in fd["command_notes"])]
    if fd["evidence"]:
        block, notes = evidence_block(fd["evidence"])
        out += ["", "**Evidence:**", "", block]
        if notes:
            out += ["", "*" + md_text("; ".join(notes)) + ".*"]
    out.append("")
    return out


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    opts = opts or {}
    top = "#" * int(opts.get("heading_level", 1))
    sub = top + "#"
    out: list[str] = []
    for r in reports:
        doc = report_dict(r)
        c = doc["summary"]
        counts = ", ".join([_plural(c["error"], "error"), _plural(c["warning"], "warning"), f"{c['info']} info"])
        out += [f"{top} vllm-doctor: {code(r.path)} — {counts}", ""]
        out += [f"*{doc['tool']['name']} {doc['tool']['version']}, {r.lines:,} log lines read.*", ""]
        env = _environment(doc["context"])
        if env:
            out += ["  \n".join(env), ""]
        red = doc["redactions"]
        if red["total"]:
            kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(red["by_kind"].items()))
            out += [f"*{_plural(red['total'], 'secret')} redacted ({kinds}).*", ""]
        if not r.findings and doc.get("notes"):
            out += [md_text(doc["notes"][0].capitalize()) + ".", ""]
        elif not r.findings:
            out += ["No problems found.", ""]
        for i, f in enumerate(r.findings[:MAX_FINDINGS], 1):
            out += _finding({**finding_dict(f), "numbers": shown_numbers(f)}, i, sub)
        if len(r.findings) > MAX_FINDINGS:
            left = len(r.findings) - MAX_FINDINGS
            out += [f"*{_plural(left, 'more finding')} left out (`--format json` lists them all).*", ""]
    return "\n".join(out).rstrip() + "\n"
