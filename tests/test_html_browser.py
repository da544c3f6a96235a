"""The HTML report in a real browser: headless Chromium renders a serving fixture's report, and the test
asserts what a user sees: the charts drawn with a size, the saturation windows shaded, no console errors,
the verdict first. CI installs Debian's chromium (.ci/run), so there it runs and never skips."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from diagnoser.analysis.pipeline import diagnose
from diagnoser.report import renderer

from .conftest import FIXTURES

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
#: runs after load: what the page shows, written into the DOM for --dump-dom to carry out
PROBE = """<script>
window.addEventListener('load', function () {
  var out = {charts: [], shaded: 0, errors: window.__errors || []};
  document.querySelectorAll('svg.chart').forEach(function (s) {
    var r = s.getBoundingClientRect();
    var lines = s.querySelectorAll('polyline.series, rect:not(.sat)');
    out.charts.push({name: s.getAttribute('data-chart'), w: r.width, h: r.height, marks: lines.length});
  });
  document.querySelectorAll('rect.sat').forEach(function (r) { if (r.getBoundingClientRect().width > 0) out.shaded++; });
  var v = document.getElementById('verdict');
  out.verdictTop = v ? v.getBoundingClientRect().top : -1;
  out.copy = document.querySelectorAll('button[data-copy]').length;
  out.viewport = document.documentElement.clientWidth; out.scroll = document.documentElement.scrollWidth;
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
CATCH = "<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push(String(e.message))});</script>"


def _need_browser() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed, and CI must run the browser test (.ci/run installs it)")
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


def _render(name: str) -> str:
    with open(FIXTURES / name, "rb") as fh:
        report = diagnose(fh, name)
    return renderer("html")([report], {})


def _run(html: str, width: int, extra: list[str], probe: str = PROBE) -> subprocess.CompletedProcess[str]:
    browser = _need_browser()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html.replace("<head>", "<head>" + CATCH, 1).replace("</body>", probe + "</body>"),
                        encoding="utf-8")
        return subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size={width},2400",
                               "--enable-logging=stderr", "--v=0", *extra, page.as_uri()],
                              capture_output=True, text=True, timeout=120)


def _probe(html: str, width: int = 1000, probe: str = PROBE) -> dict:
    import json

    done = _run(html, width, ["--dump-dom", "--virtual-time-budget=3000"], probe)
    m = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert m, done.stderr[-2000:]
    import html as h

    return {**json.loads(h.unescape(m.group(1))), "stderr": done.stderr}


def test_serving_report_in_chromium_shows_charts_and_shaded_windows():
    got = _probe(_render("serving-v1-0.12-3h.log"))
    names = [c["name"] for c in got["charts"]]
    assert "budget" in names and "KV cache usage" in names and "Requests running and waiting" in names
    for chart in got["charts"]:
        assert chart["w"] > 300 and chart["h"] > 50, chart
        assert chart["marks"] > 0, chart
    assert got["shaded"] >= 2 * 5  # two saturation windows on each of the five timelines
    assert got["errors"] == []
    assert "Uncaught" not in got["stderr"] and "CONSOLE(" not in got["stderr"]
    assert 0 <= got["verdictTop"] < 200  # the verdict is the first thing on the page
    assert got["copy"] >= 1


def test_report_fits_a_phone_screen():
    got = _probe(_render("serving-v1-dp2-0.10.log"), width=390)
    assert got["viewport"] < 700  # a narrow window (headless Chromium may clamp the smallest width)
    assert got["scroll"] <= got["viewport"], got  # nothing sticks out sideways
    for chart in got["charts"]:
        assert 200 < chart["w"] <= got["viewport"], chart
    assert got["errors"] == []


def test_screenshot_has_pixels(tmp_path):
    shot = tmp_path / "shot.png"
    _run(_render("metrics-series-old-names-0.7.prom"), 1000, [f"--screenshot={shot}"])
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


# -- compare and scan pages: what a user reads off the bars and tables --------------------------------------

#: what the page shows: each chart's segments as drawn (label, value, width and left edge in CSS pixels),
#: every table's rows as read, the share meters' widths, the page's visible text
SEE = """<script>
window.addEventListener('load', function () {
  var out = {bars: {}, tables: {}, meters: [], errors: window.__errors || []};
  document.querySelectorAll('svg.chart').forEach(function (s) {
    var r = s.getBoundingClientRect(), segs = [];
    s.querySelectorAll('rect[data-label]').forEach(function (x) {
      var b = x.getBoundingClientRect();
      segs.push({label: x.getAttribute('data-label'), value: parseFloat(x.getAttribute('data-value')),
                 w: b.width, x: b.left, h: b.height});
    });
    out.bars[s.getAttribute('data-chart')] = {w: r.width, h: r.height, x: r.left, segs: segs};
  });
  document.querySelectorAll('table').forEach(function (t) {
    out.tables[t.className.replace('wide', '').trim()] = Array.from(t.querySelectorAll('tr')).map(function (tr) {
      return Array.from(tr.children).map(function (c) { return c.innerText.trim(); });
    });
  });
  document.querySelectorAll('td.meter span').forEach(function (m) {
    out.meters.push({row: m.closest('tr').firstChild.innerText.trim(), w: m.getBoundingClientRect().width,
                     table: m.closest('table').className});
  });
  var v = document.getElementById('verdict');
  out.verdictTop = v ? v.getBoundingClientRect().top : -1;
  out.copy = document.querySelectorAll('button[data-copy]').length;
  out.viewport = document.documentElement.clientWidth; out.scroll = document.documentElement.scrollWidth;
  out.text = document.body.innerText;
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _see(page: str, width: int = 1000) -> dict:
    return _probe(page, width, SEE)


def _row(table: list[list[str]], first: str) -> list[str]:
    return next(r for r in table if r and r[0] == first)


def _per_unit(segs: list[dict]) -> list[float]:
    """Pixels per GiB (or per log) of every segment wide enough to measure."""
    return [s["w"] / s["value"] for s in segs if s["w"] > 4 and s["value"] > 0]


def test_compare_page_in_chromium_shows_both_budgets_on_one_scale():
    from .test_formats import compare_html

    got = _see(compare_html())
    before, after = got["bars"]["budget-0"], got["bars"]["budget-1"]
    assert before["w"] > 500 and before["w"] == after["w"] and before["h"] > 50
    labels = [s["label"] for s in before["segs"]]
    assert labels[:4] == ["weights", "activations", "non-torch", "KV cache"]
    assert "CUDA graphs, outside the budget" in labels  # V0 0.7.3 captured its graphs above the budget
    assert [s["label"] for s in after["segs"]][:4] == ["weights", "activations", "non-torch", "KV cache"]
    # one scale: every segment of both bars is as many pixels per GiB, so lengths compare across the bars
    scale = _per_unit(before["segs"] + after["segs"])
    assert len(scale) >= 6 and max(scale) / min(scale) < 1.03, scale
    seg = {(n, s["label"]): s for n, bar in enumerate((before, after)) for s in bar["segs"]}
    assert seg[0, "weights"]["value"] == seg[1, "weights"]["value"] == 14.99
    assert abs(seg[0, "weights"]["x"] - seg[1, "weights"]["x"]) < 0.5  # both bars start at the same place
    assert abs(seg[1, "activations"]["w"] / seg[0, "activations"]["w"] - 4.72 / 1.79) < 0.05
    assert seg[0, "KV cache"]["w"] > 20 * max(seg[1, "KV cache"]["w"], 0.5)  # 2.94 GiB vs 0.04 GiB
    for bar in (before, after):  # segments follow each other left to right, none overlapping
        for a, b in zip(bar["segs"], bar["segs"][1:], strict=False):
            assert abs(a["x"] + a["w"] - b["x"]) < 1.0, (a, b)
    changes = got["tables"]["changes"]
    assert changes[0][1:] == ["before-0.7.3.log (started)", "after-0.8.2.log (failed)", "Δ"]
    assert _row(changes, "KV cache tokens")[1:] == ["24,080", "327", "-23,753"]
    assert _row(changes, "activation peak")[1:] == ["1.79 GiB", "4.72 GiB~", "+2.93 GiB"]
    assert _row(got["tables"]["settings"], "max_num_seqs")[1:] == ["256 (default)", "1024 (default)", "changed"]
    assert _row(got["tables"]["settings"], "GPU")[1:] == ["22.05 GiB (name not in the log)",
                                                          "22.05 GiB~ (name not in the log)", ""]
    text = got["text"]
    assert "Upgrade gate: FAIL" in text
    assert "Activations +2.93 GiB took 2.90 GiB from the KV cache: 24,080 → 327 tokens" in text
    assert "--max-num-seqs 256: returns ~3.58 GiB" in text
    assert ("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384 --gpu-memory-utilization 0.9 "
            "--max-num-seqs 256") in text
    assert "weights 14.99 GiB" in text and "activations ~4.72 GiB" in text  # the legends' numbers
    assert 0 <= got["verdictTop"] < 250 and got["copy"] >= 2
    assert got["errors"] == []


def test_scan_page_in_chromium_shows_the_fleet():
    from .test_formats import fleet_docs, scan_html

    got = _see(scan_html(fleet_docs()))
    outcomes = got["bars"]["outcomes"]
    assert [(s["label"], s["value"]) for s in outcomes["segs"]] == [
        ("with errors", 4), ("with warnings (no error)", 1), ("clean", 1), ("unreadable", 1)]
    scale = _per_unit(outcomes["segs"])
    assert max(scale) / min(scale) < 1.03, scale  # each segment's length is its count
    assert sum(s["w"] for s in outcomes["segs"]) > 0.8 * outcomes["w"]
    rules = got["tables"]["rules"]
    assert _row(rules, "kv-cache-too-small")[1:4] == ["error", "3", "50.0%"]
    assert _row(rules, "weights-oom")[1:4] == ["error", "1", "16.7%"]
    meters = {m["row"]: m["w"] for m in got["meters"] if "rules" in m["table"]}
    assert abs(meters["kv-cache-too-small"] / meters["weights-oom"] - 3) < 0.1
    assert _row(got["tables"]["counts by-model"], "meta-llama/Llama-3.1-8B-Instruct")[1:3] == ["3", "50.0%"]
    text = got["text"]
    assert "4 with errors, 1 with warnings (no error), 1 clean, 1 unreadable" in text
    assert "fixtures/kv-cache-too-small-v1-0.16.log:43, stage startup" in text
    assert text.index("Worst logs") < text.index("KV cache too small for one request", text.index("Worst logs"))
    assert "logs/cut.log.gz: cannot read (truncated: Compressed file ended" in text
    assert text.count("logs/cut.log.gz") == 1  # the bad file is named once, with what went wrong
    assert got["errors"] == []


def test_compare_and_scan_pages_fit_a_phone_screen():
    from .test_formats import compare_html, fleet_docs, scan_html

    for page in (compare_html(), scan_html(fleet_docs())):
        got = _see(page, width=390)
        assert got["scroll"] <= got["viewport"] < 700, got["scroll"]  # wide tables scroll inside their card
        for bar in got["bars"].values():
            assert 200 < bar["w"] <= got["viewport"]
        assert got["errors"] == []


def test_compare_series_bars_share_one_scale_across_gpus():
    """compare A B C: three bars; an 80 GiB start and a 22 GiB one drawn on the same GiB scale."""
    from diagnoser.compare.comparison import compare_reports
    from diagnoser.report.compare import renderer as compare_renderer

    pair = FIXTURES / "compare" / "upgrade-0.7.3-to-0.8.2-fails"
    paths = [pair / "before-0.7.3.log", pair / "after-0.8.2.log", FIXTURES / "healthy-nearmiss-long-context-0.7.log"]
    reports = []
    for path in paths:
        with open(path, "rb") as fh:
            reports.append(diagnose(fh, path.name))
    got = _see(compare_renderer("html")(compare_reports(reports), {}))
    bars = [got["bars"][f"budget-{i}"] for i in range(3)]
    scale = _per_unit([s for bar in bars for s in bar["segs"]])
    assert max(scale) / min(scale) < 1.03, scale
    weights = [next(s for s in bar["segs"] if s["label"] == "weights") for bar in bars]
    assert len({round(w["w"]) for w in weights}) == 1  # the same 14.99 GiB is as long in every bar
    gpu = [sum(s["w"] for s in bar["segs"]) for bar in bars]
    assert abs(gpu[2] / gpu[0] - 79.1 / 22.05) < 0.05  # the bigger GPU's bar is longer by as much
    assert got["tables"]["changes"][0][-2:] == ["Δ 2", "Δ 3"]
