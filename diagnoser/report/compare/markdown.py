"""`compare --format markdown`: for an issue, a pull request or a chat prompt."""

from __future__ import annotations

from typing import Any

from diagnoser.compare import model as cmp
from diagnoser.report.compare.rows import ESTIMATED_MARK, Row, columns, gate, pair_sections, tables


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(title: str, rows: list[Row], heads: list[str], nd: int) -> list[str]:
    dheads = ["Δ" if nd == 1 else f"Δ {i + 2}" for i in range(nd)]
    out = ["| " + " | ".join([title, *map(_cell, heads), *dheads]) + " |",
           "|" + "---|" * (1 + len(heads) + nd)]
    for r in rows:
        out.append("| " + " | ".join([r.label, *map(_cell, r.cells), *r.deltas]) + " |")
    return out


def render(comp: cmp.Comparison, opts: dict[str, Any] | None = None) -> str:
    heads = columns(comp)
    nd = len(comp.starts) - 1
    out = [f"## vllm-doctor compare: {' → '.join(f'`{s.label}`' for s in comp.starts)}", ""]
    for title, rows in tables(comp):
        out.extend([*_table(title, rows, heads, nd), ""])
    out.append(f"{ESTIMATED_MARK} = not printed by that log (derived, estimated by the planner for that release, "
               "or the other log's GPU).")
    for p in comp.pairs:
        out.append("")
        if len(comp.pairs) > 1:
            out.append(f"### `{p.before.label}` → `{p.after.label}`")
            out.append("")
        out.append(f"**{p.summary}**")
        for title, items in pair_sections(p):
            out.extend(["", f"{title}:", ""])
            out.extend(f"- `{i.code}`: {i.stress}{i.rest}" for i in items)
        if p.command:
            out.extend(["", "```bash", p.command, "```"])
    verdict, why = gate(comp.primary)
    out.extend(["", f"Upgrade gate: **{verdict}**{why}"])
    return "\n".join(out) + "\n"
