"""`--format html`: one self-contained page a person would rather look at than read.

Nothing is fetched: the style and the copy button's few lines of script are inline, the charts are SVG
drawn here (no plotting dependency, so the command starts as fast as ever). Order: the verdict and its
command first, the start-up memory budget as one stacked bar, the serving timelines on one time axis with
the saturation windows shaded, every finding with its evidence, and the context. Readable on a phone
(one column, fluid SVG) and in dark mode (prefers-color-scheme); every chart has a title, axis labels with
units and a text alternative.
"""

from __future__ import annotations

from html import escape
from typing import Any

from diagnoser.analysis.contract import finding_dict
from diagnoser.analysis.pipeline import Report
from diagnoser.lazyre import lazy
from diagnoser.report.text import CONTEXT_KEYS, _fmt

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 150, 56, 12, 26, 28

STYLE = """
:root{--bg:#fff;--fg:#1b1f24;--mut:#5b6470;--card:#f5f7fa;--line:#d5dae1;--err:#c62828;--warn:#b26a00;
--info:#1565c0;--sat:rgba(229,57,53,.16);--c1:#1e88e5;--c2:#e53935;--c3:#43a047;--c4:#8e24aa;--c5:#fb8c00}
@media (prefers-color-scheme:dark){:root{--bg:#111418;--fg:#e6e9ee;--mut:#9aa4b1;--card:#1b2027;--line:#333b46;
--err:#ef5350;--warn:#ffb74d;--info:#64b5f6;--sat:rgba(239,83,80,.22);--c1:#64b5f6;--c2:#ef5350;--c3:#81c784;
--c4:#ce93d8;--c5:#ffb74d}}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--fg);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1600px;margin:0 auto;padding:16px 24px}h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;
margin:1.4em 0 .5em;border-bottom:1px solid var(--line);padding-bottom:.2em}h3{font-size:1em;margin:.4em 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px;margin:10px 0}
.verdict{border-left:6px solid var(--mut)}.verdict.error{border-left-color:var(--err)}
.verdict.warning{border-left-color:var(--warn)}.verdict.info{border-left-color:var(--info)}
.sev{font-weight:700;text-transform:uppercase;font-size:.8em;letter-spacing:.04em}
.sev.error{color:var(--err)}.sev.warning{color:var(--warn)}.sev.info{color:var(--info)}.sev.context{color:var(--mut)}
code,pre{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-word;margin:.4em 0}.cmd{display:flex;gap:8px;align-items:flex-start}
.cmd pre{flex:1;background:var(--bg);border:1px solid var(--line);border-radius:6px;padding:8px}
button{font:inherit;padding:6px 12px;border-radius:6px;border:1px solid var(--line);background:var(--bg);
color:var(--fg);cursor:pointer}.advice{white-space:pre-wrap}.ev{color:var(--mut);overflow-x:auto}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);
vertical-align:top}th{color:var(--mut);font-weight:600;width:40%}svg{width:100%;height:auto;display:block}
svg text{fill:var(--mut);font:11px system-ui,sans-serif}svg .title{fill:var(--fg);font-weight:600;font-size:12px}
.grid{stroke:var(--line);stroke-width:1}.sat{fill:var(--sat)}.legend{font-size:.85em;color:var(--mut)}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 4px 0 10px;vertical-align:middle}
.muted{color:var(--mut)}table.wide th{width:auto}.num{text-align:right;white-space:nowrap}
.wrap{overflow-x:auto}
td.meter{width:30%;min-width:60px}td.meter span{display:block;height:10px;border-radius:2px;background:var(--c1)}
dl.context{display:flex;flex-wrap:wrap;gap:4px 22px;margin:.4em 0 .8em}dl.context div{display:flex;gap:6px}
dl.context dt{color:var(--mut)}dl.context dd{margin:0;font-weight:600}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,640px),1fr));gap:0 14px}
.charts>.card{margin:6px 0}ul.advice{margin:.3em 0 .6em;padding-left:1.4em}ul.advice li{margin:.15em 0}
.death{stroke:var(--err);stroke-width:2;stroke-dasharray:5 3}.burst{fill:var(--sat);stroke:var(--err);stroke-opacity:.5}
span.sw.burst{background:var(--sat);border:1px solid var(--err)}.budget svg{max-width:1100px}
@media (min-width:1200px){.findings{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:0 14px}}
@media (max-width:600px){main{padding:10px}.cmd{flex-direction:column}th{width:auto}}
"""

SCRIPT = """
document.querySelectorAll('button[data-copy]').forEach(function(b){b.addEventListener('click',function(){
var t=document.getElementById(b.getAttribute('data-copy')).textContent;function done(){b.textContent='Copied';
setTimeout(function(){b.textContent='Copy'},1500)}if(navigator.clipboard&&window.isSecureContext){
navigator.clipboard.writeText(t).then(done,fallback)}else{fallback()}
function fallback(){var a=document.createElement('textarea');
a.value=t;document.body.appendChild(a);a.select();try{document.execCommand('copy');done()}catch(e){}a.remove()}})});
"""

#: (title, unit, [(field, label, colour var)], y max or None)
TIMELINES = (
    ("KV cache usage", "%", [("kv_pct", "GPU KV cache", "--c2"), ("cpu_kv_pct", "CPU KV cache (V0 swap)", "--c5")],
     100.0),
    ("Requests running and waiting", "requests", [("running", "running", "--c1"), ("waiting", "waiting", "--c2")],
     None),
    ("Throughput", "tokens/s", [("prompt_tps", "prompt", "--c4"), ("gen_tps", "generation", "--c3")], None),
    ("Preemptions", "per interval", [("preemptions", "preemptions", "--c2")], None),
    ("Failed requests", "per interval", [("errors", "5xx / 429", "--c2")], None),
)
#: a second data-parallel engine's colour for the same field
OTHER_ENGINE = {"--c1": "--c4", "--c2": "--c5", "--c3": "--c1", "--c4": "--c3", "--c5": "--c2"}
BUDGET = (("weights_gib", "weights", "--c1"), ("activation_peak_gib", "activations", "--c4"),
          ("non_torch_gib", "non-torch", "--c5"), ("cuda_graph_gib", "CUDA graphs", "--c3"),
          ("available_kv_cache_gib", "KV cache", "--c2"))


def esc(value: Any) -> str:
    """Any value as HTML text (quotes too, so it is safe inside an attribute)."""
    return escape(str(value), quote=True)


_e = esc


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    for exp in range(-2, 9):
        for m in (1, 2, 2.5, 5):
            step = m * 10 ** exp
            if step >= v:
                return float(step)
    return v


def _tick(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


#: a vertical mark on the time charts: (t, caption), e.g. where the engine died
Marker = tuple[float, str]


def timeline(title: str, unit: str, series: list[tuple[str, list[tuple[float, float, float]], str]],
             t0: float, t1: float, shade: list[tuple[float, float]], labels: tuple[str, str], ymax: float | None,
             cid: str, bursts: list[tuple[float, float]] | None = None, markers: list[Marker] | None = None) -> str:
    """One chart: lines of (t, mean, max) per series on the shared time axis, saturation windows shaded,
    `bursts` (error-burst windows) shaded and outlined, `markers` drawn as dashed vertical lines."""
    span = max(t1 - t0, 1e-9)
    top = ymax or _nice_max(max((p[2] for _, pts, _ in series for p in pts), default=1.0) * 1.05)
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(t: float) -> float:
        return PAD_L + (t - t0) / span * iw

    def y(v: float) -> float:
        return PAD_T + ih - min(max(v / top, 0.0), 1.0) * ih

    parts = [f'<svg viewBox="0 0 {W} {H}" role="img" aria-labelledby="{cid}-t {cid}-d" class="chart" '
             f'data-chart="{_e(title)}">',
             f'<title id="{cid}-t">{_e(title)} ({_e(unit)}) over time</title>']
    desc = "; ".join(f"{label}: peak {_tick(max((p[2] for p in pts), default=0))} {unit}"
                     for label, pts, _ in series if pts)
    parts.append(f'<desc id="{cid}-d">{_e(desc)}; {len(shade)} saturation window(s) shaded.</desc>')
    parts.append(f'<text class="title" x="{PAD_L}" y="14">{_e(title)}</text>')
    for xa, xb in shade:
        a, b = x(max(xa, t0)), x(min(xb, t1))
        parts.append(f'<rect class="sat" x="{a:.1f}" y="{PAD_T}" width="{max(b - a, 2):.1f}" height="{ih}">'
                     f'<title>saturated</title></rect>')
    for xa, xb in bursts or []:
        a, b = x(max(xa, t0)), x(min(xb, t1))
        parts.append(f'<rect class="burst" x="{a:.1f}" y="{PAD_T}" width="{max(b - a, 2):.1f}" height="{ih}">'
                     f'<title>failed requests (5xx, 429)</title></rect>')
    shown = [(t, caption) for t, caption in markers or [] if t0 <= t <= t1 + 1e-6]
    for t, caption in shown:
        parts.append(f'<line class="death" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{PAD_T - 4}" y2="{PAD_T + ih}">'
                     f'<title>{_e(caption)}</title></line>')
    for i in range(5):
        v = top * i / 4
        yy = y(v)
        parts.append(f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{yy:.1f}" y2="{yy:.1f}"/>'
                     f'<text x="{PAD_L - 6}" y="{yy + 4:.1f}" text-anchor="end">{_tick(v)}</text>')
    parts.append(f'<text x="12" y="{PAD_T + ih / 2:.0f}" transform="rotate(-90 12 {PAD_T + ih / 2:.0f})" '
                 f'text-anchor="middle">{_e(unit)}</text>')
    parts.append(f'<text x="{PAD_L}" y="{H - 8}">{_e(labels[0])}</text>'
                 f'<text x="{W - PAD_R}" y="{H - 8}" text-anchor="end">{_e(labels[1])}</text>'
                 f'<text x="{PAD_L + iw / 2:.0f}" y="{H - 8}" text-anchor="middle">time (log clock)</text>')
    for _label, pts, colour in series:
        if not pts:
            continue
        band = " ".join(f"{x(t):.1f},{y(hi):.1f}" for t, _, hi in pts)
        line = " ".join(f"{x(t):.1f},{y(mean):.1f}" for t, mean, _ in pts)
        parts.append(f'<polyline points="{band}" fill="none" stroke="var({colour})" stroke-opacity=".35" '
                     f'stroke-width="1"/>')
        parts.append(f'<polyline class="series" points="{line}" fill="none" stroke="var({colour})" '
                     f'stroke-width="1.8"/>')
    parts.append("</svg>")
    legend = "".join(f'<span class="sw" style="background:var({c})"></span>{_e(lb)} (mean; faint: max)'
                     for lb, pts, c in series if pts)
    legend += '<span class="sw sat" style="background:var(--sat)"></span>saturated'
    if bursts:
        legend += '<span class="sw burst"></span>failing requests'
    legend += "".join(f'<span class="sw" style="background:var(--err)"></span>{_e(caption)}' for _, caption in shown)
    return "".join(parts) + f'<div class="legend">{legend}</div>'


#: one budget segment: (label, GiB, colour variable, estimated)
Segment = tuple[str, float, str, bool]


def budget_segments(values: dict[str, float | None], estimated: frozenset[str] | set[str] = frozenset(),
                    keys: tuple[tuple[str, str, str], ...] = BUDGET) -> list[Segment]:
    """The positive figures of a start-up budget, in bar order (`keys`: (field, label, colour))."""
    return [(label, float(v), colour, key in estimated) for key, label, colour in keys
            if isinstance(v := values.get(key), (int, float)) and v > 0]


def stacked_bar(parts: list[Segment], full: float, cid: str, title: str, unit: str = "GiB", digits: int = 2,
                desc: str = "", marker: tuple[float, str] | None = None, end: str = "") -> str:
    """One horizontal bar of segments, `full` units wide, with a legend; each segment carries its label and
    value (data-label, data-value) and a tooltip. `marker`: a dashed line at a value, with its caption.

    A segment coloured --bg is empty space (drawn outlined, not labelled); an estimated one is paler, marked ~.
    """
    full = full or 1.0
    iw = W - PAD_L - PAD_R

    def num(v: float, d: int = digits, with_unit: bool = True) -> str:
        return f"{v:,.{d}f}" + (f" {unit}" if with_unit and unit else "")

    svg = [f'<svg viewBox="0 0 {W} 96" role="img" aria-labelledby="{cid}-t {cid}-d" class="chart" '
           f'data-chart="{_e(cid)}">', f'<title id="{cid}-t">{_e(title)}</title>',
           f'<desc id="{cid}-d">' + _e(", ".join(f"{lb} {'~' if est else ''}{num(v)}" for lb, v, _, est in parts)
                                       + desc) + "</desc>",
           f'<text class="title" x="{PAD_L}" y="14">{_e(title)}</text>']
    xpos = PAD_L
    for label, v, colour, est in parts:
        wdt = v / full * iw
        svg.append(f'<rect x="{xpos:.1f}" y="24" width="{max(wdt, .5):.1f}" height="30" fill="var({colour})"'
                   + (' stroke="var(--line)"' if colour == "--bg" else "")
                   + (' fill-opacity=".55" class="est"' if est else '') + f' data-label="{_e(label)}" '
                   f'data-value="{v:.{digits}f}"><title>{_e(label)}: {"~" if est else ""}{num(v)}'
                   f'{" (estimated)" if est else ""}</title></rect>')
        if wdt > 44 and colour != "--bg":
            svg.append(f'<text x="{xpos + 4:.1f}" y="43" style="fill:#fff">{"~" if est else ""}'
                       f'{num(v, max(digits - 1, 0), False)}</text>')
        xpos += wdt
    if marker:
        bx = PAD_L + marker[0] / full * iw
        svg.append(f'<line x1="{bx:.1f}" x2="{bx:.1f}" y1="18" y2="60" stroke="var(--fg)" stroke-dasharray="4 3"/>'
                   f'<text x="{bx:.1f}" y="74" text-anchor="middle">{_e(marker[1])}</text>')
    svg.append(f'<text x="{PAD_L}" y="90">0</text><text x="{W - PAD_R}" y="90" text-anchor="end">'
               f'{_e(num(full, max(digits - 1, 0)))}{_e(end)}</text></svg>')
    legend = "".join(f'<span class="sw" style="background:var({c})"></span>{_e(lb)} {"~" if est else ""}{num(v)}'
                     for lb, v, c, est in parts)
    return "".join(svg) + f'<div class="legend">{legend}</div>'


def budget_bar(parts: list[Segment], total: float | None, util: float | None, cid: str = "budget",
               title: str = "GPU memory at start-up (GiB)", full: float | None = None,
               outside: list[Segment] | None = None) -> str:
    """The start-up memory budget as one stacked bar against the GPU's total and the utilization line.

    `parts` fill the budget (GPU total x utilization), then what the budget leaves unreserved, then `outside`
    (memory taken above the budget, e.g. CUDA graphs before vLLM 0.20), then the rest of the GPU. `full` is
    the GiB the bar's width stands for: bars drawn with the same `full` share a scale, so their segments
    compare by length.
    """
    if not parts:
        return ""
    parts = list(parts)
    used = sum(v for _, v, _, _ in parts)
    budget = total * util if total and util else None
    if budget and budget - used >= 0.005:
        parts.append(("unreserved in budget", budget - used, "--line", False))
    parts += outside or []
    taken = sum(v for _, v, _, _ in parts)
    if total and total - taken >= 0.005:
        parts.append(("outside the budget", total - taken, "--bg", False))
    full = max(full or total or (budget if budget else used), taken)
    desc = (f"; GPU total {total:.2f} GiB" if total else "") + (f"; utilization {util}" if util else "")
    marker = (budget, f"utilization {util:g} = {budget:.1f} GiB") if budget and util else None
    return stacked_bar(parts, full, cid, title, desc=desc, marker=marker,
                       end=" (GPU total)" if total and abs(full - total) < 0.005 else "")


def context_budget_bar(ctx: dict[str, Any]) -> str:
    """One log's start-up budget, from the figures its context holds."""
    return budget_bar(budget_segments(ctx), ctx.get("gpu_total_gib"), ctx.get("gpu_memory_utilization"))


def copy_block(cid: str, text: str) -> str:
    """A command to run, with a Copy button (the page's one script)."""
    return (f'<div class="cmd"><pre id="{cid}">{_e(text)}</pre>'
            f'<button type="button" data-copy="{cid}">Copy</button></div>')


def sev_badge(severity: str) -> str:
    return f'<span class="sev {_e(severity)}">{_e(severity)}</span>'


def finding_head(severity: str, rule: str, title: str, meta: str) -> str:
    """A finding's first lines: severity, rule id, title, and where it was seen."""
    return (f'{sev_badge(severity)} <code>{_e(rule)}</code><h3>{_e(title)}</h3>'
            f'<div class="muted">{_e(meta)}</div>')


def table(rows: list[tuple[str, str]]) -> str:
    """A two-column table of label / value rows (both escaped here)."""
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


NUM = ' class="num"'
#: a table cell that is one figure (right-aligned): 1,234  -2.90 GiB  0.02x~  12.5%  =
NUMBER = lazy(r"[~+-]?[\d,]+(?:\.\d+)?(?: ?(?:GiB|x|%))?~?|=|-")


def grid(heads: list[str], rows: list[list[str]], cls: str = "", numeric: bool = True,
         meters: list[float] | None = None) -> str:
    """A table with a header row; cells are escaped here. `numeric`: a cell that is one figure is right-aligned.
    `meters`: one fraction (0..1) per row, drawn as a bar in a last column (a share at a glance)."""
    def cell(tag: str, text: str, first: bool) -> str:
        num = numeric and not first and bool(NUMBER.fullmatch(text))
        return f'<{tag}{NUM if num else ""}>{_e(text)}</{tag}>'

    def meter(i: int) -> str:
        if meters is None:
            return ""
        pct = max(0.0, min(1.0, meters[i])) * 100
        return f'<td class="meter"><span style="width:{pct:.1f}%" data-share="{pct:.1f}"></span></td>'

    head = "".join(cell("th", h, True) for h in heads) + ("<th></th>" if meters is not None else "")
    body = "".join("<tr>" + "".join(cell("th" if i == 0 else "td", c, i == 0) for i, c in enumerate(r)) + meter(n)
                   + "</tr>" for n, r in enumerate(rows))
    return f'<table class="wide {_e(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def page(title: str, body: str) -> str:
    """The whole self-contained document around a body: style and script inline, nothing fetched."""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            "<meta name=\"color-scheme\" content=\"light dark\">"
            f"<title>vllm-doctor: {_e(title)}</title><style>{STYLE}</style></head><body><main>\n{body}\n"
            f"</main><script>{SCRIPT}</script></body></html>\n")


def _death(r: Report) -> tuple[str, int, str] | None:
    """Where a serving server failed: (log time, line, caption), from the engine-dead finding or else the first
    error while serving; None when it did not fail while serving (or the log has no time for it)."""
    serving = [f for f in r.findings if f.severity == "error" and f.stage == "serving" and f.facts.get("first_time")]
    dead = next((f for f in serving if f.rule.id == "engine-dead"), serving[0] if serving else None)
    if dead is None:
        return None
    what = "engine died" if dead.rule.id == "engine-dead" else dead.rule.id
    return str(dead.facts["first_time"]), dead.line, f"{what} at {dead.facts['first_time']} (line {dead.line})"


def _at(r: Report, label: str) -> float | None:
    """A log time ('MM-DD HH:MM:SS') on the series' time axis (seconds after its last point's time)."""
    from diagnoser.rules.functions import seconds_between

    s = r.series
    last = max((t.last_t for t in s.tracks.values() if t.last_t is not None), default=None) if s else None
    if last is None:
        return None
    ahead = seconds_between(s.clock.label(last), label)
    behind = seconds_between(label, s.clock.label(last))
    return last + ahead if ahead is not None else (last - behind if behind is not None else None)


def _series_charts(r: Report) -> str:
    s = r.series
    if s is None:
        return ""
    tracks = sorted(s.tracks.items())
    t0 = min((t.first_t for _, t in tracks if t.first_t is not None), default=0.0)
    t1 = max((t.last_t for _, t in tracks if t.last_t is not None), default=1.0)
    shade = [(w.start - w.step, w.end) for w in s.windows("saturation")]
    bursts = [(w.start - w.step, w.end) for w in s.windows("error-burst")]
    death = _death(r)
    at = _at(r, death[0]) if death else None
    markers = [(at, death[2])] if death and at is not None else []
    t1 = max(t1, at) if at is not None else t1
    labels = (s.clock.label(t0), s.clock.label(t1))
    out = []
    for i, (title, unit, fields, ymax) in enumerate(TIMELINES):
        lines = _chart_lines(fields, tracks)
        if not lines:
            continue
        chart = timeline(title, unit, lines, t0, t1, shade, labels, ymax, f"c{i}", bursts, markers)
        out.append(f'<div class="card">{chart}</div>')
    head = _series_head(s.source, labels, tracks)
    return "<h2>Serving over time</h2>" + head + '<div class="charts">' + "".join(out) + "</div>"


def _chart_lines(fields: list[tuple[str, str, str]], tracks: list[tuple[Any, Any]]) -> list[tuple[str, list[Any], str]]:
    """One chart's lines: each field of each engine's track as (label, points, colour); a field that only
    counts events (preemptions, errors, CPU KV) is left out of a track where it never happened."""
    lines = []
    for name, label, colour in fields:
        for idx, (engine, track) in enumerate(tracks):
            pts = [(b["t0"], b["f"][name][2] / b["f"][name][3], b["f"][name][1])
                   for b in track.buckets.items if name in b["f"]]
            if name in ("preemptions", "errors", "cpu_kv_pct") and not any(p[2] for p in pts):
                continue
            lab = label if len(tracks) == 1 else f"{label}, engine {engine}"
            lines.append((lab, pts, colour if idx == 0 else OTHER_ENGINE.get(colour, colour)))
    return lines


def _series_head(source: str, labels: tuple[str, str], tracks: list[tuple[Any, Any]]) -> str:
    """The line above the charts: where the series came from, its time span, engines and points."""
    where = "Prometheus /metrics scrapes" if source == "metrics" else "the stats lines"
    return (f'<p class="muted">From {_e(where)}: '
            f'{_e(labels[0])} to {_e(labels[1])}, {len(tracks)} engine(s), '
            f'{sum(t.points for _, t in tracks):,} points (charts show at most '
            f'{max(t.buckets.capacity for _, t in tracks)} per engine; windows are exact).</p>')


def advice_html(text: str) -> str:
    """Advice text as HTML: paragraphs, and each run of '- ' lines as one bulleted list."""
    out: list[str] = []
    items: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append(f'<div class="advice">{_e(chr(10).join(para))}</div>')
            para.clear()
        if items:
            out.append('<ul class="advice">' + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for line in text.splitlines():
        if line.startswith("- "):
            if para:
                flush()
            items.append(line[2:])
        elif not line.strip():
            flush()
        else:
            if items:
                flush()
            para.append(line)
    flush()
    return "".join(out)


#: a finding's windows table: (column head, window key) by the kind of window
WINDOW_COLUMNS = (("start", "start"), ("end", "end"), ("s", "seconds"), ("peak KV %", "peak_kv_usage_pct"),
                  ("max waiting", "max_waiting"), ("preemptions", "preemptions"))


def _windows_table(windows: list[dict[str, Any]]) -> str:
    """The windows of a finding: status codes and counts for failed-request bursts, else KV and queue."""
    if not windows:
        return ""
    if any("status_codes" in w for w in windows):
        codes = sorted({c for w in windows for c in (w.get("status_codes") or {})})
        heads = ["start", "end", "s", "requests", "failed", *codes]
        rows = [[str(w.get("start", "")), str(w.get("end", "")), str(w.get("seconds", "")),
                 _fmt(w.get("requests", "")), _fmt(w.get("errors", "")),
                 *(_fmt((w.get("status_codes") or {}).get(c, 0)) for c in codes)] for w in windows[:20]]
    else:
        heads = [h for h, _ in WINDOW_COLUMNS]
        rows = [[str(w.get(k, "")) for _, k in WINDOW_COLUMNS] for w in windows[:20]]
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return (f'<h3>Windows ({len(windows)})</h3><table><tr>' + "".join(f"<th>{_e(h)}</th>" for h in heads)
            + f"</tr>{body}</table>")


def _finding(f: Any, i: int, rid: str = "") -> str:
    d = finding_dict(f)
    facts = {k: v for k, v in d["facts"].items() if not isinstance(v, (list, dict))}
    rows = table([(k, _fmt(v)) for k, v in facts.items()])
    wtable = _windows_table(d["facts"].get("windows") or [])
    ev = "".join(f"<pre class=\"ev\">{ln['line']:>6} | {_e(ln['text'][:400])}</pre>"
                 for ln in sorted(d["evidence"], key=lambda e: e["line"]))
    cmd = ""
    if d["command"]:
        cmd = copy_block(f"{rid}cmd-{i}", d["command"])
    label = "context" if f.rule.context else d["severity"]
    return (f'<div class="card finding" id="{rid}f-{i}">'
            + finding_head(label, d["rule"], d["title"],
                           f'stage {d["stage"]}, line {d["line"]}, seen {d["occurrences"]} time(s)') +
            f'{advice_html(d["advice"])}{cmd}{wtable}<h3>Evidence</h3>{ev}'
            f'<details><summary>Numbers</summary>{rows}</details></div>')


def _served(r: Report) -> list[tuple[str, str]]:
    """Request totals and uptime, from the serving series and the ready time."""
    from diagnoser.rules.functions import duration, seconds_between

    out: list[tuple[str, str]] = []
    s = r.series
    if s is not None and s.tracks:
        def total(name: str) -> float:
            return sum(b["f"][name][2] for t in s.tracks.values() for b in t.buckets.items if name in b["f"])

        requests, failed = total("requests"), total("errors")
        if requests:
            out.append(("requests", f"{requests:,.0f} ({failed:,.0f} failed: 5xx, 429)"))
        last = max((t.last_t for t in s.tracks.values() if t.last_t is not None), default=None)
        death = _death(r)
        end = death[0] if death else (s.clock.label(last) if last is not None else None)
        ready = r.context.ready_time
        up = seconds_between(ready, end) if ready and end else None
        if up is not None:
            out.append(("uptime", f"{duration(up)}" + (", until the engine died" if death else f", to {end}")))
    return out


def _context_list(r: Report) -> str:
    """The deployment at a glance, at the top: release, model, GPU, TP and the serving totals."""
    ctx = r.context.as_dict()
    wanted = ("version", "engine", "model", "gpu_name", "gpu_total_gib", "tensor_parallel_size",
              "max_model_len", "gpu_memory_utilization", "quantization", "kv_cache_dtype")
    labels = dict(CONTEXT_KEYS)
    rows = [(labels.get(k, k), _fmt(ctx[k])) for k in wanted if k in ctx] + _served(r)
    if not rows:
        return ""
    return '<dl class="context">' + "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in rows) + "</dl>"


def _report(r: Report, rid: str = "") -> str:
    """One input's page section; `rid` prefixes element ids when one page holds several inputs."""
    ctx = r.context.as_dict()
    out = [f"<h1>vllm-doctor: {_e(r.path)}</h1>",
           f'<p class="muted">{r.lines:,} lines, {r.bytes:,} bytes</p>', _context_list(r)]
    problems = [f for f in r.findings if not f.rule.context]
    if problems:
        f = problems[0]
        d = finding_dict(f)
        first_para = d["advice"].split("\n\n")[0]
        cmd = copy_block(f"{rid}verdict-cmd", d["command"]) if d["command"] else ""
        fix = "".join(f"<li><code>{_e(x['flag'])} {_e(x['value'])}</code>: {_e(x['reason'])}</li>" for x in d["fixes"])
        out.append(f'<section class="card verdict {d["severity"]}" id="{rid}verdict">{sev_badge(d["severity"])} '
                   f'<code>{_e(d["rule"])}</code><h2 style="border:0;margin:.2em 0">'
                   f'{_e(d["title"])}</h2>{advice_html(first_para)}'
                   f'{"<ul>" + fix + "</ul>" if fix else ""}{cmd}</section>')
    else:
        out.append(f'<section class="card verdict" id="{rid}verdict"><h2 style="border:0">No problems found</h2>'
                   '</section>')
    bar = context_budget_bar(ctx)
    if bar:
        out.append(f'<h2>Start-up memory</h2><div class="card budget">{bar}</div>')
    out.append(_series_charts(r))
    if r.findings:
        out.append(f"<h2>Findings ({len(problems)})</h2>" if len(problems) == len(r.findings) else
                   f"<h2>Findings ({len(problems)}, and the start-up figures)</h2>")
        out.append('<div class="findings">' + "".join(_finding(f, i, rid) for i, f in enumerate(r.findings))
                   + "</div>")
    extra = [("peak_kv_usage_pct", "peak KV usage %"), ("max_running_reqs", "max running"),
             ("max_waiting_reqs", "max waiting"), ("stats_lines", "stats lines")]
    rows = [(label, _fmt(ctx[k])) for k, label in [*CONTEXT_KEYS, *extra] if k in ctx]
    if rows:
        out.append(f'<h2>Context</h2><div class="card">{table(rows)}</div>')
    return "\n".join(out)


def render(reports: list[Report], opts: dict[str, Any] | None = None) -> str:
    body = "\n<hr>\n".join(_report(r, f"r{n}-" if n else "") for n, r in enumerate(reports))
    return page(reports[0].path if len(reports) == 1 else f"{len(reports)} logs", body)
