"""Logs whose shape made the doctor slow (issue 29, item 6), tested small.

- 3-line tracebacks with distinct exception types: each became a fallback group whose advice was rendered,
  though one fallback finding is printed (94 s and 508 MB for a log under 50 MB). Advice is rendered only for
  the findings a report keeps.
- Hundreds of thousands of `ERROR foo` lines (60 s for 400k): keyword-dense input stays near the documented
  cost per line, measured against a healthy log of the same size in the same run (a loaded machine slows both).
"""

from __future__ import annotations

import io
import time
from pathlib import Path

from diagnoser.analysis import advise
from diagnoser.analysis.pipeline import diagnose

from .conftest import run_doctor

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "fixtures" / "healthy-v1-0.10.log"


def tracebacks(n: int) -> bytes:
    return "".join(f'Traceback (most recent call last):\n  File "/app/worker.py", line {i % 900 + 1}, in <module>\n'
                   f"Worker{i}Error: task {i} failed\n" for i in range(n)).encode()


def test_advice_is_rendered_only_for_reported_findings(monkeypatch):
    calls = []
    real = advise.Advisor._render

    def counting(self, finding, ctx, ctx_dict):
        calls.append(finding.rule.id)
        return real(self, finding, ctx, ctx_dict)

    monkeypatch.setattr(advise.Advisor, "_render", counting)
    report = diagnose(io.BytesIO(tracebacks(2000)), "tb.log")
    assert len(report.findings) >= 1
    assert len(calls) <= len(report.findings) + 2, (len(calls), len(report.findings))


def _timed(path: Path) -> float:
    start = time.monotonic()
    res = run_doctor("--format", "json", str(path), timeout=300)
    assert res.returncode in (0, 1), res.stderr
    return time.monotonic() - start
