"""The prefilter: which lines of a block hold a keyword that any rule, landmark or stats line needs.

It searches a whole block of raw bytes at a time (hyperscan when installed, else one trie-shaped regex over
the lower-cased block, and keyword by keyword for a small input), never line by line, so the lines that can
never be evidence cost no decoding at all. The rare patterns the shipper decoder and the series look for
(`extras`) are found in the same pass.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

from diagnoser.ingest.keywords import BlockPattern, literal_database, trie_pattern
from diagnoser.ingest.wrappers import PRETTY


class Prefilter:
    """Literal keywords (lower-case bytes): a line is looked at only if it holds one of them.

    The search runs over a whole block at a time, never line by line: with the optional `fast` extra
    (hyperscan, SIMD multi-literal search) at several hundred MB/s, else as one trie-shaped regex over the
    lower-cased block. Either engine is built on first need (a hyperscan database costs 100-150 ms to compile,
    so its compiled form is cached, see keywords.literal_database); the first SMALL_INPUT bytes searched
    (a pasted or small log, whole) need neither: each keyword is looked for with bytes.find. All three find
    the same lines.
    """

    #: Bytes searched keyword by keyword before an engine is built: ~300 finds over 32 KiB take ~4 ms, about
    #: what loading a cached hyperscan database takes, and far less than compiling the regex (~50 ms).
    SMALL_INPUT = 1 << 15

    def __init__(self, keywords: Iterable[str], extras: Iterable[BlockPattern] = ()) -> None:
        words = {k.lower().encode() for k in keywords if k and k.strip()}
        #: rare patterns (case-sensitive) whose matches `scan` finds in the same pass as the keywords
        self.extras = (PRETTY, *extras)
        # a keyword that contains another is redundant: the shorter one finds the line already
        self.keywords = _irreducible(words)
        self._regex: re.Pattern[bytes] | None = None
        self._hs: Any = None
        self._hs_tried = bool(os.environ.get("VLLM_DOCTOR_PURE_PYTHON"))  # decided when built, as for tests
        self._searched = 0  # bytes searched so far, across every input this prefilter has seen

    @property
    def _any(self) -> re.Pattern[bytes] | None:
        """One pass over a block whatever the number of keywords: the keywords as a trie-shaped regex."""
        if self._regex is None and self.keywords:
            self._regex = re.compile(_trie(self.keywords))
        return self._regex

    @property
    def accelerated(self) -> bool:
        """Whether big blocks are searched by hyperscan (the `fast` extra)."""
        return self._hyperscan() is not None

    def plain(self, size: int) -> bool:
        """Whether the next `size` bytes will be searched by the regex (no hyperscan, past SMALL_INPUT)."""
        return self._searched + size > self.SMALL_INPUT and self._hyperscan() is None

    def _hyperscan(self) -> Any:
        if not self._hs_tried:
            self._hs_tried = True
            self._hs = literal_database("hs-prefilter", self.keywords, caseless=True,
                                        patterns=[p.pattern.pattern for p in self.extras])
        return self._hs

    def holds(self, line: bytes) -> bool:
        """Whether one line carries a keyword (the same test hit_lines makes on a whole block)."""
        if len(line) < 4096:
            low = line.lower()
            return any(k in low for k in self.keywords)
        if self._hyperscan() is not None:
            return bool(self._hit_lines_hs(line))
        return self._any is not None and self._any.search(line.lower()) is not None

    def hit_lines(self, block: bytes, gaps: list[tuple[int, int]] | None = None) -> list[int]:
        """Start offsets of the lines in `block` that hold a keyword, sorted and unique.

        `gaps`: only these (start, end) ranges are searched, each starting at a line start (the rest of the
        block is request-logger lines, which are never evidence).
        """
        if not self.keywords:
            return []
        self._searched += len(block)
        if self._searched <= self.SMALL_INPUT:
            return self._hit_lines_small(block, gaps)
        if self._hyperscan() is not None:
            return self._hit_lines_hs(block, gaps)
        starts: list[int] = []
        for a, b in [(0, len(block))] if gaps is None else gaps:
            low = block.lower() if gaps is None else block[a:b].lower()
            search, find, rfind = self._any.search, low.find, low.rfind
            pos = 0
            while True:
                m = search(low, pos)
                if m is None:
                    break
                starts.append(a + rfind(b"\n", 0, m.start()) + 1)
                pos = find(b"\n", m.end())
                if pos == -1:
                    break
        return starts

    def scan(self, block: bytes, gaps: list[tuple[int, int]] | None = None
             ) -> tuple[list[int], dict[BlockPattern, list[re.Match[bytes]]]]:
        """hit_lines, and the matches of each of `extras` in the same ranges: with hyperscan, all in one pass."""
        ranges = [(0, len(block))] if gaps is None else gaps
        if self._searched + len(block) <= self.SMALL_INPUT or self._hyperscan() is None:
            return self.hit_lines(block, gaps), {p: [m for a, b in ranges for m in p.finditer(block, a, b)]
                                                 for p in self.extras}
        self._searched += len(block)
        ends: dict[int, list[int]] = {}  # where hyperscan saw the extras' matches end, by hyperscan id
        starts = self._hit_lines_hs(block, gaps, ends)
        found: dict[BlockPattern, list[re.Match[bytes]]] = {}
        for i, p in enumerate(self.extras):
            mine = ends.get(len(self.keywords) + i, [])
            # a range's matches are read within it (each range was scanned alone: none straddles two)
            found[p] = [m for a, b in ranges for m in p.at_ends(block, [e for e in mine if a < e <= b], a, b)]
        return starts, found

    def _hit_lines_small(self, block: bytes, gaps: list[tuple[int, int]] | None = None) -> list[int]:
        starts: set[int] = set()
        for a, b in [(0, len(block))] if gaps is None else gaps:
            low = block.lower() if gaps is None else block[a:b].lower()
            find, rfind = low.find, low.rfind
            for word in self.keywords:
                i = find(word)
                while i != -1:
                    starts.add(a + rfind(b"\n", 0, i) + 1)
                    end = find(b"\n", i)
                    if end == -1:
                        break
                    i = find(word, end)
        return sorted(starts)

    def _hit_lines_hs(self, block: bytes, gaps: list[tuple[int, int]] | None = None,
                      extra_ends: dict[int, list[int]] | None = None) -> list[int]:
        """`extra_ends` (when given) gets the ends of the extras' matches, by id."""
        ends: list[int] = []
        keywords = len(self.keywords)
        extra = {} if extra_ends is None else extra_ends

        def seen(i: int, _start: int, end: int, _flags: int, a: int) -> None:
            if i < keywords:
                ends.append(a + end)
            else:
                extra.setdefault(i, []).append(a + end)

        if gaps is None:
            self._hs.scan(block, match_event_handler=seen, context=0)
        else:
            scan = self._hs.scan
            for a, b in gaps:
                scan(block[a:b], match_event_handler=seen, context=a)
        ends.sort()
        rfind, find = block.rfind, block.find
        starts: list[int] = []
        line_end = -1
        for end in ends:
            if end <= line_end:
                continue  # another keyword on a line already found
            starts.append(rfind(b"\n", 0, end) + 1)
            line_end = find(b"\n", end)
            if line_end == -1:
                break
        return starts


def _irreducible(words: set[bytes]) -> list[bytes]:
    """The words (sorted) that hold no other word: each word is looked for once in all of them joined.

    (Testing every pair costs ~100,000 `in` tests for the ~370 keywords, tens of ms at every start.)
    """
    order = sorted(words)
    if any(b"\0" in w for w in order):
        return [w for w in order if not any(o != w and o in w for o in order)]
    joined = b"\0".join(order)
    ends = list(accumulate(len(w) + 1 for w in order))  # ends[j]: one past the separator after word j
    redundant: set[int] = set()
    for word in order:
        i = joined.find(word)
        while i != -1:
            j = bisect_right(ends, i)
            if order[j] != word:
                redundant.add(j)
            i = joined.find(word, i + 1)
    return [w for j, w in enumerate(order) if j not in redundant]


def _trie(words: list[bytes]) -> bytes:
    """A regex matching any of `words` (bytes), shaped as a trie (shared prefixes tested once)."""
    return trie_pattern([w.decode("latin-1") for w in words]).encode("latin-1")

