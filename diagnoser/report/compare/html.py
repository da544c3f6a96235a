"""`compare --format html`: the serving report's page (report/html.py) for two starts or more.

Order: the upgrade gate and the sentence naming what moved, the starts' budget bars on one GiB scale (so a
segment that grew is visibly longer), the changes table with deltas (the rows every compare format prints,
rows.py), the settings, then per pair the fix with the GiB each flag returns and the corrected command.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from diagnoser.compare import model as cmp
from diagnoser.report import html as h
from diagnoser.report.compare.rows import ESTIMATED_MARK, Row, columns, gate, pair_sections, tables

#: the compare budget's fields drawn as segments, with the serving report's labels and colours
SEGMENTS = tuple((key, label, colour) for key, (_, label, colour) in
                 zip(("weights_gib", "activation_peak_gib", "non_torch_gib", "cuda_graph_budget_gib", "kv_cache_gib"),
                     h.BUDGET, strict=True))


def _bar(s: cmp.Start, n: int, head: str, full: float) -> str:
    values = {k: f.value for k, f in s.budget.items()}
    estimated = {k for k, f in s.budget.items() if f.source != "log"}
    outside: list[h.Segment] = []
    taken, inside = s.get("cuda_graph_gib"), s.get("cuda_graph_budget_gib")
    if taken and not inside:  # captured after the KV cache was sized, above the budget (vLLM before 0.20)
        outside.append(("CUDA graphs, outside the budget", float(taken), "--c3", "cuda_graph_gib" in estimated))
    parts = h.budget_segments(values, estimated, SEGMENTS)
    return h.budget_bar(parts, s.get("gpu_total_gib"), s.get("gpu_memory_utilization"), cid=f"budget-{n}",
                        title=f"{head}: GPU memory at start-up (GiB)", full=full, outside=outside)


def _scale(comp: cmp.Comparison) -> float:
    """The GiB every bar's width stands for: the largest GPU, or the largest sum of figures."""
    sums = [sum(s.get(k) or 0.0 for k, _, _ in SEGMENTS) + (s.get("cuda_graph_gib") or 0.0) for s in comp.starts]
    return max([*(s.get("gpu_total_gib") or 0.0 for s in comp.starts), *sums, 1.0])


def _table(title: str, rows: list[Row], heads: list[str], nd: int, cls: str) -> str:
    dheads = ["Δ" if nd == 1 else f"Δ {i + 2}" for i in range(nd)]
    return h.grid([title, *heads, *dheads], [[r.label, *r.cells, *r.deltas] for r in rows], cls=cls,
                  numeric=cls == "changes")


def _pair(p: cmp.Pair, n: int, multi: bool) -> str:
    out = [f"<h2>{h.esc(p.before.label)} → {h.esc(p.after.label)}</h2>" if multi else "<h2>What moved</h2>",
           f'<div class="card"><p class="summary">{h.esc(p.summary)}</p>']
    for title, items in pair_sections(p):
        fixes = any(i.stress for i in items)
        out.append(f"<h3>{h.esc(title)}</h3>" + ('<ul class="fixes">' if fixes else "<ul>") + "".join(
            f"<li><code>{h.esc(i.code)}</code>: "
            + (f'<b class="returns">{h.esc(i.stress)}</b>' if i.stress else "") + f"{h.esc(i.rest)}</li>"
            for i in items) + "</ul>")
    if p.command:
        out.append("<h3>Corrected command</h3>" + h.copy_block(f"cmd-{n}", p.command))
    out.append("</div>")
    return "".join(out)


def render(comp: cmp.Comparison, opts: dict[str, Any] | None = None) -> str:
    heads = columns(comp)
    nd = len(comp.starts) - 1
    last = comp.primary
    names = " → ".join(s.label for s in comp.starts)
    short = " → ".join(PurePath(s.label).name for s in comp.starts)
    verdict, why = gate(last)
    sev = "error" if last.gate_failed else "info"
    cmd = h.copy_block("verdict-cmd", last.command) if last.command else ""
    full = _scale(comp)
    drawn = [_bar(s, i, head, full) for i, (s, head) in enumerate(zip(comp.starts, heads, strict=True))]
    bars = "".join(f'<div class="bar">{bar or h.esc(head + ": no start-up figures in this log")}</div>'
                   for bar, head in zip(drawn, heads, strict=True))
    body = [f"<h1>vllm-doctor compare: {h.esc(short)}</h1>", f'<p class="muted">{h.esc(names)}</p>',
            f'<section class="card verdict {sev}" id="verdict">{h.sev_badge("fail" if last.gate_failed else "pass")}'
            f'<h2 style="border:0;margin:.2em 0" class="gate">{h.esc(f"Upgrade gate: {verdict}{why}")}</h2>'
            f'<p class="summary">{h.esc(last.summary)}</p>{cmd}</section>',
            f'<h2>Start-up memory, on one scale ({full:.1f} GiB)</h2><div class="card bars">{bars}</div>'
            if any(drawn) else "",
            "\n".join(f'<h2>{h.esc(title)}</h2><div class="card wrap">{_table(head, rows, heads, nd, cls)}</div>'
                      for (title, rows), head, cls in zip(tables(comp), ("figure", "setting"),
                                                          ("changes", "settings"), strict=True))
            + f'<p class="muted">{ESTIMATED_MARK} = not printed by that log (derived from its other figures, the '
            "planner's estimate for that release, or the other log's GPU); paler bar segments are such figures.</p>"]
    body.extend(_pair(p, i, len(comp.pairs) > 1) for i, p in enumerate(comp.pairs))
    return h.page(f"compare {short}", "\n".join(body))
