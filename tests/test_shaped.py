"""Keyword-dense logs (issue 16 item 12): the shape fast paths give exactly what the slow paths give."""

from __future__ import annotations

import io

from diagnoser import shaped
from diagnoser.engine import diagnose_text, prefilter_for
from diagnoser.keywords import KeywordIndex
from diagnoser.reader import ReadStats, _physical_to_lines, read_lines
from diagnoser.redact import Redactor
from diagnoser.report.model import report_dict
from diagnoser.rules import builtin_rules
from diagnoser.series import MAX_WINDOWS

V0 = ("INFO 05-01 10:00:{s:02d} metrics.py:351] Avg prompt throughput: {a} tokens/s, Avg generation throughput: "
      "{b} tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: {w} reqs, GPU KV cache usage: {k}%, CPU KV "
      "cache usage: 0.0%.")
V1 = ("INFO 05-01 10:00:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {a} tokens/s, Avg generation "
      "throughput: {b} tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: {k}%, Prefix cache hit "
      "rate: 0.0%")


def _dense_lines() -> list[str]:
    out = []
    for i in range(40):
        values = {"s": i % 60, "a": f"{i * 7 % 90}.{i % 10}", "b": f"{i * 13 % 70}.5", "r": i % 30, "w": i % 4,
                  "k": f"{i % 9}.{i % 7}"}
        out += [V0.format(**values), V1.format(**values)]
    for d in "18":  # twice each (the second in the same shape): something the slow path must see in each
        v = {"s": int(d), "a": f"{d}.0", "b": f"2.{d}", "r": d, "w": 0, "k": f"5.{d}"}
        out += [
            V1.format(**v) + f" --api-key sk-abcdefghijklmnopqrstuvw{d}",  # a secret
            "\x1b[32m" + V0.format(**v) + "\x1b[0m",  # colour
            V0.format(**v) + "\r",  # CRLF
            V0.format(**v) + " " + V1.format(**v),  # a flattened paste: two records
            f"(EngineCore_0 pid=4{d}) " + V1.format(**v),  # a process tag
            V1.format(**v) + "   ",  # trailing blanks
            f"WARNING 05-01 10:00:0{d} scheduler.py:1089] Sequence group 1{d} is preempted by PreemptionMode.RECOMPUTE "
            f"mode because there is not enough KV cache space. total_num_cumulative_preemption=1{d}",
        ]
    return out


def test_dense_block_gives_the_slow_paths_lines(monkeypatch):
    """Every line of a keyword-dense block comes out as the per-line path makes it, fast or not."""
    monkeypatch.setattr(shaped, "_verdicts", {})
    lines = _dense_lines()
    data = ("\n".join(lines) + "\n").encode()
    got = list(read_lines(io.BytesIO(data), prefilter_for(builtin_rules()), Redactor(), ReadStats()))
    slow_redactor = Redactor()
    want = [ln for n, raw in enumerate(data.split(b"\n")[:-1], 1)
            for ln in _physical_to_lines(n, raw, slow_redactor, False)]
    assert got == want
    assert any("[REDACTED" in ln.text or "sk-abc" not in ln.text for ln in got if "api-key" in ln.text)
    assert sum(shaped._verdicts.values()) >= 2  # the fast path was taken (V0 and V1 shapes)
    assert False in shaped._verdicts.values()  # and refused for the flattened paste


def test_shape_cache_tests_keywords_with_digits_on_each_line():
    index = KeywordIndex([["cuda error 700"], ["running:"], ["engine 000"]])
    cache = shaped.ShapeCache(index)
    for text in ("Running: 12 reqs, CUDA error 700", "Running: 12 reqs, CUDA error 701",
                 "Engine 001: Running: 3", "Engine 000: Running: 3", "nothing here 000"):
        assert cache.matches(text) == index.matches(text.lower()), text


def test_digit_values_a_rule_reads_are_read_on_every_line():
    """`Preemptions: [1-9]...` is not shape-safe: a 0 then a 7 in the same shape, and the 7 is a preemption."""
    stats = [V1.format(s=i, a="100.0", b="200.0", r=20, w=0, k="50.0") + f", Preemptions: {n}"
             for i, n in enumerate([0, 0, 0, 7, 0])]
    report = diagnose_text("\n".join(stats) + "\n")
    found = {f.rule.id: f for f in report.findings}
    assert found["preemption"].facts["preemptions_interval"] == 7  # the line's own hit, not only the series'
    assert found["preemption"].facts["preemptions"] == 7
    assert found["preemption"].line == 4


def _collapsing_stats(lines: int) -> str:
    import random

    rng = random.Random(7)
    out = []
    for i in range(lines):
        out.append(V0.format(s=i % 60, a=f"{rng.random() * 900:.1f}", b=f"{rng.random() * 300:.1f}",
                             r=rng.randint(0, 64), w=rng.randint(0, 5), k=f"{rng.random() * 90:.1f}")
                   .replace("10:00:", f"{10 + i // 3600:02d}:{i // 60 % 60:02d}:"))
    return "\n".join(out) + "\n"


def test_windows_no_rule_reports_are_counted_not_held(monkeypatch):
    """A stats-only log's throughput-collapse windows: the report is what holding every window gives, while
    only the first MAX_WINDOWS and the ones a rule reports are held."""
    from diagnoser import matcher

    text = _collapsing_stats(6000)
    held = diagnose_text(text)
    windows = held.series.tracks["0"].windows["throughput-collapse"]
    assert windows.total > 500
    reported = next(f for f in held.findings if f.rule.id == "throughput-collapse").facts["hits"]
    assert len(windows) <= MAX_WINDOWS + reported < windows.total // 2
    monkeypatch.setattr(matcher.Matcher, "series_keep", lambda self, kind, facts: True)
    monkeypatch.setattr(matcher.Matcher, "series_evidence", lambda self, kind: None)  # and every line of each
    every = diagnose_text(text)
    assert len(every.series.tracks["0"].windows["throughput-collapse"]) == windows.total
    assert report_dict(held, series=True) == report_dict(every, series=True)
