"""Where a secret can be in a line: the hints each pattern needs, and, in a long text, the places to try it.

A line pays one `lower()` and a handful of substring tests (maybe_secret); only the patterns whose hints it
holds run. In a long text (a 1 MB piece of an enormous line) every hint is found in one pass (HINTS), and a
pattern whose matches start at (or just before) a hint is tried only there (match_starts, sub_at): the same
matches as the pattern's own scan, at tens of MB/s instead of 1-3.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from diagnoser.ingest.keywords import KeywordIndex
from diagnoser.ingest.redact_patterns import (
    AUTH_HEADER,
    BEARER,
    COOKIE,
    ENTROPY,
    ISSUED_TOKENS,
    KEYED,
    URL_PASSWORD,
    URL_USER,
)

#: Lower-case substrings a line must hold for FLAG to find a secret flag.
FLAG_HINTS = ("--api", "--hf", "--tok", "--pas", "--pw", "--sec", "--access", "--key", "--auth", "--cred",
              "-key", "_key", "-kye", "-token", "_token", "-secret", "_secret", "-pass", "_pass", "-pwd", "-api")
#: Lower-case substrings a line must hold for KEYED to have a chance.
KEYED_HINTS = ("key", "secret", "passw", "passwd", "_token", "token'", 'token"', "token=", "token:", "token ",
               "signature")
#: The cheap pre-check: a line holding none of these cannot match any pattern (every pattern's hints
#: contain one of them). "token" is common in vLLM lines (tokens/s, max_num_batched_tokens), so it is only a
#: hint in the spellings a secret-named key takes.
_TOKEN_HINTS = ("_token", "token'", 'token"', "token=", "token:", "token ")
#: HEADER_KEY's hints: each of its names ends in one of these
HEADER_HINTS = ("-token", "-key", "-secret", "-auth", "-signature", "-pass", "-credential", "api-key", "apikey")
_FLAT_HINTS = ("key", "secret", "passw", "://", "authoriz", "bearer", "hf_", "api_org_", "sk-", "ghp_", "gho_",
               "ghu_", "ghs_", "ghr_", "github_pat_", "akia", "asia", "eyj", "xox", "aiza", "nvapi-", "cookie",
               "--api", "--hf", "--tok", "--pas", "--pw", "--sec", "--cred", "--auth",
               "-key", "-kye", "-token", "-pass", "_pass", "-pwd", "-api", "?", "private key",
               "-auth", "signature", "-credential",
               *(h for _kind, hints, _p in ISSUED_TOKENS for h in hints))


def maybe_secret(low: str) -> bool:
    """True when the lower-cased line holds a hint (a plain loop: cheaper than any() over a generator)."""
    for h in _FLAT_HINTS:
        if h in low:
            return True
    if "token" in low:
        for h in _TOKEN_HINTS:
            if h in low:
                return True
    return False


#: every hint maybe_secret asks about
MAYBE = frozenset(_FLAT_HINTS + _TOKEN_HINTS)
#: every hint any rule or the pre-check asks about, found in one pass over a long text
HINTS = KeywordIndex([[h] for h in sorted(MAYBE | {h for hints in (
    ("://",), ("cookie",), ("authoriz",), FLAG_HINTS, KEYED_HINTS, HEADER_HINTS, ("bearer",),
    *(hints for _kind, hints, _p in ISSUED_TOKENS), ("token", "secret", "key", "passw")) for h in hints})])
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789+.-")
#: patterns whose every match starts at one of its hints (or this many characters before it: `proxy-`,
#: `set-`, `x-`; `api` of `apikey`), in a text where _same_positions holds
HINT_STARTS: dict[Any, tuple[int, ...]] = {
    AUTH_HEADER: (0, len("proxy-")), COOKIE: (0, len("set-")), BEARER: (0,),
    ENTROPY: (0, len("api")), **{pattern: (0,) for _kind, _hints, pattern in ISSUED_TOKENS}}
#: patterns that start at the scheme before a `://`
SCHEME_PATTERNS = (URL_PASSWORD, URL_USER)


def _finds(low: str, word: str) -> Iterator[int]:
    i = low.find(word)
    while i != -1:
        yield i
        i = low.find(word, i + 1)


#: the non-ASCII characters that re's IGNORECASE takes for an ASCII letter or digit, or that lower-case to ASCII
#: (dotted and dotless i, long s, the Kelvin sign: tests/test_redaction.py derives them)
_ASCII_FOLDS = ("\u0130", "\u0131", "\u017f", "\u212a")


def _same_positions(text: str, low: str) -> bool:
    """Whether an ASCII word found in `low` (text.lower()) is where KEYED or ENTROPY would match it in `text`: an
    ASCII text, or one that lower-cases character for character with none of _ASCII_FOLDS (a JSON blob with
    accents, a text that already holds a «marker»)."""
    return text.isascii() or (len(low) == len(text) and not any(c in text for c in _ASCII_FOLDS))


def match_starts(pattern: Any, hints: list[str], text: str, low: str) -> list[int] | None:
    """Every place in a long text where a match of `pattern` (one of HINT_STARTS, KEYED, SCHEME_PATTERNS) can
    start, found from where its `hints` are in `low` (text.lower()), sorted; None: anywhere (the text does not
    lower-case character for character: the regex scans it all)."""
    if not _same_positions(text, low):
        return None
    back = HINT_STARTS.get(pattern)
    if pattern is KEYED:
        return _keyed_starts(low, hints)
    if back is None:
        return _scheme_starts(text, low)
    return sorted({p for h in hints for i in _finds(low, h) for p in (i - b for b in back) if p >= 0})


def _scheme_starts(text: str, low: str) -> list[int]:
    """Where `\\b[a-z][a-z0-9+.-]*://` can start: at a word start (re's `\\b`: no word character before) in the
    run of scheme characters before a `://`."""
    starts: set[int] = set()
    for i in _finds(low, "://"):
        j = i
        while j > 0 and low[j - 1] in _SCHEME_CHARS:
            j -= 1
        starts.update(p for p in range(j, i) if low[p].isalpha() and not (
            p and (text[p - 1].isalnum() or text[p - 1] == "_")))
    return sorted(starts)


def _keyed_starts(low: str, hints: list[str]) -> list[int]:
    """Where a KEYED match can start in a text (where _same_positions holds): at the run of key characters holding
    a hint (a key is made of them, and the look-behind refuses a start inside one), or at the quote just before
    that run (and the backslashes before it: JSON inside JSON, `\\"api_key\\"`)."""
    starts: set[int] = set()
    for j in _run_starts(low, sorted({i for h in hints for i in _finds(low, h)}), _KEY_CHARS):
        starts.add(j)
        if j > 0 and low[j - 1] in "'\"":
            starts.add(j - 1)
            while j > 1 and low[j - 2] == "\\":
                j -= 1
                starts.add(j - 1)
    return sorted(starts)


def _run_starts(low: str, positions: list[int], chars: frozenset[str]) -> set[int]:
    """The start of the run of `chars` that ends at each of `positions` (sorted): each character is looked at
    once, however many hints one long run holds (walking back from each was quadratic in a run of `key_key_...`)."""
    found: set[int] = set()
    prev, prev_start = -1, -1
    for i in positions:
        j = i
        while j > prev and j > 0 and low[j - 1] in chars:
            j -= 1
        start = prev_start if j == prev and prev >= 0 else j
        found.add(start)
        prev, prev_start = i, start
    return found


def sub_at(pattern: re.Pattern[str], handler: Callable[[re.Match[str]], str], text: str,
            starts: list[int], low: str) -> tuple[str, str | None]:
    """pattern.sub(handler, text) when every match starts at one of `starts` (sorted): the same leftmost,
    non-overlapping matches, tried only there. Also the new text's lower-cased copy, made from `low`
    (text.lower(), character for character where _same_positions holds) and the lower-cased replacements;
    None when the text holds a capital sigma (lower-cased by its neighbours)."""
    out: list[str] = []
    lows: list[str] | None = None if "\u03a3" in text else []
    pos = 0
    for s in starts:
        if s < pos:
            continue
        m = pattern.match(text, s)
        if m is None or m.end() == m.start():
            continue
        new = handler(m)
        out.append(text[pos:m.start()])
        out.append(new)
        if lows is not None:
            lows.append(low[pos:m.start()])
            lows.append(new.lower())
        pos = m.end()
    if not out:
        return text, low
    out.append(text[pos:])
    if lows is None:
        return "".join(out), None
    lows.append(low[pos:])
    return "".join(out), "".join(lows)


