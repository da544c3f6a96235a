"""Phrase matching: how well a line (or its wrapped window) carries a rule's phrase, fuzzily.

rapidfuzz's partial ratio tolerates small edits and re-punctuation; word coverage tolerates a clause a
release dropped or added. On a very long line (a flattened paste) only the text around the keyword is scored
(`focus`); `phrase_safe` tells when a phrase's verdict holds for every line of one shape.
"""

from __future__ import annotations

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from diagnoser.ingest.dense import digit_free
from diagnoser.rules.model import Pattern


def phrase_safe(pattern: Pattern, keywords: tuple[str, ...]) -> bool:
    """A phrase's verdict is the same on every line of one shape when neither the processed phrase nor the
    keywords that place the focus hold a digit (a digit of the line then never equals one of the phrase)."""
    return digit_free(default_process(pattern.phrase or ""), *keywords)


def _content_words(text: str) -> list[str]:
    return [w for w in text.split() if len(w) >= 4]


def phrase_score(phrase: str, processed: str, threshold: float) -> float:
    """How well a (default_process'ed) window carries a phrase, 0 below the threshold.

    partial_ratio tolerates small edits and re-punctuation; word coverage tolerates a dropped or added
    clause (releases reword messages that way) without accepting a different message that shares a few
    words, because it needs nearly all of the phrase's content words.
    """
    target = default_process(phrase)
    score = fuzz.partial_ratio(target, processed, score_cutoff=threshold)
    if score:
        return score
    words = _content_words(target)
    if len(words) < 5:
        return 0.0
    have = set(processed.split())
    coverage = 100.0 * sum(w in have for w in words) / len(words)
    return coverage if coverage >= threshold else 0.0


def focus(text: str, low: str, keywords: tuple[str, ...], phrase_len: int) -> str:
    """For a very long line (a flattened paste), only the text around the keyword is scored."""
    span = max(4 * phrase_len, 400)
    if len(text) <= 2 * span:
        return text
    positions = [low.find(k) for k in keywords if low.find(k) >= 0]
    if not positions:
        return text[: 2 * span]
    pos = min(positions)
    return text[max(0, pos - span): pos + span]
