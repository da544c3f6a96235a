"""Pieces of an enormous line (reader.MAX_LINE): matched one at a time, in bounded memory, with the same findings."""

from __future__ import annotations

from diagnoser.engine import diagnose_text
from diagnoser.keywords import LONG_TEXT, lowered
from diagnoser.matcher import CUT_PIECE, Matcher
from diagnoser.reader import Line
from diagnoser.rules import builtin_rules

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
    assert [h.rule.id for h in matcher.finish()] == ["weights-oom"]


def test_an_oom_inside_an_enormous_line_is_still_found():
    text = "x" * (3 * CUT_PIECE) + OOM + "y " * CUT_PIECE
    assert [f.rule.id for f in diagnose_text(text).findings] == ["weights-oom"]


def test_lowered_gives_lower_of_long_and_short_texts_alike():
    long = "AbC " * LONG_TEXT
    assert lowered(long) == long.lower()
    assert lowered(long) is lowered(long)  # computed once while it is among the last asked
    assert lowered("GPU KV Cache") == "gpu kv cache"
