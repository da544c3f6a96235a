"""error-burst shows the failing access lines as its evidence: which ones, redacted, and a bounded number of them."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from diagnoser.analysis.hits import MAX_EVIDENCE
from diagnoser.analysis.matcher import Matcher
from diagnoser.analysis.pipeline import diagnose
from diagnoser.analysis.serving.detectors import FAILING_FIRST, FAILING_PEAK, INTERVAL_FAILING
from diagnoser.analysis.serving.series import Series
from diagnoser.analysis.serving.spill import MAX_WINDOWS

from .conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]

FAILED = re.compile(r'" (5\d\d|429) ')
SECRET = "sk-proj-Zq8XvT3bLkR9mNp2WcY7hJd4FsA6gE1u"
PER_WINDOW = FAILING_FIRST + FAILING_PEAK + 1  #: the most example lines a window keeps


def _stats(i: int) -> str:
    return (f"INFO 05-19 {10 + i // 360:02d}:{i // 6 % 60:02d}:{i % 6 * 10:02d} [loggers.py:123] Engine 000: Avg "
            "prompt throughput: 500.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 20 reqs, "
            "Waiting: 0 reqs, GPU KV cache usage: 60.0%, Prefix cache hit rate: 0.0%")


def _access(port: int, code: int, path: str = "/v1/chat/completions") -> str:
    reason = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}[code]
    return f'INFO:     10.0.3.7:{port} - "POST {path} HTTP/1.1" {code} {reason}'


def burst_log(bursts: int, failing: int, secret_path: str | None = None) -> str:
    """`bursts` windows of failed requests, each of three 10-s intervals with `failing` failed requests (5xx and
    429, each line its own port) among a few good ones, 90 s of healthy intervals between them. `secret_path`:
    the first failing request's path (a query with a secret)."""
    out, i, port = [_stats(0)], 1, 10000
    for b in range(bursts):
        for _interval in range(3):
            for j in range(failing + 2):
                port += 1
                code = 200 if j < 2 else (500, 503, 429)[j % 3]
                path = secret_path if secret_path and b == 0 and code != 200 and not any(
                    FAILED.search(ln) for ln in out) else "/v1/chat/completions"
                out.append(_access(port, code, path))
            out.append(_stats(i))
            i += 1
        for _quiet in range(9):
            port += 1
            out.append(_access(port, 200))
            out.append(_stats(i))
            i += 1
    return "\n".join(out) + "\n"


def doctor(*args: str) -> subprocess.CompletedProcess[bytes]:
    """This checkout's CLI (`python -m diagnoser` from its root: an installed `vllm-doctor` may be another's)."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}  # evidence lines not cut to a terminal
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "diagnoser", *args], capture_output=True, cwd=ROOT, env=env,
                          timeout=60)


def run_text(text: str, redact: bool = True):
    return diagnose(io.BytesIO(text.encode()), "burst.log", redact=redact)


def burst_finding(report):
    return next(f for f in report.findings if f.rule.id == "error-burst")


# -- which lines ---------------------------------------------------------------------------------------------------

def test_evidence_is_first_worst_interval_and_last_failing_access_lines_in_order():
    name = "serving-v1-0.12-3h.log"
    with open(FIXTURES / name, "rb") as fh:
        f = burst_finding(diagnose(fh, name))
    source = (FIXTURES / name).read_text().splitlines()
    # the window's first two failing lines (before the stats line that opens it), the first two of its worst
    # interval (7 failures, closed at line 1840), its last failing line
    assert [ln.number for ln in f.evidence] == [1827, 1828, 1833, 1834, 1869]
    for ln in f.evidence:
        assert FAILED.search(ln.raw), ln.raw
        assert ln.raw == source[ln.number - 1]  # the line as the log has it, at its own number
    assert f.line == 1827


def test_every_evidence_line_of_a_synthetic_burst_is_a_failed_request():
    text = burst_log(bursts=2, failing=12)
    f = burst_finding(run_text(text))
    lines = text.splitlines()
    assert 1 < len(f.evidence) <= MAX_EVIDENCE
    assert [ln.number for ln in f.evidence] == sorted({ln.number for ln in f.evidence})
    for ln in f.evidence:
        assert FAILED.search(ln.raw) and ln.raw == lines[ln.number - 1], (ln.number, ln.raw)
    first_failed = next(n for n, s in enumerate(lines, 1) if FAILED.search(s))
    assert f.evidence[0].number == first_failed


def test_metrics_scrapes_still_show_the_scrape():
    """A burst read off http_requests_total has no access line: its evidence is the scrape, as before."""
    text = "\n".join([
        "# scrape at 2026-01-01T00:00:00Z", 'http_requests_total{status="2xx"} 100',
        'http_requests_total{status="5xx"} 0',
        "# scrape at 2026-01-01T00:00:10Z", 'http_requests_total{status="2xx"} 110',
        'http_requests_total{status="5xx"} 50',
    ]) + "\n"
    report = run_text(text)
    found = [f for f in report.findings if f.rule.id == "error-burst"]
    for f in found:
        assert f.evidence and all(not FAILED.search(ln.raw) for ln in f.evidence)


# -- redacted ------------------------------------------------------------------------------------------------------

def _secret_log(tmp_path):
    path = tmp_path / "burst.log"
    path.write_text(burst_log(bursts=1, failing=12, secret_path=f"/v1/chat/completions?api_key={SECRET}"))
    return path


def test_secret_in_a_failing_access_line_is_redacted_in_text_and_json(tmp_path):
    path = _secret_log(tmp_path)
    number = next(n for n, s in enumerate(path.read_text().splitlines(), 1) if SECRET in s)
    out = doctor(str(path)).stdout.decode()
    assert SECRET not in out and "sk-proj" not in out
    block = out.split("[error-burst]")[1]
    shown = re.search(rf"^\s*{number} \| (.*)$", block, re.M)
    assert shown and "«redacted" in shown.group(1) and FAILED.search(shown.group(1)), block[:1500]

    raw = doctor("--format", "json", str(path)).stdout.decode()
    assert SECRET not in raw and "sk-proj" not in raw
    doc = json.loads(raw)
    f = next(f for f in doc["findings"] if f["rule"] == "error-burst")
    ev = {e["line"]: e["text"] for e in f["evidence"]}
    assert number in ev and "«redacted:api_key»" in ev[number], f["evidence"]
    assert all(FAILED.search(t) for t in ev.values())


def test_a_redacted_access_line_is_counted_and_no_redact_shows_it(tmp_path):
    path = _secret_log(tmp_path)
    report = run_text(path.read_text())
    assert report.redactions.get("api_key", 0) >= 1
    kept = burst_finding(run_text(path.read_text(), redact=False))
    assert any(SECRET in ln.raw for ln in kept.evidence)


def test_an_authorization_looking_token_in_the_query_is_redacted():
    token = "Bearer%20" + "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    report = run_text(burst_log(bursts=1, failing=12, secret_path=f"/v1/completions?authorization={token}"))
    f = burst_finding(report)
    first = f.evidence[0]
    assert "/v1/completions?" in first.raw and "«redacted" in first.raw and "eyJ" not in first.raw, first.raw


# -- bounded -------------------------------------------------------------------------------------------------------

def test_a_huge_log_keeps_a_bounded_number_of_example_lines(monkeypatch):
    decoded: list[int] = []
    plain = Series._decode

    def counting(self, number, raw):
        decoded.append(number)
        return plain(self, number, raw)

    monkeypatch.setattr(Series, "_decode", counting)
    run_text(burst_log(bursts=3, failing=40))
    small_decoded = len(decoded)
    decoded.clear()
    report = run_text(burst_log(bursts=150, failing=400))  # 180,000 failed requests in 150 windows
    f = burst_finding(report)
    assert f.facts["errors"] == 150 * 3 * 400
    assert 1 < len(f.evidence) <= MAX_EVIDENCE
    assert all(FAILED.search(ln.raw) for ln in f.evidence)
    # only the windows whose lines can show are decoded: as many as for a small log
    assert len(decoded) == small_decoded <= 2 * PER_WINDOW
    windows = list(report.series.windows("error-burst"))
    assert len(windows) == 150
    for w in windows:
        assert w.failing is None and len(w.examples or []) <= PER_WINDOW


def test_windows_past_the_held_ones_keep_their_examples_through_the_spill(monkeypatch):
    # no evidence budget (as with several rules reading the windows): every reported window's lines are decoded,
    # and those past MAX_WINDOWS go through the spill file
    monkeypatch.setattr(Matcher, "series_evidence", lambda self, kind: None)
    text = burst_log(bursts=MAX_WINDOWS + 20, failing=30)
    lines = text.splitlines()
    report = run_text(text)
    windows = list(report.series.windows("error-burst"))
    assert len(windows) == MAX_WINDOWS + 20
    for w in windows:
        assert w.examples and len(w.examples) <= PER_WINDOW, w.index
        numbers = [ln.number for ln in w.examples]
        assert numbers == sorted(set(numbers))
        for ln in w.examples:
            assert FAILED.search(ln.raw) and ln.raw == lines[ln.number - 1], (w.index, ln.number)


def test_an_interval_keeps_its_first_failing_lines_and_its_last():
    text = burst_log(bursts=1, failing=5000)
    report = run_text(text)
    w = next(iter(report.series.windows("error-burst")))
    lines = text.splitlines()
    failed = [n for n, ln in enumerate(lines, 1) if FAILED.search(ln)]
    numbers = [ln.number for ln in w.examples]
    assert numbers[:FAILING_FIRST] == failed[:FAILING_FIRST]
    assert numbers[-1] == failed[-1]
    assert len(numbers) <= PER_WINDOW and INTERVAL_FAILING == FAILING_FIRST + 1
