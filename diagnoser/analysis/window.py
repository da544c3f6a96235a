"""A wrapped message's window: the lines a terminal or a chat window cut one message onto, joined back.

`message_window` takes the first pending line and the lines that continue its message (untagged pieces
right after it, up to FOLLOW, more while each piece has the width of the first); `joined_texts` joins them
two ways (a space at each cut, or none). The pieces of one enormous line (cut by the reader at MAX_LINE) are
never joined: each is matched alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from diagnoser.analysis.tracker import FRAME, TRACEBACK_START, is_exception_line
from diagnoser.ingest.reader import MAX_LINE, Line
from diagnoser.ingest.selection import FOLLOW
from diagnoser.ingest.unwrap import WRAP_MIN_WIDTH
from diagnoser.lazyre import lazy

#: a piece this long is a cut of an enormous line (reader.MAX_LINE), not a wrapped message
CUT_PIECE = MAX_LINE // 2


def message_window(pending: Iterable[tuple[Line, Any]]) -> list[Line]:
    """The first pending line and the lines that continue its message (a wrapped paste).

    Up to FOLLOW lines continue a message; more only while each piece has the width of the first (a
    hard wrap cuts every line of a message at the same column).
    """
    rest = iter(pending)
    first = next(rest)[0]
    lines = [first]
    for nxt, _ in rest:
        prev = lines[-1]
        if cut_before(prev, nxt):
            break  # pieces of one enormous line: each is matched alone (joining them made it quadratic)
        if not continues(first, prev, nxt):
            break
        if len(lines) > FOLLOW and not full_piece(prev, first):
            break
        lines.append(nxt)
    return lines


def continues(first: Line, prev: Line, nxt: Line) -> bool:
    """Whether `nxt` can be the next piece of the message that `first` starts (`prev` is the piece before)."""
    if nxt.number not in (prev.number, prev.number + 1):
        return False
    if nxt.level or nxt.user_content:
        return False
    if nxt.proc_key != first.proc_key:
        # a terminal or chat window wraps the text after the tag: the pieces carry no tag of their own
        if nxt.process is not None or nxt.rank is not None:
            return False
    elif first.level and nxt.process is not None:
        # vLLM repeats its header on every line it logs: a tagged line without one is another write
        return False
    t = nxt.text.lstrip()
    if not t or t.startswith(TRACEBACK_START) or FRAME.match(t) or is_exception_line(t) or _HEADER_START.match(t):
        return False
    return not (t.startswith(("^", "~")) or prev.text.rstrip().endswith(("^", "~")))


def cut_before(prev: Line, nxt: Line) -> bool:
    """`nxt` is the next piece of the enormous line that `prev` is a cut of (reader.MAX_LINE)."""
    return nxt.number == prev.number and len(prev.text) >= CUT_PIECE


def full_piece(prev: Line, first: Line) -> bool:
    """`prev` was cut at the same column as the first piece: the message goes on."""
    width = len(first.raw.rstrip("\r\n"))
    return width >= WRAP_MIN_WIDTH and len(prev.raw.rstrip("\r\n")) == width


#: The start of a vLLM header that the prefix stripper did not take (the line was cut inside it).
_HEADER_START = lazy(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:")
_DIGIT_JOIN = lazy(r"(?:\d|\d\.)$")


def joined_texts(window: list[Line]) -> tuple[str, str]:
    """The message of a wrapped window, two ways: `spaced` puts a space at each cut (a chat window wrapped
    at a space and dropped it) except inside a number; `tight` joins the pieces as they are (a terminal cut
    the line at a column, inside a word). Whitespace kept at a cut is kept in both."""
    spaced = [window[0].text.strip()]
    tight = [window[0].text.strip()]
    for prev, nxt in zip(window, window[1:], strict=False):
        piece = nxt.text.strip()
        if not piece:
            continue
        kept_space = prev.raw[-1:].isspace() or nxt.text[:1].isspace()
        left = spaced[-1]
        in_number = bool(_DIGIT_JOIN.search(left)) and (piece[0].isdigit() or (
            piece[0] == "." and piece[1:2].isdigit() and left[-1:].isdigit()))
        spaced.append(piece if in_number and not kept_space else " " + piece)
        tight.append(" " + piece if kept_space else piece)
    return "".join(spaced), "".join(tight)

