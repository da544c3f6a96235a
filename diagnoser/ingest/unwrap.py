"""Hard-wrap repair of pastes: the pieces a terminal or chat window cut a long line into, joined again.

A log pasted from what a terminal showed has every line longer than the window cut at exactly its width; a
log as vLLM wrote it has ragged lengths. `wrap_width` tells the two apart on a block's first lines, and
`unwrap` rejoins the pieces (a piece with a prefix of its own is a new record, never joined), keeping for
each joined line the physical line it starts on.
"""

from __future__ import annotations

from diagnoser.ingest.request_lines import blank_user_content
from diagnoser.lazyre import lazy

WRAP_MIN_WIDTH = 40      #: a terminal or chat window wraps at this many columns or more

#: What a wrapped piece may not start with: a prefix of its own means a new record, not a piece.
_OWN_PREFIX = lazy(
    rb"(?:\x1b\[[\d;]*m)?(?:\([^)\n]{0,80}pid=\d+|\[rank\d+\]:|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d "
    rb"|\d{4}-\d\d-\d\d[T ]\d\d:|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d|Traceback \(most recent|  File \")")
_QUOTE = lazy(rb"(?:>[ \t]?)+")
UNWRAP_SAMPLE = 400       #: lines looked at to decide whether a block was hard-wrapped
MAX_WRAP_BYTES = 1200     #: a wrapped piece is at most this long (wider than any terminal, 4 bytes a column)


def _columns(line: bytes) -> int:
    """Characters in a line of UTF-8 (what a terminal counts when it wraps), without a CR."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if line.isascii():
        return len(line)
    return len(line.decode("utf-8", errors="replace"))


def wrap_width(block: bytes) -> int | None:
    """The column at which a terminal hard-wrapped this text, or None when it was not.

    A hard wrap cuts every line longer than W into pieces of exactly W characters, so no line is longer than
    W and the long lines mostly have exactly W; a log as vLLM wrote it has ragged lengths. Only the first
    UNWRAP_SAMPLE lines are measured (a paste is short; a big log is not wrapped).
    """
    widths: list[int] = []
    continued: list[bool] = []  # the next line has no prefix of its own (it can be a piece)
    pos = 0
    while len(widths) < UNWRAP_SAMPLE:
        end = block.find(b"\n", pos)
        if end == -1:
            break
        if end - pos > MAX_WRAP_BYTES:
            return None  # a line no terminal would have left unwrapped
        widths.append(_columns(block[pos:end]))
        nxt = end + 1
        continued.append(nxt < len(block) and block[nxt:nxt + 1] not in (b"\n", b"\r")
                   and not _OWN_PREFIX.match(_QUOTE.sub(b"", block[nxt:nxt + 200], count=1)))
        pos = nxt
    long_ones = [w for w in widths if w >= WRAP_MIN_WIDTH]
    if len(long_ones) < 2:
        return None
    top = max(long_ones)
    at_top = [c for w, c in zip(widths, continued, strict=True) if w == top]
    # several lines cut at the same, widest column, most of them (and at least two) continued by a piece
    # without a prefix: two equally wide lines of a log as written (idle stats lines) with one header-less
    # line after one of them (a shell's "Killed", "Segmentation fault") are not a wrap
    if len(at_top) < 2 or len(at_top) * 7 < len(long_ones) or sum(at_top) < 2 or sum(at_top) * 2 < len(at_top):
        return None
    return top


def unwrap(block: bytes) -> tuple[bytes, list[int] | None]:
    """Rejoin the pieces of a hard-wrapped paste: each line of exactly the wrap width continues on the next.

    Returns the rejoined block and, when something was joined, for each of its lines the index of the
    physical line it starts on (None: the block is unchanged). A paste wrapped twice (a mail client at 80
    columns, then a terminal at 60) is unwrapped twice. A piece that carries its own prefix (a vLLM header,
    a process tag, a timestamp) is never joined; a chat quote ('> ') repeated on each piece is dropped.
    """
    line_map: list[int] | None = None
    for _ in range(3):
        width = wrap_width(block)
        if width is None:
            break
        block, starts = _unwrap_once(block, width)
        line_map = starts if line_map is None else [line_map[i] for i in starts]
    return block, line_map


def _unwrap_once(block: bytes, width: int) -> tuple[bytes, list[int]]:
    out: list[bytes] = []
    starts: list[int] = []
    lines = block.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    joining = False
    quote = b""
    for index, line in enumerate(lines):
        body = line[:-1] if line.endswith(b"\r") else line
        if joining:
            piece = body
            if quote and piece.startswith(quote.rstrip()):
                piece = piece[len(quote):] if piece.startswith(quote) else piece[len(quote.rstrip()):]
            if piece and not _OWN_PREFIX.match(piece):
                out.append(piece)
                joining = _columns(body) == width
                if not joining:
                    out.append(b"\n")
                continue
            out.append(b"\n")
        m = _QUOTE.match(body)
        quote = m.group(0) if m else b""
        starts.append(index)
        out.append(body)
        joining = _columns(body) == width
        if not joining:
            out.append(b"\n")
    if joining:
        out.append(b"\n")
    return b"".join(out), starts


def hard_wrapped(block: bytes) -> bool:
    """Whether unwrap() would rejoin anything in a block of the input's start (request-logger and access
    lines blanked, as the slow path does). wrap_width reads only the first UNWRAP_SAMPLE lines (and peeks
    at the line after the last), so only those are blanked here."""
    end = 0
    for _ in range(UNWRAP_SAMPLE + 2):
        end = block.find(b"\n", end) + 1
        if end == 0:
            end = len(block)
            break
    return wrap_width(blank_user_content(block[:end])) is not None

