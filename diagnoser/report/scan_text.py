"""`scan --format text`: the fleet summary for a person (counts per rule, model, GPU, release; worst logs)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, TextIO

from diagnoser.report.scan_summary import FleetSummary

SHOWN = 15  #: rows per table before "... N more"


def _table(title: str, counter: Counter[str], total: int) -> list[str]:
    out = [title]
    width = max((len(k) for k, _ in counter.most_common(SHOWN)), default=0)
    for key, n in counter.most_common(SHOWN):
        out.append(f"  {key:<{width}}  {n:>6}  {100 * n / max(total, 1):5.1f}%")
    if len(counter) > SHOWN:
        out.append(f"  ... {len(counter) - SHOWN} more")
    return out


def summarize(docs: Iterable[dict[str, Any]], opts: dict[str, Any] | None = None) -> FleetSummary:
    summary = FleetSummary(top=int((opts or {}).get("top") or 10))
    for doc in docs:
        summary.add(doc)
    return summary


def text(s: FleetSummary) -> str:
    st = s.status
    out = [f"vllm-doctor scan: {s.logs:,} log(s): {st['error']:,} with errors, {st['warning']:,} with warnings "
           f"(no error), {st['clean']:,} clean{s.not_vllm_words()}, {st['unreadable']:,} unreadable", ""]
    if s.rules:
        out.append("Findings by rule (logs it fired in)")
        width = max(len(r) for r in s.rules)
        for rule, n in s.rules.most_common():
            out.append(f"  {rule:<{width}}  {s.rule_severity[rule]:<7}  {n:>6}  {s.rule_title[rule]}")
        out.append("")
    for title, _, counter in s.breakdowns():
        if counter:
            out.extend(_table(title, counter, s.readable))
            out.append("")
    if s.worst:
        out.append(f"Worst logs (first finding; {len(s.worst)} shown)")
        for w in s.worst:
            out.append(f"  {w.path}:{w.line}: {w.severity.upper()} [{w.rule}] {w.title} (stage: {w.stage or 'unknown'}"
                       f", {w.errors} error(s))")
        out.append("")
    if s.bad:
        out.append(f"Unreadable ({st['unreadable']:,})")
        out.extend(f"  {message}" for _, message in s.bad)
        if st["unreadable"] > len(s.bad):
            out.append(f"  ... {st['unreadable'] - len(s.bad)} more")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def write(docs: Iterable[dict[str, Any]], out: TextIO, opts: dict[str, Any] | None = None) -> None:
    out.write(text(summarize(docs, opts)))
