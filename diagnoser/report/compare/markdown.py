"""`compare --format markdown`: for an issue, a pull request or a chat prompt."""

from __future__ import annotations

from typing import Any

from ... import compare as cmp
from .rows import ESTIMATED_MARK, Row, budget_rows, capital, columns, fix_parts, plain, settings_rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(title: str, rows: list[Row], heads: list[str], nd: int) -> list[str]:
    dheads = ["Δ" if nd == 1 else f"Δ {i + 2}" for i in range(nd)]
    out = ["| " + " | ".join([title, *map(_cell, heads), *dheads]) + " |",
           "|" + "---|" * (1 + len(heads) + nd)]
    for r in rows:
        out.append("| " + " | ".join([r.label, *map(_cell, r.cells), *r.deltas]) + " |")
    return out


def _fixes(fixes: list[cmp.Fix]) -> list[str]:
    out = []
    for f in fixes:
        flag, gives, reason = fix_parts(f)
        out.append(f"- `{flag}`: {gives}. {capital(reason)}.")
    return out


def render(comp: cmp.Comparison, opts: dict[str, Any] | None = None) -> str:
    heads = columns(comp)
    nd = len(comp.starts) - 1
    out = [f"## vllm-doctor compare: {' → '.join(f'`{s.input}`' for s in comp.starts)}", ""]
    out.extend(_table("Start-up budget, per GPU", budget_rows(comp), heads, nd))
    out.append("")
    out.extend(_table("Effective settings", settings_rows(comp), heads, nd))
    out.append("")
    out.append(f"{ESTIMATED_MARK} = not printed by that log (derived, estimated by the planner for that release, "
               "or the other log's GPU).")
    for p in comp.pairs:
        out.append("")
        if len(comp.pairs) > 1:
            out.append(f"### `{p.before.input}` → `{p.after.input}`")
            out.append("")
        out.append(f"**{p.summary}**")
        changed = [c for c in p.changes if c.why]
        if changed:
            out.append("")
            out.append("Settings that changed:")
            out.append("")
            out.extend(f"- `{c.name}`: {plain(c.before)} → {plain(c.after)} ({c.why})" for c in changed)
        if p.fixes:
            out.append("")
            out.append("Fix, computed:")
            out.append("")
            out.extend(_fixes(p.fixes))
        if p.alternatives:
            out.append("")
            out.append("Other ways, with their cost:")
            out.append("")
            out.extend(_fixes(p.alternatives))
        if p.command:
            out.extend(["", "```bash", p.command, "```"])
    last = comp.primary
    out.append("")
    out.append(f"Upgrade gate: **{'FAIL' if last.gate_failed else 'pass'}**"
               + (f": {last.gate_reason}." if last.gate_reason else "."))
    return "\n".join(out) + "\n"
