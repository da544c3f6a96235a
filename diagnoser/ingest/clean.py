"""One physical line's bytes -> cleaned, parsed Lines.

Cleaning: invalid UTF-8 decodes with replacement; CRLF and tqdm `\\r` frames become separate lines with the
same line number; ANSI escapes (also the caret `^[[31m` form, and one whose ESC was lost in transit) and
control characters go; Markdown code fences of a chat paste are dropped; the redactor (when given) sees the
text next; a log flattened onto one line is split again at the prefixes it carries; each part is then parsed
(line.parse_line).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from diagnoser.ingest.keywords import BlockPattern, KeywordIndex
from diagnoser.ingest.line import LEVELS, PROC, Line, parse_line
from diagnoser.lazyre import lazy

LONG_RAW = 1 << 12       #: a line this long is checked for control bytes before cleaning

#: an ESC lost in transit ('[1;36m' left, no word character or bracket before the "["), led by its literal "[" so
#: that re skips to each "[" in C rather than trying the look-behind at every character
_LOST_ESC = r"\[(?<![\w\]\[]\[)[0-9]{1,3}(?:;[0-9]{1,3})*m"
ANSI = lazy(  # every alternative led by a literal: re skips to the next ESC, "^" or "[" in C
    r"\x1b\[[0-?]*[ -/]*[@-~]"            # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"                       # two-byte escapes
    r"|\^\[\[[0-?]*[ -/]*[@-~]"             # caret form left by copy-paste
    "|" + _LOST_ESC
)
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f]"
CONTROL = lazy(_CONTROL)
#: all that ANSI can match in a text without ESC and without the caret form
LOST_ESC = lazy(_LOST_ESC)
#: CONTROL's characters as bytes (the same in UTF-8): a long raw line without any needs no CONTROL pass
_CONTROL_BYTES = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])
_CONTROL_SEARCH = BlockPattern(lazy(_CONTROL.encode()), 1)

#: Where a flattened log restarts a record: a process tag or a vLLM header not at the line start.
RESTART = lazy(
    r"(?<=\S)(?:(?=\s?" + PROC.replace("?P<proc>", "?:").replace("?P<pid>", "?:") + ")"
    + rf"|(?<!\))(?=\s?(?:{LEVELS}) \d\d-\d\d \d\d:\d\d:\d\d [\[\w])"
    + rf"|(?=\s(?:{LEVELS}):\s{{2,}}\S))"  # uvicorn's 'INFO:     10.0.0.1:5000 - "POST ...'
)
#: More places where a flattened paste restarts a line, used only on text that is flattened for sure: raw
#: traceback lines, exception lines, rank tags and timestamps have no vLLM header to split at.
FLAT_RESTART = lazy(
    r"(?<=\S)(?=\s+(?:Traceback \(most recent call last\):|File \"[^\"]+\", line \d+, in "
    r"|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt):\s|\[rank\d+\]:\s"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d))"
)
#: A Markdown code fence line (```text, ~~~): chat formatting, never log content.
FENCE = lazy(r"^\s*(?:>\s*)*(?:`{3,}|~{3,})[\w+-]*\s*$")

Redactor = Callable[[str], str]  #: a secret redactor (redact.Redactor): text in, text out


def clean_text(text: str, controls: bool = True) -> str:
    """Strip ANSI escapes and control characters from one physical line (no newlines inside).

    `controls=False`: the caller knows the text holds no control character (no CONTROL pass).
    """
    # single characters first: `in` finds one with memchr, a three-character needle crawls (1 ms a megabyte)
    if "\x1b" in text or ("^" in text and "^[[" in text):
        text = ANSI.sub("", text)
    elif "[" in text:
        text = LOST_ESC.sub("", text)
    return CONTROL.sub("", text) if controls else text


#: The line's own leading prefixes (a process tag, a vLLM header): no record restarts inside them.
_LEAD = lazy(r"(?:" + PROC.replace("?P<proc>", "?:").replace("?P<pid>", "?:") + r"\s?)?"
             rf"(?:(?:{LEVELS}) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]\s]+:\d+\]|[\w./-]+:\d+\])\s?)?")
#: Literal words that any restart point needs (a cheap test before the regexes run over a long line).
_RESTART_WORDS = ("pid=", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "Traceback", ' File "', "Error: ",
                  "Exception: ", "[rank", "Exit: ", "Interrupt: ")
_RESTART_ANY = KeywordIndex([w] for w in _RESTART_WORDS)  # one pass over a 1 MB piece, not 13


def split_flattened(text: str) -> list[str]:
    """A log pasted onto one line restarts a record at each embedded prefix: split there.

    Once a line is known to be flattened (it holds more than one record), raw traceback lines, exception
    lines, rank tags and timestamps are split off too.
    """
    if len(text) < 60:
        return [text]
    lead = _LEAD.match(text)
    begin = max(1, lead.end() if lead else 1)
    if not _RESTART_ANY.any_from(text, begin):
        return [text]  # no second record can start here (the common case: one long request line)
    parts = _cut(text, RESTART)
    if len(parts) > 1 or text.find("Traceback (most recent call last)", 1) > 0 or text.count(' File "') > 1:
        parts = [q for p in parts for q in _cut(p, FLAT_RESTART)]
    return parts


def _cut(text: str, restart: re.Pattern[str]) -> list[str]:
    parts, start = [], 0
    points = _restart_points(text) if restart is RESTART and len(text) >= LONG_RAW else (
        m.start() for m in restart.finditer(text, 1))
    for cut in points:
        if cut <= start:
            continue
        part = text[start:cut].strip()
        if part and not parse_line(0, part + " ").text:  # the space strip() took: `vllm[42]: `, `stderr F `
            continue  # only a prefix (a quote, a process tag, a header, a shipper's): it belongs to what follows
        parts.append(part)
        start = cut
    parts.append(text[start:].strip())
    return [p for p in parts if p]


#: what every RESTART point is at or right before: a "(" (a process tag) or a level (a vLLM or uvicorn header)
_RESTART_NEAR = lazy(r"\(|" + LEVELS)


def _restart_points(text: str) -> list[int]:
    """`[m.start() for m in RESTART.finditer(text, 1)]`, tried only at and right before each "(" and level word:
    RESTART's look-arounds, tried at every character, crawl over a megabyte piece at 6 MB/s."""
    points: list[int] = []
    match, last = RESTART.match, 0
    for m in _RESTART_NEAR.finditer(text, 1):
        for at in (m.start() - 1, m.start()):
            if at > last and match(text, at):
                points.append(at)
                last = at
    return points



def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def physical_to_lines(number: int, raw: bytes, redact: Redactor | None, follow: bool) -> Iterator[Line]:
    """One physical line (CRLF/`\\r` frames included) -> cleaned, parsed Lines."""
    text = _decode(raw)
    frames = text.split("\r") if "\r" in text else [text]
    # a long line (a piece of an enormous one) is checked for control bytes in one C pass: the CONTROL regex
    # crawls over a megabyte at about 80 MB/s
    controls = len(raw) < LONG_RAW or (_CONTROL_SEARCH.search(raw) if _CONTROL_SEARCH.accelerated
                                       else len(raw.translate(None, _CONTROL_BYTES)) != len(raw))
    for frame in frames:
        if not frame or frame.isspace():  # (strip() would copy a megabyte piece)
            continue
        cleaned = clean_text(frame, controls)
        if ("`" in cleaned or ("~" in cleaned and "~~~" in cleaned)) and FENCE.match(cleaned):
            continue
        if redact is not None:
            cleaned = redact(cleaned)
        for part in split_flattened(cleaned):
            yield parse_line(number, part, follow)


