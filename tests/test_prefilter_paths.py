"""The reader's fast paths find exactly the lines the plain ones do.

Past the paste-sized start of an input, request-logger and access lines are skipped where the keyword
search lands instead of being blanked beforehand, and with the `fast` extra the search is hyperscan's
instead of a regex: each must select and decode the same lines, so a diagnosis never depends on which ran.
"""

from __future__ import annotations

import io
import random
import re
from pathlib import Path

import pytest

from diagnoser.analysis.pipeline import diagnose, prefilter_for
from diagnoser.ingest import reader
from diagnoser.ingest.prefilter import Prefilter
from diagnoser.ingest.reader import ReadStats
from diagnoser.ingest.request_lines import blank_user_content, is_user_content
from diagnoser.ingest.selection import block_lines
from diagnoser.rules.loader import builtin_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
API = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m "
ACCESS = API + 'INFO:     10.0.3.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
REQUEST = (API + "INFO 05-01 10:00:00 [logger.py:39] Received request chatcmpl-1: prompt: 'why does this "
           "raise an exception? Traceback (most recent call last): File \"x.py\", line 1 CUDA out of memory "
           "error', params: SamplingParams(n=1), prompt_token_ids: [1, 2, 3], lora_request: None.")
STATS = (API + "INFO 05-01 10:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 120.3 tokens/s, Avg "
         "generation throughput: 88.1 tokens/s, Running: 12 reqs, Waiting: 3 reqs, GPU KV cache usage: 97.2%, "
         "Prefix cache hit rate: 12.0%")
WRAPPED = "x" * 60 + "\n" + "ERROR boom continues" + "\n"


def _block(seed: int) -> bytes:
    """Fixture lines shuffled with serving chatter: access, request-logger (keyword-laden) and stats lines."""
    rng = random.Random(seed)
    logs = sorted(FIXTURES.glob("*.log"))
    lines = rng.choice(logs).read_text(encoding="utf-8", errors="replace").splitlines()
    out = []
    for line in lines:
        out.append(line)
        for _ in range(rng.randint(0, 3)):
            out.append(rng.choice([ACCESS, REQUEST, STATS, ACCESS, WRAPPED.rstrip("\n"), ""]))
    return ("\n".join(out) + "\n").encode()


def _lines(block: bytes, prefilter: Prefilter, fast: bool) -> list[tuple]:
    st = ReadStats()
    if fast:
        got = block_lines(block, 0, prefilter, None, 0, st, blank=is_user_content)
    else:
        got = block_lines(blank_user_content(block), 0, prefilter, None, 0, st)
    return [(ln.number, ln.text, ln.raw, ln.follow) for ln in got]


@pytest.mark.parametrize("seed", range(12))
def test_skipping_user_content_in_place_selects_the_lines_blanking_does(seed):
    prefilter = prefilter_for(builtin_rules())
    block = _block(seed)
    assert _lines(block, prefilter, fast=True) == _lines(block, prefilter, fast=False)


def test_is_user_content_is_blank_user_content_line_by_line():
    block = b"\n".join([ACCESS.encode(), REQUEST.encode(), STATS.encode(), b"plain"]) + b"\n"
    starts = [0]
    for i, byte in enumerate(block[:-1]):
        if byte == 10:
            starts.append(i + 1)
    blanked = blank_user_content(block).split(b"\n")
    assert [is_user_content(block, s) for s in starts] == [piece == b"" for piece in blanked[:-1]]
    assert [is_user_content(block, s) for s in starts] == [True, True, False, False]


@pytest.mark.parametrize("seed", range(6))
def test_hyperscan_and_the_regex_find_the_same_lines(seed, monkeypatch):
    pytest.importorskip("hyperscan")
    words = prefilter_for(builtin_rules()).keywords
    fast = Prefilter([w.decode() for w in words])
    monkeypatch.setenv("VLLM_DOCTOR_PURE_PYTHON", "1")
    plain = Prefilter([w.decode() for w in words])
    assert fast.accelerated and not plain.accelerated
    monkeypatch.setattr(Prefilter, "SMALL_INPUT", 0)  # the engines, not the keyword-by-keyword start
    block = _block(seed).upper() if seed % 2 else _block(seed)  # case-insensitive both ways
    assert fast.hit_lines(block) == plain.hit_lines(block)


@pytest.mark.parametrize("seed", range(6))
def test_a_small_input_searched_keyword_by_keyword_finds_the_lines_an_engine_does(seed, monkeypatch):
    words = [w.decode() for w in prefilter_for(builtin_rules()).keywords]
    block = _block(seed).upper() if seed % 2 else _block(seed)
    small = Prefilter(words)
    monkeypatch.setattr(Prefilter, "SMALL_INPUT", len(block))
    got = small.hit_lines(block)
    assert small._hs is None and small._regex is None  # neither engine was built
    monkeypatch.setattr(Prefilter, "SMALL_INPUT", 0)
    engine = Prefilter(words)
    assert got == engine.hit_lines(block) and len(got) > 10
    lines = block.split(b"\n")
    assert [small.holds(line) for line in lines] == [bool(engine.hit_lines(line)) for line in lines]


def test_redundant_keywords_are_the_ones_holding_another():
    words = ["out of memory", "memory", "cuda out of memory", "oom", "room", "zoom", "nccl error", "nccl",
             "error", "errors", "xerror"]
    kept = Prefilter(words).keywords
    encoded = {w.encode() for w in words}
    assert kept == sorted(w for w in encoded if not any(o != w and o in w for o in encoded))
    assert kept == [b"error", b"memory", b"nccl", b"oom"]


def test_a_log_past_the_paste_size_is_diagnosed_as_the_same_log_read_the_plain_way(monkeypatch):
    """The same failure after 9 MB of serving chatter: found, on the same line, by either reading."""
    fixture = (FIXTURES / "kv-cache-too-small-v1-0.16.log").read_bytes()
    chatter = ("\n".join([ACCESS] * 40 + [REQUEST, STATS]) + "\n").encode()
    data = chatter * (9_000_000 // len(chatter)) + fixture
    fast = diagnose(io.BytesIO(data), "x", builtin_rules())
    monkeypatch.setattr(reader, "PASTE_MAX", len(data) + 1)  # the whole input takes the plain path
    plain = diagnose(io.BytesIO(data), "x", builtin_rules())
    assert [(f.rule.id, f.line, f.facts) for f in fast.findings] == [(f.rule.id, f.line, f.facts) for f in plain.findings]
    assert "kv-cache-too-small" in [f.rule.id for f in fast.findings]


def test_folded_aggregate_hits_give_the_finding_the_whole_group_gives(monkeypatch):
    """300 preemption warnings over two ranks: folding them as they come changes no figure of the finding."""
    from diagnoser.analysis import advise, fold

    lines = ["INFO 05-01 10:00:00 llm_engine.py:70] Initializing an LLM engine (v0.6.3) with config: model='org/m'"]
    for i in range(300):
        lines.append(f"[rank{i % 2}]: WARNING 05-01 10:{i // 60:02d}:{i % 60:02d} scheduler.py:1089] Sequence group "
                     f"{i} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
                     f"total_num_cumulative_preemption={i + 1}")
    data = ("\n".join(lines) + "\n").encode()

    def figures(report):
        return [(f.rule.id, f.line, f.end_line, f.facts, f.ranks, f.occurrences, [e.text for e in f.evidence],
                 f.advice) for f in report.findings]

    folded = diagnose(io.BytesIO(data), "x", builtin_rules())
    kept = []
    original_add, original_findings = fold.Fold.add, advise.Advisor.findings
    monkeypatch.setattr(fold.Fold, "add", lambda self, hit: kept.append(hit) or original_add(self, hit) or True)
    monkeypatch.setattr(advise.Advisor, "findings", lambda self, hits, ctx, folds=None: original_findings(self, hits, ctx))
    whole = diagnose(io.BytesIO(data), "x", builtin_rules())
    assert len(kept) == 300
    assert figures(folded) == figures(whole)
    assert folded.findings[0].facts["preemptions"] == 300 and folded.findings[0].occurrences == 300


@pytest.mark.parametrize("pure", [False, True])
def test_keyword_index_finds_the_same_keywords_keyword_by_keyword_and_by_engine(pure, monkeypatch):
    """A small input's first lines are tested keyword by keyword; later lines by hyperscan or the trie regex."""
    from diagnoser.ingest import keywords

    if pure:
        monkeypatch.setenv("VLLM_DOCTOR_PURE_PYTHON", "1")
    rules = builtin_rules()
    lists = [[k.decode() if isinstance(k, bytes) else k for k in p.keywords] for r in rules for p in r.patterns]
    texts = [t.lower() for t in _block(3).decode().splitlines() if t] * 3
    small, engine = keywords.KeywordIndex(lists), keywords.KeywordIndex(lists)
    monkeypatch.setattr(keywords, "HS_AFTER", len(texts))
    monkeypatch.setattr(keywords, "SMALL_TESTS", len(texts) * len(small.words))
    got = [small.present(t) for t in texts]
    assert small._search is None and small._hs is None  # neither engine was built
    monkeypatch.setattr(keywords, "HS_AFTER", 0)
    assert got == [engine.present(t) for t in texts] and sum(map(len, got)) > 10
    assert (engine._search is not None) == pure


@pytest.mark.parametrize("seed", range(3))
def test_a_block_pattern_finds_the_same_matches_in_short_and_long_ranges(seed, monkeypatch):
    pytest.importorskip("hyperscan")
    from diagnoser.analysis.serving.stats_lines import BLOCK_ERROR
    from diagnoser.ingest import keywords

    block = _block(seed).replace(b'" 200 OK', b'" 503 Service Unavailable', 3)
    short = [m.span() for m in BLOCK_ERROR.finditer(block)]
    monkeypatch.setattr(keywords, "SMALL_BLOCK", 0)
    long = keywords.BlockPattern(BLOCK_ERROR.pattern, BLOCK_ERROR.reach)
    assert [m.span() for m in long.finditer(block)] == short and len(short) == 3
    assert long._hs is not None and long.search(block)


@pytest.mark.parametrize("pure", [False, True])
def test_any_in_agrees_with_a_substring_test_per_word(pure, monkeypatch):
    """KeywordIndex.any_in: one hyperscan pass over a long text (stopped at the first word), else `in` tests."""
    from diagnoser.ingest import keywords

    if pure:
        monkeypatch.setenv("VLLM_DOCTOR_PURE_PYTHON", "1")
    words = ["pid=", "ERROR", ' File "', "Exit: ", "é!"]
    index = keywords.KeywordIndex([w] for w in words)
    filler = "x" * keywords.SMALL_BLOCK
    for text in [filler, filler + "error", filler + "pid=", "ERROR" + filler, filler + "é!", filler + "e!"]:
        assert index.any_in(text) == any(w in text for w in words)
    assert (index._hs is not None) == (not pure and keywords.BlockPattern(re.compile(b"x"), 1).accelerated)


@pytest.mark.parametrize("seed", range(3))
def test_without_hyperscan_a_big_log_is_read_as_with_it(seed, monkeypatch):
    """Without the `fast` extra, access and request-logger lines are blanked before the keyword regex runs
    (the regex crawls over them): the same lines come out, with the same numbers, as with hyperscan."""
    pytest.importorskip("hyperscan")
    chatter = ("\n".join([ACCESS] * 40 + [REQUEST, STATS, WRAPPED]) + "\n").encode()
    data = b"".join(_block(s) + chatter * 20 for s in range(seed, seed + 30))
    assert len(data) > 2 * reader.BLOCK

    def read() -> tuple[list[tuple], Prefilter]:
        pre = Prefilter([w.decode() for w in prefilter_for(builtin_rules()).keywords])
        st = ReadStats()
        got = [(ln.number, ln.text, ln.raw, ln.follow) for ln in reader.read_lines(io.BytesIO(data), pre, None, st)]
        return [*got, st.lines], pre

    fast, engine = read()
    monkeypatch.setenv("VLLM_DOCTOR_PURE_PYTHON", "1")
    plain, regex = read()
    assert engine.accelerated and not regex.accelerated and regex.plain(1)
    assert plain == fast and len(fast) > 100


def test_a_long_text_asked_again_gets_its_own_keywords():
    """KeywordIndex.present remembers the last long text: asked again (equal, not the same object) it answers
    from memory, and any other text, even of the same length, is searched."""
    from diagnoser.ingest import keywords

    index = keywords.KeywordIndex([["error"], ["oom"], ["nccl error"]])
    pad = "x" * keywords.LONG_TEXT
    first, other = pad + " nccl error", pad + " cuda oom!!"
    assert index.present(first) == ["error", "nccl error"]
    assert index.present("".join([pad, " nccl error"])) == ["error", "nccl error"]
    assert index.present(other) == ["oom"] and index.present(pad) == []
    got = index.present(first)
    got.append("mutated")
    assert index.present(first) == ["error", "nccl error"]


@pytest.mark.parametrize("seed", range(4))
def test_access_counts_split_at_the_hits_stats_lines_are_the_counts_a_search_of_the_block_gives(seed, monkeypatch):
    """The reader hands the series its keyword lines, among them the stats lines that close each interval of
    access lines: the requests and failed statuses per interval are those a search of the block finds (a
    prompt quoting a stats line, which only the search sees, splits nothing a report shows)."""
    from diagnoser.analysis.serving.series import Series

    rng = random.Random(seed)
    quoted = REQUEST.replace("why does this", "Avg prompt throughput: 1.0 tokens/s, why does this")
    failed = ACCESS.replace("200 OK", "503 Service Unavailable")
    lines = [STATS.replace("10:00:10", f"{10 + i // 2520:02d}:{i // 42 % 60:02d}:{i // 7 % 6}0") if i % 7 == 0
             else rng.choice([ACCESS, ACCESS, failed, quoted]) for i in range(3000)]
    data = ("\n".join(lines) + "\n").encode()
    given = diagnose(io.BytesIO(data), "x", builtin_rules())
    original = Series.access_block
    monkeypatch.setattr(Series, "access_block",
                        lambda self, *args: original(self, *args[:5]))  # no hits given: the block is searched
    searched = diagnose(io.BytesIO(data), "x", builtin_rules())
    assert given.series.to_dict() == searched.series.to_dict()
    points = given.series.to_dict()["engines"]["0"]["points"]
    total = {k: sum(p[k]["mean"] * p["n"] for p in points) for k in ("requests", "errors")}
    assert 1000 < total["requests"] < 2572 and 300 < total["errors"] < total["requests"]
