"""`scan --format html`: the fleet summary (scan_summary.py) as the serving report's page (html.py).

The logs by outcome as one bar, then the counts per rule, model, GPU and release with a share bar each,
the worst logs with their first finding, and the files that could not be read. Built from the bounded
summary, so the page's size does not grow with the number of logs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, TextIO

from diagnoser.report import html as h
from diagnoser.report.sanitize import clean_output, no_commands
from diagnoser.report.scan_summary import FleetSummary
from diagnoser.report.scan_text import SHOWN, summarize

#: outcome -> (label, colour variable), in bar order
OUTCOMES = (("error", "with errors", "--err"), ("warning", "with warnings (no error)", "--warn"),
            ("clean", "clean", "--c3"), ("not-vllm", "not vLLM logs", "--c5"), ("unreadable", "unreadable", "--mut"))


def _counts(title: str, head: str, counter: Counter[str], total: int) -> str:
    top = counter.most_common(SHOWN)
    rows = [[key, f"{n:,}", f"{100 * n / max(total, 1):.1f}%"] for key, n in top]
    if len(counter) > SHOWN:
        rows.append([f"... {len(counter) - SHOWN} more", "", ""])
    meters = [n / max(total, 1) for _, n in top] + ([0.0] if len(counter) > SHOWN else [])
    return (f'<h2>{h.esc(title)}</h2><div class="card wrap">'
            f'{h.grid([head, "logs", "share"], rows, cls=f"counts by-{head.lower()}", meters=meters)}</div>')


def _rules(s: FleetSummary) -> str:
    rows = [[r, s.rule_severity[r], f"{n:,}", f"{100 * n / max(s.readable, 1):.1f}%", s.rule_title[r]]
            for r, n in s.rules.most_common()]
    meters = [n / max(s.readable, 1) for _, n in s.rules.most_common()]
    return ('<h2>Findings by rule (logs it fired in)</h2><div class="card wrap">'
            f'{h.grid(["rule", "severity", "logs", "share", "what"], rows, cls="rules", meters=meters)}</div>')


def _bad(path: str, message: str) -> str:
    """A file the scan could not read: its path, then what went wrong (the message names the path once)."""
    rest = message[len(path):].lstrip(": ") if message.startswith(path) else message
    return f"<li><code>{h.esc(path)}</code>: {h.esc(rest)}</li>"


def html(s: FleetSummary) -> str:
    st = s.status
    parts: list[h.Segment] = [(label, float(st[key]), colour, False) for key, label, colour in OUTCOMES if st[key]]
    words = ", ".join(s.not_vllm_words("") if key == "not-vllm" else f"{st[key]:,} {label}"
                      for key, label, _ in OUTCOMES if key != "not-vllm" or st[key])
    sev = "error" if st["error"] else "warning" if st["warning"] or st["unreadable"] else "info"
    bar = h.stacked_bar(parts, float(s.logs), "outcomes", f"{s.logs:,} logs by outcome", unit="logs", digits=0)
    out = [f"<h1>vllm-doctor scan: {s.logs:,} log(s)</h1>",
           f'<section class="card verdict {sev}" id="verdict"><h2 style="border:0;margin:.2em 0">{h.esc(words)}</h2>'
           f"{bar}</section>"]
    if s.rules:
        out.append(_rules(s))
    out.extend(_counts(title, head, counter, s.readable) for title, head, counter in s.breakdowns() if counter)
    if s.worst:
        out.append(f"<h2>Worst logs (first finding; {len(s.worst)} shown)</h2>")
        out.extend('<div class="card finding worst">'
                   + h.finding_head(w.severity, w.rule, w.title,
                                    f"{w.path}:{w.line}, stage {w.stage or 'unknown'}, {w.errors} error(s)")
                   + "</div>" for w in s.worst)
    if s.bad:
        more = st["unreadable"] - len(s.bad)
        out.append(f'<h2>Unreadable ({st["unreadable"]:,})</h2><div class="card"><ul class="bad">'
                   + "".join(_bad(p, m) for p, m in s.bad)
                   + (f"<li>... {more:,} more</li>" if more > 0 else "") + "</ul></div>")
    return h.page(f"scan of {s.logs:,} logs", "\n".join(out))


def write(docs: Iterable[dict[str, Any]], out: TextIO, opts: dict[str, Any] | None = None) -> None:
    out.write(no_commands(clean_output(html(summarize(docs, opts)))))
