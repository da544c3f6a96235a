"""Keyword-dense logs (issue 16 item 12): the shape fast paths give exactly what the slow paths give."""

from __future__ import annotations

import io

from diagnoser.analysis.pipeline import diagnose_text, prefilter_for
from diagnoser.analysis.serving.spill import MAX_WINDOWS
from diagnoser.ingest import dense as shaped
from diagnoser.ingest.clean import physical_to_lines
from diagnoser.ingest.keywords import KeywordIndex
from diagnoser.ingest.reader import ReadStats, read_lines
from diagnoser.ingest.redact import Redactor
from diagnoser.report.model import report_dict
from diagnoser.rules.loader import builtin_rules

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
            for ln in physical_to_lines(n, raw, slow_redactor, False)]
    assert got == want
    assert any("[REDACTED" in ln.text or "sk-abc" not in ln.text for ln in got if "api-key" in ln.text)
    assert sum(map(bool, shaped._verdicts.values())) >= 2  # the fast path was taken (V0 and V1 shapes)
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
    from diagnoser.analysis import matcher

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


# -- process-tagged lines, the per-point series, windows past their evidence (issue 16 item 12, issue 13) -----

ANSI_API = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m "
CORE = "(EngineCore_DP0 pid=187) "


def _mixed_log() -> str:
    """Tagged and untagged V0 and V1 stats lines, V0 preemption warnings, a shape that changes midway (a tag
    that appears, a process that changes), a secret, a queue that grows and a KV cache that fills."""
    out = []
    for i in range(240):
        w = i // 8 if i < 160 else 0  # waiting grows for 160 intervals, then drains
        values = {"s": i % 60, "a": f"{100 + i * 7 % 900}.{i % 10}", "b": f"{300 - i % 250}.5", "r": 20 + i % 30,
                  "w": w, "k": f"{min(99.9, 40 + i * 0.4):.1f}"}
        minute = f"10:{i // 60:02d}:"
        v1, v0 = V1.format(**values).replace("10:00:", minute), V0.format(**values).replace("10:00:", minute)
        tag = ANSI_API if i >= 80 else ""  # the shape changes midway: the tag comes with a restart
        out.append(tag + v1)
        out.append((CORE if i % 3 else "(VllmWorker TP1 pid=42) ") + v0)
        if i % 40 == 7:
            out.append(f"WARNING 05-01 {minute}{i % 60:02d} scheduler.py:1089] Sequence group {i} is preempted by "
                       f"PreemptionMode.{'SWAP' if i > 100 else 'RECOMPUTE'} mode because there is not enough KV "
                       f"cache space. total_num_cumulative_preemption={i}")
        if i == 50:
            out.append(tag + v1 + " --api-key sk-abcdefghijklmnopqrstuvwxyz0123")
    return "\n".join(out) + "\n"


def test_tagged_lines_take_the_fast_path_with_the_slow_paths_lines(monkeypatch):
    """A line with vLLM's process tag, coloured or not, comes out of the fast path as the per-line path makes it
    (process, pid, rank, the raw text without the colour escapes, the message)."""
    monkeypatch.setattr(shaped, "_verdicts", {})
    data = _mixed_log().encode()
    got = list(read_lines(io.BytesIO(data), prefilter_for(builtin_rules()), Redactor(), ReadStats()))
    slow_redactor = Redactor()
    want = [ln for n, raw in enumerate(data.split(b"\n")[:-1], 1)
            for ln in physical_to_lines(n, raw, slow_redactor, False)]
    assert got == want
    tagged = [ln for ln in got if ln.process == "APIServer"]
    assert tagged and all(ln.pid == 1 and ln.raw.startswith("(APIServer pid=1) INFO") for ln in tagged)
    assert {ln.rank for ln in got if ln.process == "VllmWorker TP1"} == {1}
    assert all("sk-abc" not in ln.text for ln in got)
    good = [key for key, ok in shaped._verdicts.items() if ok]
    assert any(key.startswith(b"\x1b[0;00m(APIServer pid=0)") for key in good)  # the coloured tag went fast
    assert any(key.startswith(b"(EngineCore_DP0 pid=000)") for key in good)


def test_fast_paths_give_the_slow_paths_report(monkeypatch):
    """The whole report (findings, facts, numbers, the serving series) of a mixed keyword-dense log is what the
    per-line reader gives: every block read the general way, every shape plan bypassed."""
    from diagnoser.analysis import matcher
    from diagnoser.ingest import reader

    text = _mixed_log()
    fast = report_dict(diagnose_text(text), series=True)
    monkeypatch.setattr(reader, "block_lines", _general_block_lines(reader.block_lines))
    monkeypatch.setattr(matcher.Matcher, "series_evidence", lambda self, kind: None)
    slow = report_dict(diagnose_text(text), series=True)
    assert fast == slow
    found = {f["rule"]: f for f in fast["findings"]}
    assert {"preemption", "queue-growth"} <= set(found)
    assert found["preemption"]["facts"]["mode"] == "SWAP"  # the last warning's, typed once per shape
    assert found["preemption"]["facts"]["preemptions_total"] == 207


def _general_block_lines(block_lines):
    """selection.block_lines with the dense fast path refused (is_dense answers False)."""
    def general(*args, **kwargs):
        from diagnoser.ingest import selection as s

        keep = s.is_dense
        s.is_dense = lambda *a, **k: False
        try:
            yield from block_lines(*args, **kwargs)
        finally:
            s.is_dense = keep
    return general


def test_window_facts_computed_when_asked_are_the_window_facts():
    from diagnoser.analysis.serving.facts import LocalFacts, window_facts

    report = diagnose_text(_collapsing_stats(600))
    windows = [w for t in report.series.tracks.values() for ws in t.windows.values() for w in ws]
    assert len({w.kind for w in windows}) >= 2
    for w in windows:
        full, lazy = window_facts(w, None, {}, None), LocalFacts(w)
        assert dict(lazy) == full
        for name in [*full, "and", "growth_per_min", "_gen", "nothing"]:
            assert lazy.get(name, "absent") == full.get(name, "absent"), name


def test_reported_windows_past_their_evidence_hold_no_text():
    """A long stats-only log: the throughput-collapse windows a rule reports are held, those past the first
    distinct evidence lines without text (only their place), and the finding still shows the first lines."""
    report = diagnose_text(_collapsing_stats(6000))
    held = [w for w in report.series.tracks["0"].windows["throughput-collapse"] if not w.dropped]
    bare = [w for w in held if w.first_line is not None and w.first_line.text == ""]
    assert len(bare) > len(held) // 2
    assert all(w.peak_line is None and w.first_line.number > 0 for w in bare)
    finding = next(f for f in report.findings if f.rule.id == "throughput-collapse")
    assert finding.facts["hits"] == len(held)
    assert all(ev.text for ev in finding.evidence)


def test_queue_growth_rate_is_the_windows_mean_generation():
    lines = []
    for i in range(30):  # 30 intervals, the queue grows from 1 to 30: one window of all of them
        lines.append(V1.format(s=0, a="100.0", b=f"{10 * (i % 7)}.5", r=8, w=i + 1, k="50.0")
                     .replace("10:00:00", f"10:{i * 10 // 60:02d}:{i * 10 % 60:02d}"))
    report = diagnose_text("\n".join(lines) + "\n")
    (window,) = report.series.tracks["0"].windows["queue-growth"]
    assert window.extra["sustained_gen_tps"] == round(sum(10 * (i % 7) + 0.5 for i in range(30)) / 30, 1)
    assert window.max_waiting == 30 and window.points == 30


def test_collapse_reference_is_the_median_of_the_six_intervals_before():
    """Six intervals at 100 tokens/s, then 45 tokens/s under the same load: one collapse window from the first
    slow interval, against a baseline of 100 (a 60 after a 100 is no collapse)."""
    gens = ["100.0", "100.0", "100.0", "100.0", "100.0", "100.0", "45.0", "45.0", "45.0", "100.0", "60.0"]
    lines = [V1.format(s=i, a="10.0", b=b, r=10, w=0, k="50.0") for i, b in enumerate(gens)]
    report = diagnose_text("\n".join(lines) + "\n")
    (window,) = report.series.tracks["0"].windows["throughput-collapse"]
    assert (window.points, window.extra["baseline_gen_tps"], window.extra["collapsed_gen_tps"]) == (3, 100.0, 45.0)
    assert window.first_line.number == 7


def test_a_malformed_number_in_a_stats_line_is_not_read():
    """'1.2.3' fits the stats fields' [\\d.]+ and is no number: that field alone is missing (it crashed the run)."""
    good = V1.format(s=1, a="10.0", b="20.0", r=3, w=0, k="40.0")
    bad = V1.format(s=0, a="1.2.3", b="20.0", r=2, w=0, k="5.5.5")
    report = diagnose_text(bad + "\n" + good + "\n")
    track = report.series.tracks["0"]
    assert track.points == 2 and track.peak == {"kv_pct": 40.0, "waiting": 0.0, "running": 3.0}
    first = track.buckets.items[0]["f"]
    assert "prompt_tps" not in first and "kv_pct" not in first and first["running"][0] == 2.0
    assert report.context.peak_kv_usage_pct == 40.0 and report.context.stats_lines == 2
