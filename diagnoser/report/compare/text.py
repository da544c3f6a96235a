"""`compare --format text`: the budgets side by side for a terminal, then what moved and the fix."""

from __future__ import annotations

import textwrap
from typing import Any

from diagnoser.compare import model as cmp
from diagnoser.report.compare.rows import ESTIMATED_MARK, Row, columns, gate, pair_sections, tables

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


def render_pair(p: cmp.Pair, multi: bool) -> list[str]:
    out: list[str] = []
    if multi:
        out.append(f"{p.before.label} → {p.after.label}")
    out.extend(_wrap(p.summary, ""))
    for title, items in pair_sections(p):
        out.extend(["", f"{title}:"])
        for i in items:
            out.extend(_wrap(f"{i.code}: {i.stress}{i.rest}", "  - "))
    if p.command:
        out.append("")
        out.append(f"  run: {p.command}")
    return out


def render(comp: cmp.Comparison, opts: dict[str, Any] | None = None) -> str:
    heads = columns(comp)
    nd = len(comp.starts) - 1
    out = [f"vllm-doctor compare: {' → '.join(s.label for s in comp.starts)}", ""]
    for i, (title, rows) in enumerate(tables(comp)):
        out.extend([""] * (i > 0) + _table(title, rows, heads, nd))
    out.append(f"({ESTIMATED_MARK} not printed by that log: derived from its other figures, the planner's estimate "
               "for that release, or the other log's GPU)")
    for p in comp.pairs:
        out.append("")
        out.extend(render_pair(p, len(comp.pairs) > 1))
    verdict, why = gate(comp.primary)
    out.extend(["", f"Upgrade gate: {verdict}{why}"])
    return "\n".join(out) + "\n"
