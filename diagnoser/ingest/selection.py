"""Which lines of a block are decoded: the keyword lines, the few after each, the pieces of a wrapped message.

The prefilter found where a block's keyword lines start; this module picks from those offsets the lines the
reader hands on, in order, with their line numbers (`LineIndex` counts a block's newlines once), and decodes
each (clean.physical_to_lines, or dense.physical_lines for a line shape decided already). A keyword line keeps
FOLLOW lines after it (a message a terminal or chat window wrapped) and, past those, the pieces of one
hard-wrapped message (equal widths, up to WRAP_MAX); a line without a header keeps the piece before it. The
follow lines a block's last keyword lines owe carry over to the next block.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from diagnoser.ingest.clean import Redactor, physical_to_lines
from diagnoser.ingest.dense import is_dense, physical_lines
from diagnoser.ingest.line import Line
from diagnoser.ingest.prefilter import Prefilter
from diagnoser.ingest.unwrap import WRAP_MIN_WIDTH
from diagnoser.lazyre import lazy

if TYPE_CHECKING:
    from diagnoser.ingest.reader import ReadStats

FOLLOW = 3               #: lines kept after a keyword line, for wrapped messages
WRAP_MAX = 12            #: more lines kept while they are pieces of one hard-wrapped message (equal widths)

Blank = Callable[[bytes, int], bool]  #: whether the line of a block starting at an offset counts as empty

#: A line that starts a new log record (a vLLM header, maybe after a process tag, or a timestamp): never a
#: piece of the line before it. Matched (anchored) at a line's offset in the raw bytes.
RECORD_START = lazy(
    rb"(?:\x1b\[[\d;]*m)?(?:\([^)\n]{0,80}pid=\d+[^)\n]{0,40}\)(?:\x1b\[[\d;]*m)?\s*)?"
    rb"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:)")


class LineIndex:
    """Newlines before an offset of one block, counted once: each query resumes from the nearest offset asked
    before it (the access-line counts and the hits' line numbers each ask in increasing order)."""

    def __init__(self, block: bytes) -> None:
        self.block = block
        self._offsets = [0]  #: offsets asked about, sorted
        self._counts = [0]   #: the newlines before each

    def at(self, offset: int) -> int:
        i = bisect.bisect_right(self._offsets, offset) - 1
        if self._offsets[i] == offset:
            return self._counts[i]
        n = self._counts[i] + self.block.count(b"\n", self._offsets[i], offset)
        # kept sorted whatever the order of the questions: a count never restarts further back than the
        # nearest offset asked before (an early question about the block's end made every later one recount)
        self._offsets.insert(i + 1, offset)
        self._counts.insert(i + 1, n)
        return n


def _width(block: bytes, start: int, blank: Blank | None = None) -> int:
    """Length in bytes of the line starting at `start` (without its line end); 0 for a `blank` line."""
    if blank is not None and blank(block, start):
        return 0
    end = block.find(b"\n", start)
    end = len(block) if end == -1 else end
    if end > start and block[end - 1:end] == b"\r":
        end -= 1
    return end - start


def follow_after(block: bytes, prefilter: Prefilter, reach: int, blank: Blank | None = None) -> int:
    """Follow lines still owed to the next block (a keyword line among the last FOLLOW of this one), looked for
    within the block's last `reach` bytes."""
    # the last FOLLOW lines ending in a newline within those bytes (the first of them cut there when it is
    # longer), found from the end rather than by splitting those bytes
    lo = max(0, len(block) - reach)
    ends: list[int] = []
    i = len(block)
    while len(ends) <= FOLLOW and (i := block.rfind(b"\n", lo, i)) != -1:
        ends.append(i)
    if not ends:
        return 0
    ends.reverse()
    lines = list(zip([lo, *(e + 1 for e in ends[:-1])], ends, strict=True))[-FOLLOW:]  # (start, end) of each
    owed = 0
    for i, (start, end) in enumerate(lines):
        if not (blank is not None and blank(block, start)) and prefilter.holds(block[start:end]):
            owed = FOLLOW - (len(lines) - 1 - i)
    return max(owed, 0)


def _memo(blank: Blank) -> Blank:
    """`blank` remembered per offset, for one block."""
    seen: dict[int, bool] = {}

    def at(block: bytes, start: int) -> bool:
        known = seen.get(start)
        if known is None:
            known = seen[start] = blank(block, start)
        return known

    return at


def block_lines(block: bytes, first_number: int, prefilter: Prefilter | None, redact: Redactor | None,
                pending_follow: int, st: ReadStats, line_map: list[int] | None = None, blank: Blank | None = None,
                starts: list[int] | None = None, index: LineIndex | None = None) -> Iterator[Line]:
    """The lines worth looking at in one block of whole lines (`line_map`: physical line of each, unwrap()).

    `blank` says which lines count as empty (is_user_content on a block that was not blanked beforehand).
    `starts`: where the block's keyword lines start (else the prefilter searches the block); `index`: the block's
    newline counts, when the decoder left the block as it is.
    """
    if prefilter is None:
        for i, raw in enumerate(block.split(b"\n")[:-1]):
            st.decoded_lines += 1
            yield from physical_to_lines(first_number + (line_map[i] if line_map else i) + 1, raw, redact, False)
        return
    if starts is None:
        starts = prefilter.hit_lines(block)
    offsets, follows, before = _chosen(block, starts, pending_follow, blank, index)
    find = block.find
    for off, follow, k in zip(offsets, follows, before, strict=True):
        st.decoded_lines += 1
        number = first_number + (line_map[k] if line_map else k)
        yield from physical_lines(number + 1, block[off:find(b"\n", off)], redact, follow)  # a shape decides once


def _chosen(block: bytes, starts: list[int], pending_follow: int, blank: Blank | None, index: LineIndex | None
            ) -> tuple[list[int], list[bool], list[int]]:
    """Which lines of a block block_lines yields, in order: their offsets, whether each is only a follow line,
    and the block's lines before each. A function of the block alone (and the follow lines the block before
    owed). `index` (a block the decoder left as it is): a keyword-dense block is every line (dense.is_dense),
    without a follow line to look for."""
    if index is not None and is_dense(block, starts, index):
        return starts, [False] * len(starts), list(range(len(starts)))
    if blank is not None:
        blank = _memo(blank)  # a follow line's test is asked again when it is chosen
        starts = [s for s in starts if not blank(block, s)]
    # offset -> whether it is only a follow line (a keyword line wins over a follow flag for the same line)
    best = _owed_lines(block, pending_follow)
    for s in starts:
        best[s] = False
        _keep_around(block, s, blank, best)
    offsets = [off for off in sorted(best) if blank is None or not blank(block, off)]
    return offsets, [best[off] for off in offsets], _lines_before(block, offsets, index)


def _owed_lines(block: bytes, pending_follow: int) -> dict[int, bool]:
    """The first lines of the block still owed as follow lines of the previous block: offset -> True."""
    best: dict[int, bool] = {}
    pos, lead = 0, pending_follow
    while lead > 0 and pos < len(block):
        best[pos] = True
        pos = block.find(b"\n", pos) + 1
        lead -= 1
    return best


def _keep_around(block: bytes, s: int, blank: Blank | None, best: dict[int, bool]) -> None:
    """Mark as follow lines (unless chosen already) what the keyword line at `s` keeps: the piece before it when it
    has no header, the FOLLOW lines after it, and past those the pieces of a hard-wrapped message."""
    if s > 0 and not RECORD_START.match(block, s, s + 160):
        # a line without a header may be the second piece of a wrapped message: keep the piece before it
        prev = block.rfind(b"\n", 0, s - 1) + 1
        if _width(block, prev, blank) >= WRAP_MIN_WIDTH:
            best.setdefault(prev, True)
    # past FOLLOW lines, only the pieces of a hard-wrapped message: each as wide as the keyword line, which
    # is at least WRAP_MIN_WIDTH (so the widths are measured only from the FOLLOW-th line on, if at all)
    end_of_block = len(block)
    p, width, p_before = s, -1, s
    for kept in range(WRAP_MAX):
        p = block.find(b"\n", p) + 1
        if p <= 0 or p >= end_of_block or (kept >= FOLLOW and _width(block, p_before, blank) != width):
            break
        best.setdefault(p, True)
        if kept >= FOLLOW - 1:
            if width == -1:
                width = _width(block, s)
                if width < WRAP_MIN_WIDTH:
                    break
            p_before = p


def _lines_before(block: bytes, offsets: list[int], index: LineIndex | None) -> list[int]:
    """The block's lines before each of `offsets` (sorted): from `index`, else counted as they go (a blanked or
    decoded block)."""
    if index is not None:
        return [index.at(off) for off in offsets]
    before, k, last = [], 0, 0
    for off in offsets:
        k += block.count(b"\n", last, off)
        before.append(k)
        last = off
    return before
