"""Which items of a list hold a keyword that occurs in a text: one pass over the distinct keywords.

The matcher (rule patterns) and the tracker (landmarks) each ask, for every line the prefilter kept, which
of a few hundred items have a literal keyword in it. Testing item by item repeats the shared keywords and
pays a generator per item; this finds them in one pass over the text: hyperscan's when the `fast` extra is
installed, else one trie-shaped regex.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

#: hyperscan (when installed, else the trie regex) searches texts this long, and every text after this many:
#: compiling the regex takes tens of milliseconds, a pasted fragment is done sooner keyword by keyword
LONG_TEXT = 4096
HS_AFTER = 300
#: with hyperscan, whose database compiles in ~10-40 ms, the texts tested keyword by keyword are at most this
#: many keyword tests (~0.13-0.2 us each), about one database's compile time: a short log never pays for one, a
#: long one pays for at most twice the compile (the rules' ~500 keywords: 297 texts; the landmarks' ~70: 300)
SMALL_TESTS = 150_000
#: BlockPattern leaves shorter ranges to the regex (about 1.5 ms for 64 KiB of the worst pattern, no match;
#: compiling its database takes 1-5 ms)
SMALL_BLOCK = 1 << 16


#: the last long texts lower-cased and their copies: the redactor, the tracker and the matcher each need one
#: piece of an enormous line lower-cased, and ask in turn (the matcher one piece behind)
_LOWERED: list[tuple[str, str]] = []
_LOWERED_HELD = 2  #: a piece and the one before (a redacted or stripped copy takes its source's place)


def lowered(text: str) -> str:
    """`text.lower()`, a long text's (LONG_TEXT or more) computed once while it is among the last two held.

    >>> lowered("GPU KV Cache")
    'gpu kv cache'
    """
    if len(text) < LONG_TEXT:
        return text.lower()
    for held, low in _LOWERED:
        if held is text:
            return low
    low = text.lower()
    _remember(text, low)
    return low


def lowered_part(whole: str, part: str, start: int) -> None:
    """Note that `part` is `whole[start:start + len(part)]`: when `whole`'s lower-cased copy is held and lower()
    kept every position (ASCII, or as long as `whole` without a capital sigma, the one character lower-cased by its
    neighbours), `part`'s is a slice of it (the reader's prefix stripping and rstrip)."""
    if len(part) < LONG_TEXT or part is whole:
        return
    for held, low in _LOWERED:
        if held is whole:
            if whole.isascii() or (len(low) == len(whole) and "\u03a3" not in whole):
                _remember(part, low[start:start + len(part)], whole)
            return


def remember_lowered(text: str, low: str, instead_of: str | None = None) -> None:
    """Hold `low` as `text`'s lower-cased copy for lowered() (a caller that made it without lower(): the redactor
    keeps a piece's copy in step with its substitutions), in place of `instead_of`'s (the text it came from)."""
    if len(text) >= LONG_TEXT:
        _remember(text, low, instead_of)


def _remember(text: str, low: str, instead_of: str | None = None) -> None:
    """Hold a long text's lower-cased copy among the last _LOWERED_HELD; one derived from another text (a redacted
    piece, a piece without its prefix) takes that text's place, which nobody asks about again."""
    global _LOWERED
    held = [(t, lw) for t, lw in _LOWERED if t is not instead_of] if instead_of is not None else _LOWERED
    _LOWERED = [*held[1 - _LOWERED_HELD:], (text, low)]  # a new list: another thread may be reading it


class KeywordIndex:
    """`matches(low)` == [i for i, kws in enumerate(keyword_lists) if any(k in low for k in kws)]."""

    def __init__(self, keyword_lists: Iterable[Sequence[str]]) -> None:
        owners: dict[str, list[int]] = {}
        for i, kws in enumerate(keyword_lists):
            for k in kws:
                ids = owners.setdefault(k, [])
                if not ids or ids[-1] != i:
                    ids.append(i)
        self._owners = owners
        self.words = list(owners)
        self._key = tuple(self.words)
        self._sizes = [len(w.encode("utf-8", "surrogatepass")) for w in self.words]
        self._lower = [w == w.lower() for w in self.words]  #: only these can be in a lower-cased text
        self._hs: Any = None
        self._hs_tried = False
        self._search: Any = None
        self._calls = 0
        self._small: int | None = None  #: how many texts are tested keyword by keyword (decided on the first)
        self._last: tuple[str, list[str]] | None = None  #: the last long text asked and its keywords

    def present(self, low: str) -> list[str]:
        """The keywords that occur in `low` (lower-cased text), in index order."""
        self._calls += 1
        if self._small is None:
            self._small = HS_AFTER if not _hyperscan_installed() else min(
                HS_AFTER, SMALL_TESTS // max(len(self.words), 1))
        if self._calls <= self._small and len(low) < LONG_TEXT:
            # a small input: building the trie regex (tens of ms) or loading the database costs more than
            # testing each keyword on its few hundred lines
            return [w for w in self.words if w in low]
        if len(low) >= LONG_TEXT:
            # the same long text is often asked again (the matcher's window of one piece of an enormous line,
            # lower-cased anew): comparing it costs a memcmp, searching it a pass of a megabyte
            if self._last is not None and self._last[0] == low:
                return list(self._last[1])
            found_words = self._present(low)
            self._last = (low, found_words)
            return list(found_words)
        return self._present(low)

    def _present(self, low: str) -> list[str]:
        db = self._db()
        if db is not None:
            found: set[int] = set()
            db.scan(low.encode("utf-8", "surrogatepass"), match_event_handler=lambda i, _s, _e, _f, _c: found.add(i))
            return [self.words[i] for i in sorted(found)]
        if self._search is None:
            if not self.words:
                return []
            self._search, self._closure = _trie_search(tuple(self.words))
        # one C-level search finds the next place any keyword starts, and the longest one starting there;
        # the keywords that are prefixes of it start there too (each search resumes one character later)
        search, closure = self._search, self._closure
        ids: set[int] = set(closure.get("", ()))  # an empty keyword is in every text
        m = search(low)
        while m is not None:
            ids.update(closure[m.group()])
            m = search(low, m.start() + 1)
        words = self.words
        return [words[i] for i in sorted(ids)]

    def present_in(self, text: str) -> list[str]:
        """`present(text.lower())`. A long ASCII text is not lower-cased for it when hyperscan is there: its
        words are found caseless, in the one pass that answers every index asking about that text (_Union)."""
        if len(text) >= LONG_TEXT and text.isascii() and self._db() is not None:
            ends = _UNION.first_ends(self._key, True, text)
            if ends is not None:
                words, lower = self.words, self._lower
                return [words[i] for i in sorted(ends) if lower[i]]
        return self.present(lowered(text))

    def matches_in(self, text: str) -> list[int]:
        """`matches(text.lower())`, by present_in."""
        words = self.present_in(text)
        return self.owners(words) if words else []

    def any_in(self, text: str) -> bool:
        """Whether any keyword occurs in `text` (as given, no case folding): a text of SMALL_BLOCK or more is
        searched in one hyperscan pass that stops at the first keyword (or answered from the pass _Union made
        over it); else (or without the `fast` extra) a substring test per keyword, which in pure Python beats
        any regex over a long text."""
        if len(text) >= SMALL_BLOCK and (db := self._db()) is not None:
            ends = _UNION.first_ends(self._key, False, text)
            if ends is not None:
                return bool(ends)
            return scan_any(db, text.encode("utf-8", "surrogatepass"))
        return any(w in text for w in self.words)

    def any_from(self, text: str, begin: int) -> bool:
        """`any_in(text[begin:])`, without copying a long text whose words' first occurrences answer it: none at
        all, or one starting at `begin` or later."""
        if len(text) >= SMALL_BLOCK and (db := self._db()) is not None:
            ends = _UNION.first_ends(self._key, False, text)
            if ends is not None:
                if not ends:
                    return False
                first = begin if text.isascii() else len(text[:begin].encode("utf-8", "surrogatepass"))
                sizes = self._sizes
                if any(end - sizes[i] >= first for i, end in ends.items()):
                    return True
            return scan_any(db, text[begin:].encode("utf-8", "surrogatepass"))
        return self.any_in(text[begin:])

    def owners(self, words: Iterable[str]) -> list[int]:
        """Items having any of `words`, in item order."""
        words = list(words)
        if len(words) == 1:
            return self._owners[words[0]]
        return sorted({i for w in words for i in self._owners[w]})

    def matches(self, low: str) -> list[int]:
        words = self.present(low)
        return self.owners(words) if words else []

    def _db(self) -> Any:
        if not self._hs_tried:
            self._hs_tried = True
            if os.environ.get("VLLM_DOCTOR_PURE_PYTHON") or not self.words:
                return None
            key = tuple(self.words)
            if key not in _HS_DBS:  # a scan of many logs loads each keyword list's database once
                _HS_DBS[key] = literal_database("hs-index", [w.encode("utf-8", "surrogatepass") for w in key],
                                                single_match=True)
            self._hs = _HS_DBS[key]
        return self._hs


def _hyperscan_installed() -> bool:
    """Whether the `fast` extra is there to be used (found, not imported: a small input may never need it)."""
    return not os.environ.get("VLLM_DOCTOR_PURE_PYTHON") and _hyperscan_found()


@functools.lru_cache(maxsize=1)
def _hyperscan_found() -> bool:
    import importlib.util

    return importlib.util.find_spec("hyperscan") is not None


#: words the union holds at most (a scan of logs with many rule packs); past it, it starts afresh
UNION_MAX = 8192
_UNION_HELD = 2  #: the piece being read and the one before (the matcher matches a piece when the next arrives)


class _Union:
    """One hyperscan pass over a long text answers every KeywordIndex that asks about it.

    A piece of an enormous line is asked about six times (the redactor's hints, the reader's restart and
    request-logger words, the tracker's landmarks, the matcher's keywords, the series' words): one database of
    all their words (caseless for present_in, exact for any_in; each reports its first match only) scans its
    UTF-8 once instead of six times, after one encode instead of three and no lower-cased copy. An index joins
    on its first question and is answered from the next new text on (the database is rebuilt then; a text
    scanned before it joined is searched by the index itself). Held per text: where each word's first
    occurrence ends, for the last few texts (by identity, else equality: the same piece asked again).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._members: dict[tuple[tuple[str, ...], bool], int] = {}  # (words, caseless) -> its first id
        self._words: list[bytes] = []
        self._caseless: list[bool] = []
        self._db: Any = None
        self._built = 0  # words the database holds
        self._recent: list[tuple[str, int, dict[int, int]]] = []  # (text, words scanned for, id -> first end)

    def first_ends(self, words: tuple[str, ...], caseless: bool, text: str) -> dict[int, int] | None:
        """{index in `words`: where its first occurrence in `text`'s UTF-8 ends}, or None: the caller searches."""
        with self._lock:
            base = self._members.get((words, caseless))
            if base is None:
                if len(self._words) + len(words) > UNION_MAX:
                    self._reset()
                base = self._members[(words, caseless)] = len(self._words)
                self._words.extend(w.encode("utf-8", "surrogatepass") for w in words)
                self._caseless.extend([caseless] * len(words))
            found = self._found(text, base + len(words))
        if found is None:
            return None
        return {i - base: end for i, end in found.items() if base <= i < base + len(words)}

    def _found(self, text: str, need: int) -> dict[int, int] | None:
        for held, scanned, found in self._recent:
            if held is text:
                return found if scanned >= need else None
        # an equal text (a memcmp only between texts of one length): held again as this object
        known = next(((scanned, found) for held, scanned, found in self._recent if held == text), None)
        if known is None:
            if self._built < len(self._words):
                self._db = literal_database("hs-union", self._words, self._caseless, single_match=True)
                self._built = len(self._words)
            if self._db is None:
                return None
            found: dict[int, int] = {}

            def first(i: int, _start: int, end: int, _flags: int, _context: Any) -> None:  # (True would stop it)
                found.setdefault(i, end)

            self._db.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=first)
            known = (self._built, found)
        self._recent = [*self._recent[1 - _UNION_HELD:], (text, *known)]
        return known[1] if known[0] >= need else None


_UNION = _Union()


def scan_any(db: Any, data: bytes) -> bool:
    """Whether a hyperscan database matches anywhere in `data`: the scan stops at the first match."""
    found: list[int] = []
    try:
        db.scan(data, match_event_handler=lambda i, _s, _e, _f, _c: found.append(i) or True)  # True: stop
    except Exception:  # noqa: BLE001 - hyperscan.ScanTerminated: the handler stopped it at the first match
        if not found:
            raise
    return bool(found)


def literal_database(name: str, words: Sequence[bytes], caseless: bool | Sequence[bool] = False,
                     single_match: bool = False, patterns: Sequence[bytes] = ()) -> Any:
    """`words` as a hyperscan block-mode database of literals (id = index), or None without the `fast` extra.
    `caseless`: for every word, or one flag a word. `patterns`: regexes (case-sensitive) searched in the same
    pass, ids following the words'.

    Compiling one takes ~170 ms for the prefilter's ~300 keywords, which only an input past the reader's small
    input size builds (a log that takes seconds). Callers honour VLLM_DOCTOR_PURE_PYTHON=1 (no hyperscan).
    """
    if not words:
        return None
    try:
        import hyperscan
    except ImportError:
        return None

    single = hyperscan.HS_FLAG_SINGLEMATCH if single_match else 0
    flags = [(hyperscan.HS_FLAG_CASELESS if c else 0) | single
             for c in ([caseless] * len(words) if isinstance(caseless, bool) else caseless)]
    expressions = [*(b"".join(b"\\x%02x" % c for c in w) for w in words), *patterns]
    return compiled_database(expressions, flags + [0] * len(patterns))


def compiled_database(expressions: Sequence[bytes], flags: Sequence[int]) -> Any:
    """A hyperscan block-mode database of `expressions` (id = index), compiled in this process (nothing is read
    from disk); None when hyperscan cannot build it."""
    import hyperscan

    try:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=list(expressions), ids=list(range(len(expressions))), elements=len(expressions),
                   flags=list(flags))
    except Exception:  # noqa: BLE001 - a broken or too-old build, or a pattern it refuses: the regex is there
        return None
    return db


_HS_DBS: dict[tuple[str, ...], Any] = {}
_TRIES: dict[tuple[str, ...], tuple[Any, dict[str, tuple[int, ...]]]] = {}


def _trie_search(words: tuple[str, ...]) -> tuple[Any, dict[str, tuple[int, ...]]]:
    """(search, closure): `search` finds the longest of `words` at the leftmost place one starts; closure[w]
    is the index of every word that is a prefix of w (w included). Built once per keyword list."""
    found = _TRIES.get(words)
    if found is None:
        index = {w: i for i, w in enumerate(words)}
        closure = {w: tuple(sorted(index[w[:n]] for n in range(len(w) + 1) if w[:n] in index)) for w in words}
        pattern = re.compile(trie_pattern([w for w in words if w]) or "(?!)")
        found = _TRIES[words] = (pattern.search, closure)
    return found


def trie_pattern(words: list[str]) -> str:
    """A regex matching any of `words`, shaped as a trie (shared prefixes tested once, the longest word
    preferred where several start at one place)."""
    root: dict = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[None] = {}

    def build(node: dict) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in sorted(
            (k, v) for k, v in node.items() if k is not None)]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if None in node:  # a word ends here: the longer ones are optional
            body = "(?:" + body + ")?"
        return body

    return build(root)


class BlockPattern:
    """`finditer` of one bytes regex over a range of a block, for patterns that match rarely.

    With the `fast` extra, hyperscan finds where matches end (one SIMD pass) and the regex reads each from at
    most `reach` bytes before its end; else the regex scans the range itself. Both give the same matches
    for a pattern of bounded length (at most `reach`) whose matches cannot overlap. A range shorter than
    SMALL_BLOCK is always left to the regex: it scans one sooner than hyperscan compiles the pattern.
    """

    def __init__(self, pattern: re.Pattern[bytes], reach: int) -> None:
        self.pattern = pattern
        self.reach = reach
        self._hs: Any = None
        self._hs_tried = False

    def finditer(self, block: bytes, start: int = 0, end: int | None = None) -> Iterator[re.Match[bytes]]:
        end = len(block) if end is None else end
        db = self._db() if end - start >= SMALL_BLOCK else None
        if db is None:
            yield from self.pattern.finditer(block, start, end)
            return
        ends: list[int] = []
        db.scan(block if start == 0 and end == len(block) else block[start:end],
                match_event_handler=lambda _i, _s, e, _f, _c: ends.append(e + start))
        yield from self.at_ends(block, ends, start, end)

    def at_ends(self, block: bytes, ends: list[int], start: int = 0, end: int | None = None
                ) -> Iterator[re.Match[bytes]]:
        """The matches in block[start:end] given where hyperscan saw them end (this pattern's ids of a shared
        scan, the Prefilter's): the regex reads each from at most `reach` bytes before its end."""
        end = len(block) if end is None else end
        pos = start
        search = self.pattern.search
        for e in sorted(set(ends)):
            if e <= pos:
                continue
            m = search(block, max(pos, e - self.reach), min(end, e + 1))
            if m is not None and m.end() == e:
                pos = e
                yield m

    @property
    def accelerated(self) -> bool:
        """Whether a range of SMALL_BLOCK or more is searched by hyperscan (the `fast` extra)."""
        return self._db() is not None

    def search(self, block: bytes) -> bool:
        """Whether the pattern occurs in the block at all."""
        db = self._db() if len(block) >= SMALL_BLOCK else None
        if db is None:
            return self.pattern.search(block) is not None
        return scan_any(db, block)

    def _db(self) -> Any:
        if self._hs_tried:
            return self._hs
        self._hs_tried = True
        if os.environ.get("VLLM_DOCTOR_PURE_PYTHON"):
            return None
        try:
            import hyperscan
        except ImportError:  # no extra: the regex is always right
            return None
        flag = hyperscan.HS_FLAG_CASELESS if self.pattern.flags & re.IGNORECASE else 0
        self._hs = compiled_database([self.pattern.pattern], [flag])  # 1-8 ms a pattern
        return self._hs
