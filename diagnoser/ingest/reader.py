"""Read: bytes in, clean lines out.

The reader streams its input in fixed-size blocks, so memory stays flat whatever the size of the log or of
one line. A block is searched for the prefilter's keywords on raw (lower-cased) bytes; only lines that
carry a keyword, plus a few lines after each (for messages a terminal or chat window wrapped), are
decoded and cleaned. Everything else is counted and skipped: a serving log is mostly request and access
lines that can never be evidence.

Cleaning: invalid UTF-8 decodes with replacement; CRLF and tqdm `\\r` frames become separate lines with the
same line number; ANSI escapes (also the caret `^[[31m` form) and control characters go; prefixes that
docker, Kubernetes, CI, journald, chat quoting, vLLM's logger and its process tags add are stripped and
recorded; a log flattened onto one line is split again at the prefixes it carries.
"""

from __future__ import annotations

import bisect
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, BinaryIO

from diagnoser.ingest.keywords import BlockPattern, KeywordIndex, literal_database, lowered_part, trie_pattern
from diagnoser.ingest.wrappers import PRETTY, Decoder

BLOCK = 1 << 20          #: bytes read at a time
MAX_LINE = 1 << 20       #: a longer line is handled in pieces of this size (same line number)
PASTE_MAX = 8 << 20     #: inputs past this size are files, not pastes: no hard-wrap detection
LONG_RAW = 1 << 12       #: a line this long is checked for control bytes before cleaning
FOLLOW = 3               #: lines kept after a keyword line, for wrapped messages
WRAP_MAX = 12            #: more lines kept while they are pieces of one hard-wrapped message (equal widths)
WRAP_MIN_WIDTH = 40      #: a terminal or chat window wraps at this many columns or more

#: an ESC lost in transit ('[1;36m' left, no word character or bracket before the "["), led by its literal "[" so
#: that re skips to each "[" in C rather than trying the look-behind at every character
_LOST_ESC = r"\[(?<![\w\]\[]\[)[0-9]{1,3}(?:;[0-9]{1,3})*m"
ANSI = re.compile(  # every alternative led by a literal: re skips to the next ESC, "^" or "[" in C
    r"\x1b\[[0-?]*[ -/]*[@-~]"            # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"                       # two-byte escapes
    r"|\^\[\[[0-?]*[ -/]*[@-~]"             # caret form left by copy-paste
    "|" + _LOST_ESC
)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: all that ANSI can match in a text without ESC and without the caret form
LOST_ESC = re.compile(_LOST_ESC)
#: CONTROL's characters as bytes (the same in UTF-8): a long raw line without any needs no CONTROL pass
_CONTROL_BYTES = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])
_CONTROL_SEARCH = BlockPattern(re.compile(CONTROL.pattern.encode()), 1)

LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
PROC = r"\((?P<proc>[A-Za-z_][\w]*(?:[ _][\w=]+)*?)\s+pid=(?P<pid>\d+)(?:,\s*ip=[^)\s]*)?\)"

#: Prefixes stripped from the start of a line, repeatedly, in any order.
PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("quote", re.compile(r"^(?:>[ \t]?)+")),
    # shippers' text shapes (JSON records are decoded before, in shapes.py): `kubectl logs --prefix`,
    # `journalctl -o short-iso` (time, host, identifier[pid]), RFC 5424 syslog
    ("kubectl", re.compile(r"^\[(?:pod/)?[\w.-]+/[\w.-]+\] ")),
    ("journal", re.compile(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d) [\w.-]+ [\w.@/-]+\[\d+\]: ")),
    ("rfc5424", re.compile(r"^<\d{1,3}>1 \S+ \S+ \S+ \S+ \S+ (?:-|(?:\[[^\]]*\])+) ?")),
    ("iso", re.compile(
        r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*(?:\|\s*)?")),
    ("syslog", re.compile(
        r"^(?:<\d{1,3}>)?[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? [\w.-]+ [\w.@/-]+(?:\[\d+\])?: ")),
    ("cri", re.compile(r"^(?:stdout|stderr) [FP] ")),
    ("compose", re.compile(r"^[a-z0-9][\w.-]*-\d+\s+\| ")),
    ("pipe", re.compile(rf"^(?:(?:{LEVELS})\s*\|\s*)?(?:stdout|stderr)\s*\|\s*")),
    ("proc", re.compile("^" + PROC + r"\s?")),
    ("rank", re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")),
    ("vllm", re.compile(
        rf"^(?P<level>{LEVELS}) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? "
        r"(?:\[(?P<src>[^\]\s]+:\d+)\]|(?P<src_old>[\w./-]+:\d+)\])?[ \t]?")),
    ("uvicorn", re.compile(rf"^(?P<level>{LEVELS}):\s+")),
)


def _any_prefix(prefixes: tuple[tuple[str, re.Pattern[str]], ...]) -> re.Pattern[str]:
    """PREFIXES as one alternation, each in a group named after it (its own groups renamed `NAME__GROUP`):
    one C-level match per prefix stripped instead of a Python call per table row. Alternatives are tried in
    the table's order, so the first row that matches wins, as in the loop."""
    def own(name: str, body: str) -> str:
        return re.sub(r"\(\?P<(\w+)>", lambda m: f"(?P<{name}__{m.group(1)}>", body)
    return re.compile("|".join(f"(?P<{name}>{own(name, p.pattern)})" for name, p in prefixes))


_PREFIX = _any_prefix(PREFIXES)
_PREFIX_GROUPS = {name: [(f"{name}__{g}", g) for g in p.groupindex] for name, p in PREFIXES}

#: Where a flattened log restarts a record: a process tag or a vLLM header not at the line start.
RESTART = re.compile(
    r"(?<=\S)(?:(?=\s?" + PROC.replace("?P<proc>", "?:").replace("?P<pid>", "?:") + ")"
    + rf"|(?<!\))(?=\s?(?:{LEVELS}) \d\d-\d\d \d\d:\d\d:\d\d [\[\w])"
    + rf"|(?=\s(?:{LEVELS}):\s{{2,}}\S))"  # uvicorn's 'INFO:     10.0.0.1:5000 - "POST ...'
)
#: More places where a flattened paste restarts a line, used only on text that is flattened for sure: raw
#: traceback lines, exception lines, rank tags and timestamps have no vLLM header to split at.
FLAT_RESTART = re.compile(
    r"(?<=\S)(?=\s+(?:Traceback \(most recent call last\):|File \"[^\"]+\", line \d+, in "
    r"|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt):\s|\[rank\d+\]:\s"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d))"
)
RANK_IN_PROC = re.compile(r"(?:rank=|TP|rank)(\d+)")

#: A line that starts a new log record (a vLLM header, maybe after a process tag, or a timestamp): never a
#: piece of the line before it. Matched (anchored) at a line's offset in the raw bytes.
RECORD_START = re.compile(
    rb"(?:\x1b\[[\d;]*m)?(?:\([^)\n]{0,80}pid=\d+[^)\n]{0,40}\)(?:\x1b\[[\d;]*m)?\s*)?"
    rb"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:)")
#: A Markdown code fence line (```text, ~~~): chat formatting, never log content.
FENCE = re.compile(r"^\s*(?:>\s*)*(?:`{3,}|~{3,})[\w+-]*\s*$")

#: Lines that echo user content (prompts) must never be taken for vLLM's own messages.
USER_CONTENT = re.compile(
    r"^(?:Received request|Added request|Finished request|Aborted request|Request \S+ (?:details|params))"
    r"|\bprompt: '|\bprompt_token_ids: \[|\"(?:GET|POST|PUT|DELETE) /"
)
#: What USER_CONTENT needs: one of its line starts, or one of these literals.
_USER_CONTENT_STARTS = ("Received request", "Added request", "Finished request", "Aborted request", "Request ")
_USER_CONTENT_WORDS = ("prompt: '", "prompt_token_ids: [", '"GET /', '"POST /', '"PUT /', '"DELETE /')
_USER_CONTENT_ANY = KeywordIndex([w] for w in _USER_CONTENT_WORDS)


@dataclass(slots=True)
class Line:
    """One cleaned line. `text` is the message; `raw` keeps the prefixes for evidence."""

    number: int
    text: str
    raw: str
    process: str | None = None
    pid: int | None = None
    rank: int | None = None
    level: str | None = None
    timestamp: str | None = None
    source: str | None = None
    user_content: bool = False
    follow: bool = False  #: kept only because it follows a keyword line

    @property
    def proc_key(self) -> str:
        """Identifies the process that wrote the line (tracebacks are tracked per process)."""
        if self.pid is not None:
            return f"{self.process}:{self.pid}"
        return self.process or ""


@dataclass
class ReadStats:
    """What the reader saw: totals for the report's `input` block."""

    lines: int = 0
    bytes: int = 0
    decoded_lines: int = 0


Redactor = Callable[[str], str]

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
_LEAD = re.compile(r"(?:" + PROC.replace("?P<proc>", "?:").replace("?P<pid>", "?:") + r"\s?)?"
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
_RESTART_NEAR = re.compile(r"\(|" + LEVELS)


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


def parse_line(number: int, text: str, follow: bool = False) -> Line:
    """Strip and record the prefixes of one clean line."""
    line = Line(number=number, text=text, raw=text, follow=follow)
    rest = text
    guard = 0
    while rest and guard < 8:
        guard += 1
        found = _next_prefix(rest)
        if found is None:
            break
        name, m, groups = found
        if name == "proc":
            if line.process is None:
                line.process = groups["proc"]
                line.pid = int(groups["pid"])
                r = RANK_IN_PROC.search(groups["proc"])
                if r and line.rank is None:
                    line.rank = int(r.group(1))
        elif name == "rank":
            line.rank = int(groups["rank"])
        elif name in ("vllm", "uvicorn"):
            line.level = groups["level"]
            line.timestamp = groups.get("ts")
            line.source = groups.get("src") or groups.get("src_old")
        rest = rest[m.end():]
    line.text = rest.rstrip()
    lowered_part(text, line.text, len(text) - len(rest))  # a long piece's lower-cased copy, not made again
    line.user_content = _user_content(line.text)
    return line


def _next_prefix(rest: str) -> tuple[str, re.Match[str], dict[str, str | None]] | None:
    """The first PREFIXES row that matches a non-empty start of `rest`: (name, match, its groups)."""
    m = _PREFIX.match(rest)
    if m is None:
        return None  # no row matches (the common last round: one C-level try)
    if m.end() > 0:
        name = m.lastgroup or ""
        return name, m, {group: m.group(full) for full, group in _PREFIX_GROUPS[name]}
    for name, pattern in PREFIXES:  # a row matched empty: the table's loop skips such a match
        m = pattern.match(rest)
        if m and m.end() > 0:
            return name, m, m.groupdict()
    return None


def _user_content(text: str) -> bool:
    """USER_CONTENT.search(text), with the regex run only when one of its literals is there (an alternation with
    word boundaries scans a 1 MB piece of an enormous line at about 6 MB/s, and costs a stats line 5 us)."""
    if not text.startswith(_USER_CONTENT_STARTS) and not _USER_CONTENT_ANY.any_in(text):
        return False
    return USER_CONTENT.search(text) is not None


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


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _physical_to_lines(number: int, raw: bytes, redact: Redactor | None, follow: bool) -> Iterator[Line]:
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
        scanned = self.scan_ends(block, gaps)
        if scanned is None:
            ranges = [(0, len(block))] if gaps is None else gaps
            return self.hit_lines(block, gaps), {p: [m for a, b in ranges for m in p.finditer(block, a, b)]
                                                 for p in self.extras}
        return scanned[0], self.found_at(block, gaps, scanned[1])

    def scan_ends(self, block: bytes, gaps: list[tuple[int, int]] | None = None
                  ) -> tuple[list[int], dict[int, list[int]]] | None:
        """hit_lines, and where hyperscan saw the extras' matches end (by hyperscan id) in the same pass; None
        where hyperscan does not search (no `fast` extra, or within SMALL_INPUT)."""
        if self._searched + len(block) <= self.SMALL_INPUT or self._hyperscan() is None:
            return None
        self._searched += len(block)
        ends: dict[int, list[int]] = {}
        return self._hit_lines_hs(block, gaps, ends), ends

    def found_at(self, block: bytes, gaps: list[tuple[int, int]] | None, ends: dict[int, list[int]]
                 ) -> dict[BlockPattern, list[re.Match[bytes]]]:
        """The extras' matches in `gaps` (None: all the block) from scan_ends's ends."""
        ranges = [(0, len(block))] if gaps is None else gaps
        found: dict[BlockPattern, list[re.Match[bytes]]] = {}
        for i, p in enumerate(self.extras):
            mine = ends.get(len(self.keywords) + i, [])
            # a range's matches are read within it (each range was scanned alone: none straddles two)
            found[p] = [m for a, b in ranges for m in p.at_ends(block, [e for e in mine if a < e <= b], a, b)]
        return found

    def searched_elsewhere(self, size: int) -> None:
        """Count `size` bytes another process searched for this prefilter (the reader's helper, prescan.py)."""
        self._searched += size

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


class LineIndex:
    """Newlines before an offset of one block, counted once: each query resumes from the nearest offset asked
    before it (the access-line counts and the hits' line numbers each ask in increasing order)."""

    def __init__(self, block: bytes, offsets: list[int] | None = None, counts: list[int] | None = None) -> None:
        """`offsets` and `counts` (sorted, from 0): answers known already (another LineIndex's, the helper's)."""
        self.block = block
        self._offsets = [0] if offsets is None else offsets
        self._counts = [0] if counts is None else counts

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


def _hard_wrapped(block: bytes) -> bool:
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


def read_lines(stream: BinaryIO, prefilter: Prefilter | None = None, redact: Redactor | None = None,
               stats: ReadStats | None = None, on_block: Callable[..., None] | None = None,
               prepass: Callable[..., Any] | None = None, ahead: Callable[..., Any] | None = None) -> Iterator[Line]:
    """Yield the cleaned lines of a binary stream worth looking at, in order, in constant memory.

    With no prefilter every line is yielded (small pasted fragments); with one, only keyword lines and
    the FOLLOW lines after each. `on_block(first_line_number, block, gaps, index, line_map)` sees each block of
    whole raw lines before its lines are yielded (what is counted rather than read: access lines); `gaps` (None:
    all of it) are the ranges outside request-logger lines, `index` (or None) counts its newlines, `line_map`
    (or None), when a shipper's records were decoded, gives the physical line of each of the block's lines;
    three more arguments, when given, are where the block's keyword lines start (prefilter.hit_lines), the
    matches of the prefilter's extras in the gaps when not None (Prefilter.scan), and what `prepass(block, gaps,
    starts)` returned (None: on_block computes it).

    `ahead(offset, block_size, scan)`: a prescan.Ahead over the rest of the input from that offset of the stream,
    or None. Asked after the first block when hyperscan searches: the blocks then come from it, each with
    AheadScan's answer computed by its helper process; when it stops, the reading goes on from where it did, and
    asks again after the next block of whole lines it reads itself.
    """
    st = stats if stats is not None else ReadStats()
    shapes = Decoder()  # shipper records (docker json-file, journald, Loki, OTLP, vLLM's JSON formatter)
    carry = b""
    number = 0  # line number of the first line in the next block
    pending_follow = 0
    # read1 returns what a pipe has now instead of waiting for a full block: a live server's log flows
    read = getattr(stream, "read1", stream.read)
    helper: Any = None  # the prescan.Ahead giving the blocks, while it runs
    # ask for a helper after the first block, and again after a block read here once one stopped (a line longer
    # than a block stops it: the next may start after that line; `ahead` says how many it allows)
    ask, stopped = ahead is not None and prefilter is not None, False
    try:
        while True:
            if ask and st.bytes:
                ask = False
                if prefilter is not None and prefilter.accelerated:
                    helper = ahead(st.bytes - len(carry), BLOCK,
                                   AheadScan(prefilter, prepass, pending_follow, st.bytes - len(carry)))
                    if helper is not None:  # its first block starts with the partial line carried
                        st.bytes -= len(carry)
                        carry = b""
            if helper is not None:
                got = helper.next()
                if got is not None:
                    st.bytes += len(got[0])
                    number, pending_follow = yield from _whole_block(
                        got[0], number, pending_follow, prefilter, redact, st, shapes, on_block, got[1])
                    continue
                read, helper, stopped = helper.read1, None, True  # it stopped: reading goes on here, from there
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
                for line in _physical_to_lines(number + 1, data[:end], redact, False):
                    st.decoded_lines += 1
                    yield line
                carry = data[end:]
                continue
            # the block of whole lines: one copy (a concatenation, then a slice of it, were two 1 MB copies a block)
            block = chunk if not carry and cut + 1 == len(chunk) else b"".join((carry, memoryview(chunk)[: cut + 1]))
            carry = chunk[cut + 1 :]
            number, pending_follow = yield from _whole_block(
                block, number, pending_follow, prefilter, redact, st, shapes, on_block)
            ask, stopped = ask or stopped, False
    finally:
        if helper is not None:
            helper.close()
    if carry:  # a last line without a newline (a truncated log)
        block = shapes.decode_block(carry + b"\n")[0] + shapes.flush()
        if on_block is not None:
            on_block(number, block, None, None, [0] * block.count(b"\n"))
        yield from _block_lines(block, number, prefilter, redact, pending_follow, st, [0] * block.count(b"\n"))
        number += 1
    elif rest := shapes.flush():  # a shipper's partial line whose end never came
        yield from _block_lines(rest, max(number - 1, 0), prefilter, redact, 0, st, [0] * rest.count(b"\n"))
    st.lines = number


def _whole_block(block: bytes, number: int, pending_follow: int, prefilter: Prefilter | None,
                 redact: Redactor | None, st: ReadStats, shapes: Decoder, on_block: Callable[..., None] | None,
                 ahead: Any = None) -> Generator[Line, None, tuple[int, int]]:
    """The lines of one block of whole lines (`number`: lines before it); returns the line count and the follow
    lines owed after it. `ahead`: AheadScan's answer for the block from the helper process (None: none, or it
    found the block not plain), taken when the decoder holds no partial CRI line (then ours would say the same).

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
        yield from _block_lines(block, number, prefilter, redact, pending_follow, st, line_map)
        return number + lines_in_block, pending_follow
    counted = chosen = owes = None
    if ahead is not None and not shapes.pending_cri:
        gaps, starts, ends, offsets, counts, counted, owed, chosen, owes = ahead
        if owed != pending_follow:  # the helper did not know what the block before owes (it was decoded here)
            chosen = None
        prefilter.searched_elsewhere(len(block))
        decoded, shape_map, searched = block, None, (gaps, starts, prefilter.found_at(block, gaps, ends))
        index: LineIndex | None = LineIndex(block, offsets, counts)
    else:
        decoded, shape_map, searched = _searched(block, prefilter, shapes, st.bytes)
        # one pass counts the newlines, shared by the access-line counts and the hits' line numbers
        index = LineIndex(decoded) if searched is not None and decoded is block else None
    if searched is not None:
        gaps, starts, found = searched
        if on_block is not None:
            on_block(number, decoded, gaps, index, shape_map, starts, found, counted)
        yield from _block_lines(decoded, number, prefilter, redact, pending_follow, st, shape_map,
                                blank=is_user_content, starts=starts, index=index, chosen=chosen)
        pending_follow = _follow_after(decoded, prefilter, is_user_content) if owes is None else owes
        return number + (block.count(b"\n") if index is None else index.at(len(block))), pending_follow
    lines_in_block = block.count(b"\n")
    block = decoded
    if on_block is not None:
        on_block(number, block, _gaps(block, user_spans(block)), None, shape_map)
    block = blank_user_content(block)
    block, line_map = unwrap(block) if st.bytes <= PASTE_MAX else (block, None)
    if shape_map is not None:
        line_map = shape_map if line_map is None else [shape_map[i] for i in line_map]
    yield from _block_lines(block, number, prefilter, redact, pending_follow, st, line_map)
    return number + lines_in_block, _follow_after(block, prefilter)


class AheadScan:
    """What _whole_block computes of each block before it yields any line, computed by prescan's helper process
    over the blocks in order: `scan(block)` is (gaps, hit starts, the extras' match ends by hyperscan id, the
    newline counts at each hit and at the end (LineIndex's offsets and counts), prepass(block, gaps, starts), the
    follow lines the block before owed, _chosen's lines given those, the follow lines this block owes the next);
    None where _whole_block does not find the hits in place (a shipper's record or a PRETTY marker: it decodes
    the block itself). Plain values only: they cross a pipe."""

    def __init__(self, prefilter: Prefilter, prepass: Callable[..., Any] | None, owed: int, read: int) -> None:
        self.prefilter, self.prepass = prefilter, prepass
        self.owed = owed  #: follow lines the block before owes this one (-1: unknown, the reader decoded it)
        self.read = read  #: bytes of the input before the next block (the paste-sized start is told apart)

    def __call__(self, block: bytes) -> Any:
        self.read += len(block)
        # (within the paste-sized start, a hard-wrapped block is unwrapped first: _searched)
        plain = None if self.read <= PASTE_MAX and _hard_wrapped(block) else _plain(block, self.prefilter, Decoder())
        if plain is None or plain[2] is None:  # (a fresh decoder: the reader checks its own is idle)
            self.owed = -1
            return None
        gaps, starts, ends, _found = plain
        index = LineIndex(block)
        for start in starts:
            index.at(start)
        index.at(len(block))
        offsets, counts = list(index._offsets), list(index._counts)
        owed_before = self.owed
        chosen = _chosen(block, starts, max(owed_before, 0), is_user_content, index)
        self.owed = _follow_after(block, self.prefilter, is_user_content)
        return (gaps, starts, ends, offsets, counts, self.prepass(block, gaps, starts) if self.prepass else None,
                owed_before, chosen, self.owed)


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
    if read > PASTE_MAX or not (shapes.has_records(block) or _hard_wrapped(block)):
        plain = _plain(block, prefilter, shapes)
        if plain is not None:
            return block, None, (plain[0], plain[1], plain[3])
    decoded, shape_map = shapes.decode_block(block)
    if (read > PASTE_MAX or not _hard_wrapped(decoded)) and not prefilter.plain(len(decoded)):
        gaps = _gaps(decoded, user_spans(decoded))
        return decoded, shape_map, (gaps, prefilter.hit_lines(decoded, gaps), None)
    return decoded, shape_map, None


def _plain(block: bytes, prefilter: Prefilter, shapes: Decoder) -> tuple[
        list[tuple[int, int]] | None, list[int], dict[int, list[int]] | None, dict[BlockPattern, list[re.Match[bytes]]]
        ] | None:
    """(gaps, hit starts, the extras' hyperscan ends or None, the extras' matches) of a block the decoder leaves as
    it is; None for a block with a shipper's records or a PRETTY marker (the decoder rewrites it: the caller
    decodes, then searches)."""
    if prefilter.plain(len(block)) or shapes.has_records(block):
        return None
    spans = user_spans(block)
    gaps = _gaps(block, spans)
    scanned = prefilter.scan_ends(block, gaps)
    if scanned is None:
        (starts, found), ends = prefilter.scan(block, gaps), None
    else:
        (starts, ends), found = scanned, prefilter.found_at(block, gaps, scanned[1])
    if found[PRETTY] or (spans and PRETTY.search(block)):  # the search skipped the request-logger lines
        return None
    return gaps, starts, ends, found


#: Request-logger lines echo prompts (often huge, often full of words like "error"): never evidence. (Each
#: starts with "]": user_spans walks them.)
USER_CONTENT_MARKERS = (b"] Received request ", b"] Generated response ", b"] Request details ")
#: uvicorn's access lines record one HTTP request each: never evidence, and most of a quiet serving log.
ACCESS = re.compile(rb' HTTP/[12](?:\.[01])?" \d{3}\b')
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


def _gaps(block: bytes, spans: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
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


#: What a wrapped piece may not start with: a prefix of its own means a new record, not a piece.
_OWN_PREFIX = re.compile(
    rb"(?:\x1b\[[\d;]*m)?(?:\([^)\n]{0,80}pid=\d+|\[rank\d+\]:|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d "
    rb"|\d{4}-\d\d-\d\d[T ]\d\d:|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d|Traceback \(most recent|  File \")")
_QUOTE = re.compile(rb"(?:>[ \t]?)+")
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
    # several lines cut at the same, widest column, most of them continued by a piece without a prefix
    if len(at_top) < 2 or len(at_top) * 7 < len(long_ones) or sum(at_top) * 2 < len(at_top):
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


def _width(block: bytes, start: int, blank: Callable[[bytes, int], bool] | None = None) -> int:
    """Length in bytes of the line starting at `start` (without its line end); 0 for a `blank` line."""
    if blank is not None and blank(block, start):
        return 0
    end = block.find(b"\n", start)
    end = len(block) if end == -1 else end
    if end > start and block[end - 1:end] == b"\r":
        end -= 1
    return end - start


def _follow_after(block: bytes, prefilter: Prefilter, blank: Callable[[bytes, int], bool] | None = None) -> int:
    """Follow lines still owed to the next block (a keyword line among the last FOLLOW of this one)."""
    # the last FOLLOW lines ending in a newline within the block's last MAX_LINE/4 bytes (the first of them cut
    # there when it is longer), found from the end rather than by splitting those bytes
    lo = max(0, len(block) - MAX_LINE // 4)
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


def _memo(blank: Callable[[bytes, int], bool]) -> Callable[[bytes, int], bool]:
    """`blank` remembered per offset, for one block."""
    seen: dict[int, bool] = {}

    def at(block: bytes, start: int) -> bool:
        known = seen.get(start)
        if known is None:
            known = seen[start] = blank(block, start)
        return known

    return at


def _block_lines(block: bytes, first_number: int, prefilter: Prefilter | None, redact: Redactor | None,
                 pending_follow: int, st: ReadStats, line_map: list[int] | None = None,
                 blank: Callable[[bytes, int], bool] | None = None,
                 starts: list[int] | None = None, index: LineIndex | None = None,
                 chosen: tuple[list[int], list[bool], list[int]] | None = None) -> Iterator[Line]:
    """The lines worth looking at in one block of whole lines (`line_map`: physical line of each, unwrap()).

    `blank` says which lines count as empty (is_user_content on a block that was not blanked beforehand).
    `chosen`: _chosen's answer for this block, when the reader's helper process gave it.
    """
    if prefilter is None:
        for i, raw in enumerate(block.split(b"\n")[:-1]):
            st.decoded_lines += 1
            yield from _physical_to_lines(first_number + (line_map[i] if line_map else i) + 1, raw, redact, False)
        return
    if starts is None:
        starts = prefilter.hit_lines(block)
    from diagnoser.ingest.dense import physical_lines

    offsets, follows, before = _chosen(block, starts, pending_follow, blank, index) if chosen is None else chosen
    find = block.find
    for off, follow, k in zip(offsets, follows, before, strict=True):
        st.decoded_lines += 1
        number = first_number + (line_map[k] if line_map else k)
        yield from physical_lines(number + 1, block[off:find(b"\n", off)], redact, follow)  # a shape decides once


def _chosen(block: bytes, starts: list[int], pending_follow: int, blank: Callable[[bytes, int], bool] | None,
            index: LineIndex | None) -> tuple[list[int], list[bool], list[int]]:
    """Which lines of a block _block_lines yields, in order: their offsets, whether each is only a follow line,
    and the block's lines before each. A function of the block alone (and the follow lines the block before
    owed): the reader's helper process computes it ahead. `index` (a block the decoder left as it is): a
    keyword-dense block is every line (shaped.is_dense), without a follow line to look for."""
    from diagnoser.ingest.dense import is_dense

    if index is not None and is_dense(block, starts, index):
        return starts, [False] * len(starts), list(range(len(starts)))
    if blank is not None:
        blank = _memo(blank)  # a follow line's test is asked again when it is chosen
        starts = [s for s in starts if not blank(block, s)]
    # the first lines of the block may still be owed as follow lines of the previous block
    pos = 0
    # offset -> whether it is only a follow line (a keyword line wins over a follow flag for the same line)
    best: dict[int, bool] = {}
    lead = pending_follow
    while lead > 0 and pos < len(block):
        best[pos] = True
        pos = block.find(b"\n", pos) + 1
        lead -= 1
    end_of_block = len(block)
    for s in starts:
        best[s] = False
        if s > 0 and not RECORD_START.match(block, s, s + 160):
            # a line without a header may be the second piece of a wrapped message: keep the piece before it
            prev = block.rfind(b"\n", 0, s - 1) + 1
            if _width(block, prev, blank) >= WRAP_MIN_WIDTH:
                best.setdefault(prev, True)
        # past FOLLOW lines, only the pieces of a hard-wrapped message: each as wide as the keyword line, which
        # is at least WRAP_MIN_WIDTH (so the widths are measured only from the FOLLOW-th line on, if at all)
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
    offsets = [off for off in sorted(best) if blank is None or not blank(block, off)]
    if index is not None:
        before = [index.at(off) for off in offsets]
    else:  # a blanked or decoded block (no index): counted as it goes
        before, k, last = [], 0, 0
        for off in offsets:
            k += block.count(b"\n", last, off)
            before.append(k)
            last = off
    return offsets, [best[off] for off in offsets], before
