"""Every subcommand tells the truth (issue 28): reports a person reads at a terminal and in a browser."""

from __future__ import annotations

import json
import re

from .conftest import FIXTURES
from .test_cli import doctor

LONG = "kv-cache-too-small-v1-0.16.log"


# -- item 16: text fits the terminal; a cut line says it was cut ------------------------------------------------

def test_text_report_fits_the_terminal_width():
    out = doctor(str(FIXTURES / "preemption-v1-0.12.log"), env={"COLUMNS": "100"}).stdout.decode()
    for line in out.splitlines():
        if line.lstrip().startswith(("run:", "python:", "diagnostic run:")):
            continue  # a command is kept whole, to be copied
        assert len(line) <= 100, line
    evidence = [ln for ln in out.splitlines() if re.match(r"^ +\d+ \| ", ln)]
    assert evidence and all(ln.endswith("…") for ln in evidence if len(ln) == 100 or ln.endswith("…"))
    assert any(ln.endswith("…") for ln in evidence)
    # advice wraps at words, never cuts them
    assert "Latency suffers, nothing is lost." in out


def test_evidence_cut_without_a_terminal_ends_in_an_ellipsis_at_a_word():
    out = doctor(str(FIXTURES / LONG)).stdout.decode()
    cut = [ln for ln in out.splitlines() if re.match(r"^ +\d+ \| ", ln) and ln.endswith("…")]
    assert cut, out[:1500]
    for ln in cut:
        body = ln.split(" | ", 1)[1][:-1]
        # the raw line, or its message alone when the prefixes would take a third of the room
        source = next(s for s in (FIXTURES / LONG).read_text().splitlines() if body.rstrip() in s)
        at = source.index(body.rstrip())
        assert len(source) > at + len(body.rstrip())
        nxt = source[at + len(body.rstrip()):at + len(body.rstrip()) + 1]
        assert not (body.rstrip()[-1:].isalnum() and nxt.isalnum()), (body[-30:], nxt)  # not cut mid-word


# -- item 17: numbers in vLLM's units, no whole line in the numbers, evidence in order ---------------------------

def test_numbers_are_shown_in_the_units_vllm_printed():
    out = doctor(str(FIXTURES / "warmup-oom-cudagraph-0.10.log")).stdout.decode()
    numbers = next(ln for ln in out.splitlines() if ln.strip().startswith("numbers:") and "allocate" in ln)
    assert "tried to allocate 20.00 MiB" in numbers and "gpu free 9.06 MiB" in numbers, numbers
    assert "gpu total 23.67 GiB" in numbers, numbers


def test_engine_dead_numbers_line_does_not_embed_a_stats_line():
    out = doctor(str(FIXTURES / "engine-dead-worker-killed-0.11.log")).stdout.decode()
    block = out.split("[engine-dead]", 1)[1].split("\n2. ", 1)[0]
    numbers = next(ln for ln in block.splitlines() if ln.strip().startswith("numbers:"))
    assert "Avg prompt throughput" not in numbers, numbers
    assert "Last stats line before it" in block  # still said, in the advice


def test_evidence_lines_are_in_log_order():
    doc = json.loads(doctor("--format", "json", str(FIXTURES / "preemption-v1-0.12.log")).stdout)
    for f in doc["findings"]:
        numbers = [e["line"] for e in f["evidence"]]
        assert numbers == sorted(numbers), (f["rule"], numbers)
    out = doctor(str(FIXTURES / "preemption-v1-0.12.log")).stdout.decode()
    block = out.split("[preemption]", 1)[1].split("numbers:", 1)[0]
    shown = [int(n) for n in re.findall(r"^ +(\d+) \| ", block, re.M)]
    assert len(shown) >= 3 and shown == sorted(shown), shown


# -- item 19: the HTML page -------------------------------------------------------------------------------

def _html(name: str) -> str:
    return doctor("--format", "html", str(FIXTURES / name)).stdout.decode()


def test_html_context_is_at_the_top():
    html = _html("engine-dead-worker-killed-0.11.log")
    ctx = re.search(r'<dl class="context"[^>]*>(.*?)</dl>', html, re.S)
    assert ctx, html[:3000]
    assert html.index('<dl class="context"') < html.index('id="verdict"')
    for text in ("0.11.0", "meta-llama/Llama-3.3-70B-Instruct", "TP", "2"):
        assert text in ctx.group(1), ctx.group(1)


def test_html_time_charts_mark_where_the_server_died():
    html = _html("engine-dead-worker-killed-0.11.log")
    charts = re.findall(r'<svg[^>]*class="chart"[^>]*data-chart="(?:KV cache usage|Requests running)[^"]*".*?</svg>',
                        html, re.S)
    assert charts
    for svg in charts:
        assert re.search(r'<line class="death"[^>]*>.*?<title>[^<]*engine died[^<]*22:27:44', svg, re.S), svg[-800:]


def test_html_error_burst_window_is_shaded():
    html = _html("serving-v1-0.12-3h.log")
    chart = re.search(r'data-chart="Failed requests".*?</svg>', html, re.S)
    assert chart and re.search(r'<rect class="burst"[^>]*width="[1-9]', chart.group(0)), (chart.group(0)[:1500]
                                                                                          if chart else html[:500])


def test_html_advice_bullets_are_a_list():
    html = _html("preemption-v1-0.12.log")
    card = html.split('<div class="card finding" id="f-0">', 1)[1].split('<div class="card finding"', 1)[0]
    ul = re.search(r'<ul class="advice">(.*?)</ul>', card, re.S)
    assert ul, card[:2000]
    items = re.findall(r"<li>(.*?)</li>", ul.group(1), re.S)
    assert any(i.startswith("--max-num-seqs 75") for i in items), items
    assert "\n- --max-num-seqs" not in card


def test_html_shows_request_totals_and_uptime():
    html = _html("serving-v1-0.12-3h.log")
    ctx = re.search(r'<dl class="context"[^>]*>(.*?)</dl>', html, re.S)
    assert ctx, html[:2000]
    assert re.search(r"<dt>uptime</dt><dd>\d+ h \d+ min", ctx.group(1)), ctx.group(1)
    assert re.search(r"<dt>requests</dt><dd>[\d,]+ \([\d,]+ failed", ctx.group(1)), ctx.group(1)


def test_html_uses_a_wide_screen_in_a_browser():
    from .test_html_browser import _probe

    probe = """<script>
window.addEventListener('load', function () {
  var m = document.querySelector('main').getBoundingClientRect();
  var charts = [];
  document.querySelectorAll('svg.chart').forEach(function (s) { var r = s.getBoundingClientRect();
    charts.push([Math.round(r.left), Math.round(r.top), Math.round(r.width)]); });
  var pre = document.createElement('pre'); pre.id = 'probe';
  pre.textContent = JSON.stringify({main: m.width, charts: charts,
    scroll: document.documentElement.scrollWidth, viewport: document.documentElement.clientWidth});
  document.body.appendChild(pre);
});
</script>"""
    page = _html("serving-v1-0.12-3h.log")
    wide = _probe(page, 1600, probe)
    assert wide["main"] >= 1400, wide["main"]
    assert wide["scroll"] <= wide["viewport"]
    rows = {}
    for left, top, _w in wide["charts"]:
        rows.setdefault(top, []).append(left)
    assert any(len(lefts) >= 2 for lefts in rows.values()), wide["charts"]  # charts side by side
    narrow = _probe(page, 420, probe)
    assert narrow["scroll"] <= narrow["viewport"] + 1
    assert all(len({lf for lf, tp, _ in narrow["charts"] if tp == t}) == 1 for _, t, _ in narrow["charts"])
