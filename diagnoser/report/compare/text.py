"""`compare --format text`: the budgets side by side for a terminal, then what moved and the fix."""

from __future__ import annotations

import textwrap
from typing import Any

from ... import compare as cmp
from .rows import ESTIMATED_MARK, Row, budget_rows, capital, columns, fix_parts, plain, settings_rows

WIDTH = 110


def _table(title: str, rows: list[Row], heads: list[str], ndelta: int) -> list[str]:
    label_w = max([len(title), *(len(r.label) + 2 for r in rows)])
    cols = [max([len(h), *(len(r.cells[i]) for r in rows)]) for i, h in enumerate(heads)]
    dheads = ["delta" if ndelta == 1 else f"delta {i + 2}" for i in range(ndelta)]
    dcols = [max([len(dheads[i]), *(len(r.deltas[i]) for r in rows)]) for i in range(ndelta)]
    out = ["  ".join([title.ljust(label_w), *(h.ljust(w) for h, w in zip(heads, cols, strict=True)),
                      *(h.ljust(w) for h, w in zip(dheads, dcols, strict=True))]).rstrip()]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r.cells, cols, strict=True)]
        deltas = [d.ljust(w) for d, w in zip(r.deltas, dcols, strict=True)]
        out.append("  ".join([("  " + r.label).ljust(label_w), *cells, *deltas]).rstrip())
    return out


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=" " * len(indent) + "  ",
                         break_on_hyphens=False) or [indent]


def _fix_lines(fixes: list[cmp.Fix]) -> list[str]:
    out = []
    for f in fixes:
        flag, gives, reason = fix_parts(f)
        out.extend(_wrap(f"{flag}: {gives}. {capital(reason)}.", "  - "))
    return out


def render_pair(p: cmp.Pair, multi: bool) -> list[str]:
    out: list[str] = []
    if multi:
        out.append(f"{p.before.input} → {p.after.input}")
    out.extend(_wrap(p.summary, ""))
    changed = [c for c in p.changes if c.why]
    if changed:
        out.append("")
        out.append("Settings that changed:")
        for c in changed:
            out.append(f"  - {c.name}: {plain(c.before)} → {plain(c.after)} ({c.why})")
    if p.fixes:
        out.append("")
        out.append(f"Fix, computed for vLLM {'.'.join(map(str, p.after.version))} "
                   "(the flags that give the KV cache back):")
        out.extend(_fix_lines(p.fixes))
    if p.alternatives:
        out.append("")
        out.append("Other ways, with their cost:")
        out.extend(_fix_lines(p.alternatives))
    if p.command:
        out.append("")
        out.append(f"  run: {p.command}")
    return out


def render(comp: cmp.Comparison, opts: dict[str, Any] | None = None) -> str:
    heads = columns(comp)
    nd = len(comp.starts) - 1
    out = [f"vllm-doctor compare: {' → '.join(s.input for s in comp.starts)}", ""]
    out.extend(_table("Start-up budget, per GPU", budget_rows(comp), heads, nd))
    out.append("")
    out.extend(_table("Effective settings", settings_rows(comp), heads, nd))
    out.append(f"({ESTIMATED_MARK} not printed by that log: derived from its other figures, the planner's estimate "
               "for that release, or the other log's GPU)")
    for p in comp.pairs:
        out.append("")
        out.extend(render_pair(p, len(comp.pairs) > 1))
    last = comp.primary
    out.append("")
    if last.gate_failed:
        out.append(f"Upgrade gate: FAIL: {last.gate_reason}.")
    else:
        loss = f"{last.kv_loss:.0%} of the KV tokens lost" if last.kv_loss is not None else "KV loss unknown"
        out.append(f"Upgrade gate: pass ({loss}).")
    return "\n".join(out) + "\n"
