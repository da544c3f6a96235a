"""Request-logger and access lines, found in raw blocks and skipped.

vLLM's request logger echoes prompts (often huge, often full of words like "error") and uvicorn writes one
access line per HTTP request: together they are most of a serving log, and they can never be vLLM's own
messages. These functions find them in a block of whole lines (a marker near the start of its line), to
blank them before a search, to search only the gaps between them, or to test one line.
"""

from __future__ import annotations

from diagnoser.lazyre import lazy

#: Request-logger lines echo prompts (often huge, often full of words like "error"): never evidence. (Each
#: starts with "]": user_spans walks them.)
USER_CONTENT_MARKERS = (b"] Received request ", b"] Generated response ", b"] Request details ")
#: uvicorn's access lines record one HTTP request each: never evidence, and most of a quiet serving log.
ACCESS = lazy(rb' HTTP/[12](?:\.[01])?" \d{3}\b')
#: How far into a line a marker may sit: process tag + vLLM header, not deep inside a flattened paste.
USER_CONTENT_REACH = 240


def blank_user_content(block: bytes) -> bytes:
    """Empty the request-logger and access lines of a block, keeping their newlines (line numbers stay right).

    The prefilter then never scans a prompt or an access line: together they are most of a serving log, and
    they can never be vLLM's own messages. Only a marker near the start of its line counts, so a flattened
    paste that merely contains one is kept whole.
    """
    spans = user_spans(block)
    if spans:
        parts, pos = [], 0
        for start, end in spans:
            parts.append(block[pos:start])
            pos = end - 1 if block[end - 1:end] == b"\n" else end  # the newline stays
        parts.append(block[pos:])
        block = b"".join(parts)
    if block.find(b" HTTP/") == -1:
        return block
    # many short lines: one split, then one C-level search per line
    search = ACCESS.search
    return b"\n".join([b"" if search(line, 0, USER_CONTENT_REACH + 40) else line for line in block.split(b"\n")])


def user_spans(block: bytes) -> list[tuple[int, int]]:
    """The request-logger lines of a block of whole lines: sorted, disjoint (start, end) with the newline
    inside (`block[start:end]` is the line and its newline). Found marker by marker: rare, long lines."""
    spans: list[tuple[int, int]] = []
    find, rfind, startswith = block.find, block.rfind, block.startswith
    # every marker starts with "]", rare in a serving log outside request-logger lines: walk the "]" (memchr)
    # near line starts; only a block full of them falls back to a search per marker
    budget = 4096
    i = find(b"]")
    while i != -1 and budget:
        budget -= 1
        start = rfind(b"\n", 0, i) + 1
        if i - start > USER_CONTENT_REACH:
            i = find(b"\n", i)
            i = -1 if i == -1 else find(b"]", i)
            continue
        if startswith(USER_CONTENT_MARKERS, i):
            end = find(b"\n", i)
            end = len(block) if end == -1 else end + 1
            spans.append((start, end))
            i = find(b"]", end)
        else:
            i = find(b"]", i + 1)
    if not budget:
        spans = []
        for marker in USER_CONTENT_MARKERS:
            i = find(marker)
            while i != -1:
                start = rfind(b"\n", 0, i) + 1
                end = find(b"\n", i)
                end = len(block) if end == -1 else end + 1
                if i - start <= USER_CONTENT_REACH:
                    spans.append((start, end))
                i = find(marker, end)
    if len(USER_CONTENT_MARKERS) > 1 and spans:
        spans.sort()
        out = [spans[0]]
        for span in spans[1:]:
            if span[0] >= out[-1][1]:
                out.append(span)
        spans = out
    return spans


def gaps_outside(block: bytes, spans: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """The ranges of `block` between `spans` (None: no span, the whole block)."""
    if not spans:
        return None
    gaps, pos = [], 0
    for start, end in spans:
        if start > pos:
            gaps.append((pos, start))
        pos = end
    if pos < len(block):
        gaps.append((pos, len(block)))
    return gaps


_MARKER_REACH = USER_CONTENT_REACH + max(len(m) for m in USER_CONTENT_MARKERS)


def is_user_content(block: bytes, start: int) -> bool:
    """Whether blank_user_content would empty the line of `block` starting at `start` (one line's test)."""
    end = block.find(b"\n", start)
    end = len(block) if end == -1 else end
    if ACCESS.search(block, start, min(end, start + USER_CONTENT_REACH + 40)) is not None:
        return True  # (the common case first: an access line)
    reach = min(end, start + _MARKER_REACH)
    if block.find(b"]", start, reach) != -1:  # memchr first: every marker starts with "]"
        for marker in USER_CONTENT_MARKERS:
            if block.find(marker, start, reach) != -1:
                return True
    return False

