"""Pieces of an enormous line (reader.MAX_LINE): matched one at a time, in bounded memory, with the same findings.

An OOM with no landmark or frame to place it is `oom-stage-unknown`: the stage decides the fix, and a piece of
one line does not show it.
"""

from __future__ import annotations

import pytest

from diagnoser.analysis.matcher import Matcher
from diagnoser.analysis.pipeline import diagnose_text
from diagnoser.analysis.window import CUT_PIECE
from diagnoser.ingest.keywords import LONG_TEXT, lowered
from diagnoser.ingest.line import Line
from diagnoser.rules.loader import builtin_rules

OOM = " torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "


def _piece(text: str) -> Line:
    return Line(number=7, text=text, raw=text)


def test_the_matcher_holds_one_piece_of_an_enormous_line_not_twelve():
    matcher = Matcher(builtin_rules())
    filler = "x" * CUT_PIECE + " "
    held = []
    for text in (filler, filler, filler + OOM, filler, filler):
        matcher.feed(_piece(text), None)
        held.append(matcher.held)
    assert held == [1, 1, 1, 1, 1]
    assert [h.rule.id for h in matcher.finish()] == ["oom-stage-unknown"]


def test_an_oom_inside_an_enormous_line_is_still_found():
    text = "x" * (3 * CUT_PIECE) + OOM + "y " * CUT_PIECE
    assert [f.rule.id for f in diagnose_text(text).findings] == ["oom-stage-unknown"]


def test_lowered_gives_lower_of_long_and_short_texts_alike():
    long = "AbC " * LONG_TEXT
    assert lowered(long) == long.lower()
    assert lowered(long) is lowered(long)  # computed once while it is among the last asked
    assert lowered("GPU KV Cache") == "gpu kv cache"


def _index(words: list[str]):
    from diagnoser.ingest import keywords

    return keywords.KeywordIndex([w] for w in words)


def test_present_in_finds_what_present_finds_in_the_lower_cased_text():
    """One caseless pass over a long ASCII text (no lower-cased copy) answers as `present(text.lower())`; a
    keyword with capitals is never in a lower-cased text; a non-ASCII text (the Kelvin sign lower-cases to `k`)
    is lower-cased and searched as before."""
    from diagnoser.ingest import keywords

    words = ["nccl error", "out of memory", "Traceback", "kv cache", "é!"]
    index, plain = _index(words), _index(words)
    pad = "x " * keywords.SMALL_BLOCK
    texts = [pad + "CUDA Out Of Memory, NCCL error", pad + "TRACEBACK here", pad + "nothing",
             pad + "\u212aV CACHE full é!", "NCCL ERROR " + pad + " out of MEMORY"]
    for text in texts:
        assert index.present_in(text) == plain.present(text.lower())
    assert [index.present_in(t) for t in texts] == [["nccl error", "out of memory"], [], [], ["kv cache", "é!"],
                                                    ["nccl error", "out of memory"]]


def test_any_from_agrees_with_any_in_of_the_rest():
    """`any_from(text, begin)` == `any_in(text[begin:])`: a word whose first occurrence starts before `begin`
    may occur again after it, or not; positions count in characters, also past non-ASCII ones."""
    from diagnoser.ingest import keywords

    index = _index(["pid=", "ERROR", "Traceback"])
    pad = "x" * keywords.SMALL_BLOCK
    cases = [("ERROR " + pad, 1), ("ERROR " + pad, 0), ("ERROR " + pad + " ERROR", 1), ("éé ERROR" + pad, 3),
             ("éé ERROR" + pad, 4), (pad, 0), ("xpid=" + pad, 1), ("xpid=" + pad, 2), (pad + "Traceback", 5)]
    for text, begin in cases:
        assert index.any_from(text, begin) == index.any_in(text[begin:]) == any(
            w in text[begin:] for w in index.words), (text[:12], begin)


def test_an_index_that_joins_the_shared_pass_late_is_answered_right(monkeypatch):
    """Indexes join the one pass over a long text on their first question; a text scanned before one joined
    is searched by that index itself, and a union past UNION_MAX words starts afresh: the answers never change."""
    from diagnoser.ingest import keywords

    pytest.importorskip("hyperscan")
    monkeypatch.setattr(keywords, "_UNION", keywords._Union())
    monkeypatch.setattr(keywords, "UNION_MAX", 6)
    a, b, c = _index(["alpha", "beta"]), _index(["gamma"]), _index(["delta", "epsilon", "zeta", "eta"])
    pad = "x" * keywords.SMALL_BLOCK
    for n in range(3):
        text = f"{pad} ALPHA gamma {n}"
        assert (a.present_in(text), b.any_in(text), c.any_in(text), b.any_in(text.upper())) == (
            ["alpha"], True, False, False)
        assert (c.present_in(text + " Eta"), a.any_in(text + " beta")) == (["eta"], True)
    assert keywords._UNION._db is not None and len(keywords._UNION._words) <= 6


def test_a_long_flattened_text_restarts_where_the_restart_regex_does():
    """A long text's restart points are tried only at and before each "(" and level word: the same points as
    RESTART tried at every character, on fixture logs flattened onto one line and on odd spacing."""
    import random
    from pathlib import Path

    from diagnoser.ingest import clean

    fixtures = sorted((Path(__file__).resolve().parent.parent / "fixtures").glob("*.log"))
    rng = random.Random(3)
    words = ["(", ")", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "DEBUG", "pid=7", "05-01",
             "10:00:00", " ", "\u00a0", "\t", "x", "(Worker pid=12)", "(EngineCore_0 pid=3, ip=1.2.3.4)",
             "INFO:     10.0.0.1:5000", "ERROR 05-01 10:00:00 [a.py:1]", ")INFO 05-01 10:00:00 x"]
    texts = [" ".join(p.read_text(encoding="utf-8", errors="replace").splitlines()) for p in fixtures[:40]]
    texts += ["".join(rng.choice(words) for _ in range(3000)) for _ in range(5)]
    total = 0
    for text in texts:
        want = [m.start() for m in clean.RESTART.finditer(text, 1)]
        assert clean._restart_points(text) == want
        total += len(want)
    assert total > 1000


def test_ansi_led_by_literals_strips_what_the_look_behind_form_strips():
    """clean.ANSI's lost-ESC alternative starts with its literal "[" (re then skips between candidates in C):
    it removes exactly what the form led by the look-behind removes."""
    import random
    import re

    from diagnoser.ingest import clean

    reference = re.compile(clean.ANSI.pattern.replace(r"|\[(?<![\w\]\[]\[)", r"|(?<![\w\]\[])\["))
    assert reference.pattern != clean.ANSI.pattern
    rng = random.Random(5)
    atoms = ["[1m", "[", "]", "a", "\x1b", "^[[", "31", "m", ";", "0", " ", "_", "é", "\x1b]0;t\x07", "[[1;36m"]
    texts = ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 400))) for _ in range(300)]
    assert [clean.ANSI.sub("", t) for t in texts] == [reference.sub("", t) for t in texts]
    assert sum(len(reference.findall(t)) for t in texts) > 1000
