"""`scan --format markdown`: the fleet summary as Markdown tables (an issue, a wiki page, a chat)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, TextIO

from diagnoser.report.markdown import code, code_cell, md_cell, md_text
from diagnoser.report.scan_summary import FleetSummary
from diagnoser.report.scan_text import SHOWN, summarize


def _table(title: str, head: str, counter: Counter[str], total: int) -> list[str]:
    out = [f"### {title}", "", f"| {head} | logs | share |", "|---|---:|---:|"]
    for key, n in counter.most_common(SHOWN):
        out.append(f"| {code_cell(key)} | {n:,} | {100 * n / max(total, 1):.1f}% |")
    if len(counter) > SHOWN:
        out.append(f"| ... {len(counter) - SHOWN} more | | |")
    return [*out, ""]


def markdown(s: FleetSummary) -> str:
    st = s.status
    out = ["## vllm-doctor scan", "",
           f"**{s.logs:,}** log(s): **{st['error']:,}** with errors, {st['warning']:,} with warnings (no error), "
           f"{st['clean']:,} clean{s.not_vllm_words()}, {st['unreadable']:,} unreadable.", ""]
    if s.rules:
        out += ["### Findings by rule", "", "| rule | severity | logs | what |", "|---|---|---:|---|"]
        out += [f"| {code_cell(r)} | {s.rule_severity[r]} | {n:,} | {md_cell(s.rule_title[r])} |"
                for r, n in s.rules.most_common()]
        out.append("")
    for title, head, counter in s.breakdowns():
        out += _table(title, head, counter, s.readable)
    if s.worst:
        out += ["### Worst logs", "", "| log | line | severity | rule | stage | errors |",
                "|---|---:|---|---|---|---:|"]
        out += [f"| {code_cell(w.path)} | {w.line} | {w.severity} | {code_cell(w.rule)} | {w.stage or 'unknown'} "
                f"| {w.errors} |"
                for w in s.worst]
        out.append("")
    if s.bad:
        out += ["### Unreadable", ""] + [f"- {code(p)}: {md_text(m)}" for p, m in s.bad]
        if st["unreadable"] > len(s.bad):
            out.append(f"- ... {st['unreadable'] - len(s.bad)} more")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def write(docs: Iterable[dict[str, Any]], out: TextIO, opts: dict[str, Any] | None = None) -> None:
    out.write(markdown(summarize(docs, opts)))
