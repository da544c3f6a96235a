"""Which items of a list hold a keyword that occurs in a text: one pass over the distinct keywords.

The matcher (rule patterns) and the tracker (landmarks) each ask, for every line the prefilter kept, which
of a few hundred items have a literal keyword in it. Testing item by item repeats the shared keywords and
pays a generator per item; this finds them in one pass over the text: hyperscan's when the `fast` extra is
installed, else one trie-shaped regex.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

#: hyperscan (when installed, else the trie regex) searches texts this long, and every text after this many:
#: compiling either takes tens of milliseconds, a pasted fragment is done sooner keyword by keyword
LONG_TEXT = 4096
HS_AFTER = 300
#: BlockPattern leaves shorter ranges to the regex (about 1.5 ms for 64 KiB of the worst pattern, no match;
#: compiling its database takes 1-5 ms)
SMALL_BLOCK = 1 << 16


#: the last long texts lower-cased and their copies: the redactor, the tracker and the matcher each need one
#: piece of an enormous line lower-cased, and ask in turn (the matcher one piece behind)
_LOWERED: list[tuple[str, str]] = []
_LOWERED_HELD = 3


def lowered(text: str) -> str:
    """`text.lower()`, a long text's (LONG_TEXT or more) computed once while it is among the last three asked.

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
    """Note that `part` is `whole[start:start + len(part)]`: when `whole`'s lower-cased copy is held and `whole` is
    ASCII (lower() keeps every position), `part`'s is a slice of it (the reader's prefix stripping and rstrip)."""
    if len(part) < LONG_TEXT:
        return
    for held, low in _LOWERED:
        if held is whole:
            if whole.isascii():
                _remember(part, low[start:start + len(part)])
            return


def _remember(text: str, low: str) -> None:
    global _LOWERED
    _LOWERED = [*_LOWERED[1 - _LOWERED_HELD:], (text, low)]  # a new list: another thread may be reading it


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
        self._hs: Any = None
        self._hs_tried = False
        self._search: Any = None
        self._calls = 0
        self._last: tuple[str, list[str]] | None = None  #: the last long text asked and its keywords

    def present(self, low: str) -> list[str]:
        """The keywords that occur in `low` (lower-cased text), in index order."""
        self._calls += 1
        if self._calls <= HS_AFTER and len(low) < LONG_TEXT:
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

    def any_in(self, text: str) -> bool:
        """Whether any keyword occurs in `text` (as given, no case folding): a text of SMALL_BLOCK or more is
        searched in one hyperscan pass that stops at the first keyword; else (or without the `fast` extra) a
        substring test per keyword, which in pure Python beats any regex over a long text."""
        if len(text) >= SMALL_BLOCK and (db := self._db()) is not None:
            return scan_any(db, text.encode("utf-8", "surrogatepass"))
        return any(w in text for w in self.words)

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


def scan_any(db: Any, data: bytes) -> bool:
    """Whether a hyperscan database matches anywhere in `data`: the scan stops at the first match."""
    found: list[int] = []
    try:
        db.scan(data, match_event_handler=lambda i, _s, _e, _f, _c: found.append(i) or True)  # True: stop
    except Exception:  # noqa: BLE001 - hyperscan.ScanTerminated: the handler stopped it at the first match
        if not found:
            raise
    return bool(found)


def literal_database(name: str, words: Sequence[bytes], caseless: bool = False, single_match: bool = False,
                     patterns: Sequence[bytes] = ()) -> Any:
    """`words` as a hyperscan block-mode database of literals (id = index), or None without the `fast` extra.
    `patterns`: regexes (case-sensitive) searched in the same pass, ids following the words'.

    Compiling one takes 100-150 ms for the prefilter's ~300 keywords, more than a whole small diagnosis, so
    the compiled form is kept in the user's cache (datafiles), keyed by the words, the flags and hyperscan's
    version, and only used if it finds every word in a probe text (a corrupt file, or a database built for
    another CPU, is compiled afresh). Callers honour VLLM_DOCTOR_PURE_PYTHON=1 (no hyperscan).
    """
    if not words:
        return None
    try:
        import hyperscan
    except ImportError:
        return None
    from . import datafiles

    flag = (hyperscan.HS_FLAG_CASELESS if caseless else 0) | (hyperscan.HS_FLAG_SINGLEMATCH if single_match else 0)
    key = datafiles.content_key([f"hyperscan {hyperscan.__version__} {flag} {len(patterns)}".encode(), *words,
                                 *patterns])
    stored = datafiles.read_blob(name, key)
    if stored is not None:
        try:
            db = hyperscan.loadb(stored, hyperscan.HS_MODE_BLOCK)
            db.scratch = hyperscan.Scratch(db)  # a loaded database comes without one (compile() makes it)
            if _finds_every_word(db, words):
                return db
        except Exception:  # noqa: BLE001 - corrupt, truncated, or for another platform: compile it again
            pass
    try:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        expressions = [*(b"".join(b"\\x%02x" % c for c in w) for w in words), *patterns]
        db.compile(expressions=expressions, ids=list(range(len(expressions))), elements=len(expressions),
                   flags=[flag] * len(words) + [0] * len(patterns))
    except Exception:  # noqa: BLE001 - a broken or too-old build: the pure-Python search is always there
        return None
    with contextlib.suppress(Exception):  # a database that cannot be serialized is simply not cached
        datafiles.write_blob(name, key, hyperscan.dumpb(db))
    return db


def _finds_every_word(db: Any, words: Sequence[bytes]) -> bool:
    """The database reports each word's id on a text holding every word (what a stale or foreign copy fails)."""
    found: set[int] = set()
    db.scan(b"\n".join(words), match_event_handler=lambda i, _s, _e, _f, _c: found.add(i))
    return {i for i in found if i < len(words)} == set(range(len(words)))  # (a pattern may match the probe too)


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

            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=[self.pattern.pattern], ids=[0], elements=1,
                       flags=[hyperscan.HS_FLAG_CASELESS if self.pattern.flags & re.IGNORECASE else 0])
        except Exception:  # noqa: BLE001 - no extra, or a pattern it refuses: the regex is always right
            return None
        self._hs = db
        return db
