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

from diagnoser.engine import diagnose
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


def _run(html: str, width: int, extra: list[str]) -> subprocess.CompletedProcess[str]:
    browser = _need_browser()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html.replace("<head>", "<head>" + CATCH, 1).replace("</body>", PROBE + "</body>"),
                        encoding="utf-8")
        return subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp}/profile", f"--window-size={width},2400",
                               "--enable-logging=stderr", "--v=0", *extra, page.as_uri()],
                              capture_output=True, text=True, timeout=120)


def _probe(html: str, width: int = 1000) -> dict:
    import json

    done = _run(html, width, ["--dump-dom", "--virtual-time-budget=3000"])
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
