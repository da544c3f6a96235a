"""Read: bytes in, the lines worth looking at out, in order, in constant memory.

The reader streams its input in fixed-size blocks, so memory stays flat whatever the size of the log or of
one line (an enormous line is handled in pieces that keep its line number). Each block of whole lines goes
through the shipper decoder (wrappers.Decoder) and, at the start of an input, the hard-wrap repair of pastes
(unwrap.py); it is searched for the prefilter's keywords on raw bytes (prefilter.py), request-logger and access
lines skipped (request_lines.py); only the lines selection.py picks (keyword lines, a few after each) are
decoded, cleaned and parsed (clean.py, line.py). Everything else is counted and skipped: a serving log is
mostly request and access lines that can never be evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from diagnoser.ingest.clean import Redactor, physical_to_lines
from diagnoser.ingest.keywords import BlockPattern
from diagnoser.ingest.line import Line
from diagnoser.ingest.prefilter import Prefilter
from diagnoser.ingest.request_lines import blank_user_content, gaps_outside, is_user_content, user_spans
from diagnoser.ingest.selection import LineIndex, block_lines, follow_after
from diagnoser.ingest.unwrap import hard_wrapped, unwrap
from diagnoser.ingest.wrappers import PRETTY, Decoder

BLOCK = 1 << 20          #: bytes read at a time
MAX_LINE = 1 << 20       #: a longer line is handled in pieces of this size (same line number)
PASTE_MAX = 8 << 20     #: inputs past this size are files, not pastes: no hard-wrap detection


@dataclass
class ReadStats:
    """What the reader saw: totals for the report's `input` block."""

    lines: int = 0
    bytes: int = 0
    decoded_lines: int = 0



#: a piece of an enormous line ends at the last `, ` (else space, else other separator) in its last PIECE_SLACK
#: bytes: a secret's key and value (`'api_key': 'sk-...'`, `--api-key VALUE`) stay in one piece
PIECE_SLACK = 1 << 16
_PIECE_CUTS = (b", ", b" ", b",", b";", b"\t")


def _piece_end(data: bytes) -> int:
    """Where to end the piece of an enormous line that `data` starts (in its last PIECE_SLACK bytes)."""
    floor = max(len(data) - PIECE_SLACK, len(data) // 2)
    for sep in _PIECE_CUTS:
        i = data.rfind(sep, floor)
        if i != -1:
            return i + len(sep)
    i = len(data) - 1
    while i > floor and data[i] & 0xC0 == 0x80:  # a UTF-8 character's continuation bytes
        i -= 1
    return i if data[i] >= 0xC0 else len(data)  # a character cut at the end goes whole to the next piece



def read_lines(stream: BinaryIO, prefilter: Prefilter | None = None, redact: Redactor | None = None,
               stats: ReadStats | None = None, on_block: Callable[..., None] | None = None) -> Iterator[Line]:
    """Yield the cleaned lines of a binary stream worth looking at, in order, in constant memory.

    With no prefilter every line is yielded (small pasted fragments); with one, only keyword lines and
    the FOLLOW lines after each. `on_block(first_line_number, block, gaps, index, line_map)` sees each block of
    whole raw lines before its lines are yielded (what is counted rather than read: access lines); `gaps` (None:
    all of it) are the ranges outside request-logger lines, `index` (or None) counts its newlines, `line_map`
    (or None), when a shipper's records were decoded, gives the physical line of each of the block's lines;
    two more arguments, when given, are where the block's keyword lines start (prefilter.hit_lines) and the
    matches of the prefilter's extras in the gaps when not None (Prefilter.scan).
    """
    st = stats if stats is not None else ReadStats()
    shapes = Decoder()  # shipper records (docker json-file, journald, Loki, OTLP, vLLM's JSON formatter)
    carry = b""
    number = 0  # line number of the first line in the next block
    pending_follow = 0
    # read1 returns what a pipe has now instead of waiting for a full block: a live server's log flows
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(BLOCK)
        if not chunk:
            break
        st.bytes += len(chunk)
        cut = chunk.rfind(b"\n")  # (`carry` never holds a newline)
        if cut == -1:
            data = carry + chunk if carry else chunk
            if len(data) < MAX_LINE:
                carry = data
                continue
            # an enormous line: handle it in pieces, all carrying the same line number, each cut where no
            # secret or character can straddle it (the rest goes on with the next piece)
            end = _piece_end(data)
            for line in physical_to_lines(number + 1, data[:end], redact, False):
                st.decoded_lines += 1
                yield line
            carry = data[end:]
            continue
        # the block of whole lines: one copy (a concatenation, then a slice of it, were two 1 MB copies a block)
        block = chunk if not carry and cut + 1 == len(chunk) else b"".join((carry, memoryview(chunk)[: cut + 1]))
        carry = chunk[cut + 1 :]
        number, pending_follow = yield from _whole_block(
            block, number, pending_follow, prefilter, redact, st, shapes, on_block)
    if carry:  # a last line without a newline (a truncated log)
        block = shapes.decode_block(carry + b"\n")[0] + shapes.flush()
        if on_block is not None:
            on_block(number, block, None, None, [0] * block.count(b"\n"))
        yield from block_lines(block, number, prefilter, redact, pending_follow, st, [0] * block.count(b"\n"))
        number += 1
    elif rest := shapes.flush():  # a shipper's partial line whose end never came
        yield from block_lines(rest, max(number - 1, 0), prefilter, redact, 0, st, [0] * rest.count(b"\n"))
    st.lines = number


def _whole_block(block: bytes, number: int, pending_follow: int, prefilter: Prefilter | None,
                 redact: Redactor | None, st: ReadStats, shapes: Decoder, on_block: Callable[..., None] | None
                 ) -> Generator[Line, None, tuple[int, int]]:
    """The lines of one block of whole lines (`number`: lines before it); returns the line count and the follow
    lines owed after it.

    Its three paths (hits found in place, the paste start, no prefilter) share the line count and the follow
    window, which is why they are one function: read_lines only cuts the input into blocks.
    """
    if prefilter is None:
        lines_in_block = block.count(b"\n")
        block, shape_map = shapes.decode_block(block)
        if on_block is not None:
            on_block(number, block, None, None, shape_map)
        # hard wraps come from pasting what a terminal or chat showed: only the start of an input can be one
        block, line_map = unwrap(block) if st.bytes <= PASTE_MAX else (block, None)
        if shape_map is not None:
            line_map = shape_map if line_map is None else [shape_map[i] for i in line_map]
        yield from block_lines(block, number, prefilter, redact, pending_follow, st, line_map)
        return number + lines_in_block, pending_follow
    decoded, shape_map, searched = _searched(block, prefilter, shapes, st.bytes)
    if searched is not None:
        # one pass counts the newlines, shared by the access-line counts and the hits' line numbers
        index = LineIndex(decoded) if decoded is block else None
        gaps, starts, found = searched
        if on_block is not None:
            on_block(number, decoded, gaps, index, shape_map, starts, found)
        yield from block_lines(decoded, number, prefilter, redact, pending_follow, st, shape_map,
                               blank=is_user_content, starts=starts, index=index)
        pending_follow = follow_after(decoded, prefilter, MAX_LINE // 4, is_user_content)
        return number + (block.count(b"\n") if index is None else index.at(len(block))), pending_follow
    lines_in_block = block.count(b"\n")
    block = decoded
    if on_block is not None:
        on_block(number, block, gaps_outside(block, user_spans(block)), None, shape_map)
    block = blank_user_content(block)
    block, line_map = unwrap(block) if st.bytes <= PASTE_MAX else (block, None)
    if shape_map is not None:
        line_map = shape_map if line_map is None else [shape_map[i] for i in line_map]
    yield from block_lines(block, number, prefilter, redact, pending_follow, st, line_map)
    return number + lines_in_block, follow_after(block, prefilter, MAX_LINE // 4)


def _searched(block: bytes, prefilter: Prefilter, shapes: Decoder, read: int
              ) -> tuple[bytes, list[int] | None, tuple[list[tuple[int, int]] | None, list[int], Any] | None]:
    """(decoded block, its line map or None, (gaps, hit starts, the extras' matches or None)) when the block's keyword
    lines are found without a pass over each of its lines; the last item None for the paste path (`read`: bytes
    read so far).

    Past the paste-sized start, or when the start is not a hard-wrapped paste, the lines are found in place
    (request-logger and access lines are skipped where the search lands, not blanked beforehand; request-logger
    lines, most of the bytes when request logging is on, are not even searched). There, a block of plain lines
    (most of a big log) is searched once for the keywords and the rare patterns the decoder and the series look
    for (hyperscan: one pass, not three). Without hyperscan, access lines are blanked all the same: one
    C-level test per line is far cheaper than the keyword regex crawling over them.
    """
    if read > PASTE_MAX or not (shapes.has_records(block) or hard_wrapped(block)):
        plain = _plain(block, prefilter, shapes)
        if plain is not None:
            return block, None, plain
    decoded, shape_map = shapes.decode_block(block)
    if (read > PASTE_MAX or not hard_wrapped(decoded)) and not prefilter.plain(len(decoded)):
        gaps = gaps_outside(decoded, user_spans(decoded))
        return decoded, shape_map, (gaps, prefilter.hit_lines(decoded, gaps), None)
    return decoded, shape_map, None


def _plain(block: bytes, prefilter: Prefilter, shapes: Decoder
           ) -> tuple[list[tuple[int, int]] | None, list[int], dict[BlockPattern, list[re.Match[bytes]]]] | None:
    """(gaps, hit starts, the extras' matches) of a block the decoder leaves as it is; None for a block with a
    shipper's records or a PRETTY marker (the decoder rewrites it: the caller decodes, then searches)."""
    if prefilter.plain(len(block)) or shapes.has_records(block):
        return None
    spans = user_spans(block)
    gaps = gaps_outside(block, spans)
    starts, found = prefilter.scan(block, gaps)
    if found[PRETTY] or (spans and PRETTY.search(block)):  # the search skipped the request-logger lines
        return None
    return gaps, starts, found
