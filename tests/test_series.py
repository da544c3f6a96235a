"""The serving phase as a time series: windows exact (fixtures/expected.yaml), memory bounded, /metrics
detected by content, the JSON facts the contract names, --series, text sparklines."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import yaml

from diagnoser.analysis.pipeline import diagnose, diagnose_text
from diagnoser.analysis.serving.buckets import MAX_BUCKETS, Buckets
from diagnoser.analysis.serving.clock import Clock
from diagnoser.analysis.serving.series import Series

from .conftest import FIXTURES

CASES = [c for c in yaml.safe_load((FIXTURES / "expected.yaml").read_text()) if "windows" in c or "also" in c]


def run(name):
    with open(FIXTURES / name, "rb") as fh:
        return diagnose(fh, name)


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_saturation_windows_exact(case):
    report = run(case["file"])
    pre = [f for f in report.findings if f.rule.id == "preemption"]
    assert pre, [f.rule.id for f in report.findings]
    got = pre[0].facts.get("windows") or []
    want = case.get("windows", [])
    assert len(got) == len(want), got
    for w, g in zip(want, got, strict=True):
        for key, value in w.items():
            assert g[key] == value, (key, g)
    ids = {f.rule.id for f in report.findings} - {"preemption"}
    assert ids == set(case.get("also", [])), ids


def test_contract_facts_present():
    f = next(f for f in run("serving-v1-0.12-3h.log").findings if f.rule.id == "preemption")
    for name in ("windows", "saturated_share", "peak_kv_usage_pct", "max_waiting_reqs", "max_running_reqs"):
        assert f.facts.get(name) is not None, name
    assert set(f.facts["windows"][0]) >= {"start", "end", "seconds", "peak_kv_usage_pct", "max_waiting", "preemptions"}
    assert "--max-num-seqs 34" in f.command


def test_healthy_busy_server_gets_no_warning():
    report = run("healthy-busy-v1-0.10.log")
    assert report.context.peak_kv_usage_pct > 95
    assert [f.rule.id for f in report.findings if f.severity != "info"] == []


def test_error_burst_counts_status_codes():
    f = next(f for f in run("serving-v1-0.12-3h.log").findings if f.rule.id == "error-burst")
    assert set(f.facts["status_codes"]) == {"500", "503"}
    assert f.facts["errors"] == sum(f.facts["status_codes"].values())


def test_dp_engines_are_separate_series():
    report = run("serving-v1-dp2-0.10.log")
    assert sorted(report.series.tracks) == ["0", "1"]
    assert all(w.engine == "1" for w in report.series.windows("saturation"))


def test_buckets_stay_bounded_and_keep_extremes():
    b = Buckets()
    for i in range(100_000):
        b.add(float(i), {"kv_pct": 100.0 if i == 77_777 else 50.0})
    assert len(b.items) <= MAX_BUCKETS
    assert max(x["f"]["kv_pct"][1] for x in b.items) == 100.0
    assert sum(x["n"] for x in b.items) == 100_000


@pytest.mark.parametrize("seed", range(5))
def test_each_bucket_sums_up_exactly_the_points_it_covers_after_any_number_of_halvings(seed):
    import random

    rng = random.Random(seed)
    b = Buckets(capacity=rng.choice([3, 8, 16]))
    raw = []
    for i in range(rng.randrange(200, 2000)):
        values = {k: float(rng.randrange(-50, 50)) for k in rng.sample(["kv_pct", "running", "waiting", "gen_tps"],
                                                                        rng.randrange(1, 5))}
        raw.append((float(i), values))
        b.add(float(i), dict(values))
    assert b.width >= 8 and sum(x["n"] for x in b.items) == len(raw)
    for bucket in b.items:
        covered = [v for t, v in raw if bucket["t0"] <= t <= bucket["t1"]]
        assert len(covered) == bucket["n"]
        for k, (lo, hi, total, n) in bucket["f"].items():
            mine = [v[k] for v in covered if k in v]
            assert (lo, hi, total, n) == (min(mine), max(mine), sum(mine), len(mine))


def test_year_less_clock_crosses_new_year():
    from diagnoser.ingest.line import parse_line

    c = Clock()
    t1 = c.of_line(parse_line(1, "INFO 12-31 23:59:50 [loggers.py:1] x"))
    t2 = c.of_line(parse_line(2, "INFO 01-01 00:00:00 [loggers.py:1] x"))
    assert t2 - t1 == 10


def test_metrics_single_scrape_is_state_now():
    report = run("metrics-single-0.11.prom")
    f = report.findings[0]
    assert f.rule.id == "preemption" and f.facts["preemptions"] == 1312
    assert f.facts.get("windows") is None and f.facts.get("saturated_share") is None
    assert report.context.num_gpu_blocks == 1260


def test_metrics_counter_reset_and_rates():
    text = "\n".join([
        "# scrape at 2026-01-01T00:00:00Z", 'vllm:generation_tokens_total{model_name="m"} 1000',
        'vllm:num_requests_running{model_name="m"} 4',
        "# scrape at 2026-01-01T00:00:10Z", 'vllm:generation_tokens_total{model_name="m"} 21000',
        'vllm:num_requests_running{model_name="m"} 4',
    ]) + "\n"
    report = diagnose_text(text)
    pts = report.series.to_dict()["engines"]["0"]["points"]
    assert pts[-1]["gen_tps"]["mean"] == 2000.0
    assert report.series.source == "metrics"


def test_non_metrics_text_is_not_a_scrape():
    s = Series()
    report = diagnose(io.BytesIO(b"vllm: the name of a tool 12\nhello world\n"))
    assert report.series is None and s.empty


def test_cli_series_flag_and_text_sparkline():
    path = str(FIXTURES / "serving-v1-0.12-3h.log")
    out = subprocess.run([sys.executable, "-m", "diagnoser", "--format", "json", "--series", path],
                         capture_output=True, text=True)
    doc = json.loads(out.stdout)
    assert doc["series"]["engines"]["0"]["points"] and "kv_pct" in doc["series"]["engines"]["0"]["points"][0]
    plain = subprocess.run([sys.executable, "-m", "diagnoser", "--format", "json", path], capture_output=True, text=True)
    assert "series" not in json.loads(plain.stdout)
    text = subprocess.run([sys.executable, "-m", "diagnoser", "--no-color", path], capture_output=True, text=True).stdout
    spark = [ln for ln in text.splitlines() if ln.strip().startswith(("KV %", "waiting"))]
    assert len(spark) >= 2 and "█" in spark[0]


def _stats_log(lines: int) -> str:
    import random

    rng = random.Random(4)
    out = []
    for i in range(lines):
        ts = f"05-01 10:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i % 10}"
        engine = i % 2  # two engines: their windows interleave in line order
        out.append(f"INFO {ts} [loggers.py:123] Engine {engine:03d}: Avg prompt throughput: {rng.random() * 900:.1f} "
                   f"tokens/s, Avg generation throughput: {rng.random() * 300:.1f} tokens/s, Running: "
                   f"{rng.randint(8, 64)} reqs, Waiting: {rng.randint(0, 12)} reqs, GPU KV cache usage: "
                   f"{rng.random() * 99:.1f}%, Prefix cache hit rate: 0.0%")
    return "\n".join(out) + "\n"


def test_folded_window_hits_give_the_same_findings(monkeypatch):
    """A long series of windows keeps only the hits a finding shows whole; its facts are those of all hits."""
    from diagnoser.analysis import fold
    from diagnoser.report.model import report_dict

    text = _stats_log(6000)
    folded = diagnose_text(text)
    windows = sum(t.windows["throughput-collapse"].total for t in folded.series.tracks.values())
    assert windows > 300
    monkeypatch.setattr(fold.Firsts, "add", lambda self, i, h, kept: self.kept.append((i, h)))
    whole = diagnose_text(text)
    assert any(f.rule.id == "throughput-collapse" for f in folded.findings)
    assert report_dict(folded, series=True) == report_dict(whole, series=True)


# -- a log of any length holds a bounded number of windows (issue 16 item 12) ------------------------------------


def _saturated_every_minute(n: int) -> str:
    """n V1 stats lines 61 s apart, each with the KV cache full and requests waiting: n saturation windows of one
    interval each (points more than MERGE_GAP apart are separate windows), their figures cycling through 10."""
    import datetime

    start = datetime.datetime(2025, 3, 1, tzinfo=datetime.timezone.utc)
    out = []
    for i in range(n):
        t = start + datetime.timedelta(seconds=61 * i)
        out.append(f"INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: 100.0 tokens/s, "
                   f"Avg generation throughput: 50.0 tokens/s, Running: {20 + i % 10} reqs, Waiting: {1 + i % 7} reqs, "
                   f"GPU KV cache usage: {95.5 + i % 10 * 0.4:.1f}%, Prefix cache hit rate: 0.0%")
    return "\n".join(out) + "\n"


def _live_windows() -> int:
    import gc

    from diagnoser.analysis.serving.detectors import Window

    gc.collect()
    return sum(isinstance(o, Window) for o in gc.get_objects())


def test_ten_thousand_windows_report_what_ten_do():
    """The preemption finding of 10,000 saturation windows: one hit per window, the same figures and the same
    first evidence as 10 windows of the same cycle, every window's seconds summed; its listing stops at 100."""
    from diagnoser.analysis.fold import MAX_LISTED
    from diagnoser.report.model import report_dict

    small, large = (diagnose_text(_saturated_every_minute(n)) for n in (10, 10_000))
    (a,), (b,) = ([f for f in r.findings if f.rule.id == "preemption"] for r in (small, large))
    assert (a.occurrences, b.occurrences) == (10, 10_000)
    for name in ("seconds", "peak_kv_usage_pct", "max_waiting_reqs", "max_running_reqs", "series_preemptions",
                 "start"):
        assert a.facts.get(name) == b.facts.get(name), name
    assert (a.facts["seconds"], a.facts["peak_kv_usage_pct"], a.facts["max_waiting_reqs"]) == (61, 99.1, 7)
    # the first window is one interval of vLLM's default 10 s (no spacing seen yet), every other one 61 s
    assert (a.facts["_saturated_seconds"], b.facts["_saturated_seconds"]) == (61 * 10 - 51, 61 * 10_000 - 51)
    assert b.facts["saturated_share"] == round((61 * 10_000 - 51) / (61 * 10_000), 4)
    assert [ev.text for ev in a.evidence] == [ev.text for ev in b.evidence] and len(a.evidence) == 6
    # the listing (`windows` is derived from it, up to the sandbox's size of a fact)
    assert (len(a.facts["_window"]), len(b.facts["_window"])) == (10, MAX_LISTED)
    assert b.facts["_window"][:10] == a.facts["_window"] == a.facts["windows"]
    assert b.facts["end"] == large.series.clock.label(large.series.tracks["0"].last_t)
    listed = report_dict(large, series=True)["series"]["engines"]["0"]["windows"]["saturation"]
    assert len(listed) == 100 and listed[:10] == report_dict(small, series=True)["series"]["engines"]["0"][
        "windows"]["saturation"]


@pytest.mark.parametrize("n", [10, 61, 250])
def test_a_finding_of_many_windows_still_says_how_many_and_the_longest(n):
    """The window count and the longest window come from the whole fold, not from the `windows` fact (which the
    sandbox caps at 10,000 printed characters: past ~60 windows it was empty, and the sentence went with it)."""
    from diagnoser.report.model import report_dict

    report = diagnose_text(_saturated_every_minute(n))
    (f,) = [f for f in report.findings if f.rule.id == "preemption"]
    assert f"Saturated {n} times, " in f.advice and "; the longest from 03-01 0" in f.advice
    listed = report_dict(report)["findings"][0]["facts"]["windows"]
    assert len(listed) == min(n, 30) and listed[0]["start"] == "03-01 00:00:00"


def test_a_long_series_holds_a_bounded_number_of_windows():
    """10,000 reported windows: at most MAX_WINDOWS held in memory per detector, as many as for 1,000, the rest
    spilled and read back in order (the series still yields every one, the HTML shades every one)."""
    from diagnoser.analysis.serving.spill import MAX_WINDOWS
    from diagnoser.report import renderer

    before = _live_windows()
    report = diagnose_text(_saturated_every_minute(10_000))
    held = _live_windows() - before
    assert held <= MAX_WINDOWS * len(report.series.tracks["0"].windows)
    smaller = diagnose_text(_saturated_every_minute(1_000))
    assert _live_windows() - before - held == held
    del smaller
    windows = list(report.series.windows("saturation"))
    assert [w.index for w in windows] == list(range(10_000))
    first = report.series.tracks["0"].first_t
    assert [w.start for w in windows[98:102]] == [first + 61 * i for i in range(98, 102)]
    page = renderer("html")([report])
    assert page.count('<rect class="sat"') == 10_000 * page.count('class="chart"') > 0  # every window, each chart


@pytest.mark.parametrize("failure", ["no file", "disk full"])
def test_windows_stay_in_memory_when_they_cannot_be_spilled(monkeypatch, failure):
    """No temporary file (no $TMPDIR), or one that fills up after its first batch: the same report, every format."""
    import errno
    import tempfile

    from diagnoser.analysis.serving.spill import SPILL_BATCH
    from diagnoser.report import renderer

    text = _saturated_every_minute(3_000)
    spilled = diagnose_text(text)
    real = tempfile.TemporaryFile

    class Full(io.BufferedRandom):
        writes = 0

        def write(self, data):
            Full.writes += 1
            if Full.writes > 1:
                super().write(data[:100])  # a part of the batch lands before the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(data)

    def temporary(*args, **kwargs):
        if failure == "no file":
            raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found")
        return Full(real(*args, buffering=0, **kwargs))

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary)
    kept = diagnose_text(text)
    assert failure == "no file" or Full.writes == 2 < 3_000 // SPILL_BATCH
    for fmt in ("json", "text", "html"):
        assert renderer(fmt)([kept], {"series": True}) == renderer(fmt)([spilled], {"series": True}), fmt
    assert [w.index for w in kept.series.windows("saturation")] == list(range(3_000))
