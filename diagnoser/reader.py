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

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

BLOCK = 1 << 20          #: bytes read at a time
MAX_LINE = 1 << 20       #: a longer line is handled in pieces of this size (same line number)
FOLLOW = 3               #: lines kept after a keyword line, for wrapped messages

ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"            # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"                       # two-byte escapes
    r"|\^\[\[[0-?]*[ -/]*[@-~]"             # caret form left by copy-paste
    r"|(?<![\w\]\[])\[[0-9]{1,3}(?:;[0-9]{1,3})*m"  # ESC lost in transit, '[1;36m' left
)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
PROC = r"\((?P<proc>[A-Za-z_][\w]*(?:[ _][\w=]+)*?)\s+pid=(?P<pid>\d+)(?:,\s*ip=[^)\s]*)?\)"

#: Prefixes stripped from the start of a line, repeatedly, in any order.
PREFIXES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("quote", re.compile(r"^(?:>[ \t]?)+")),
    ("iso", re.compile(
        r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*(?:\|\s*)?")),
    ("syslog", re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w.@/-]+(?:\[\d+\])?: ")),
    ("cri", re.compile(r"^(?:stdout|stderr) [FP] ")),
    ("compose", re.compile(r"^[a-z0-9][\w.-]*-\d+\s+\| ")),
    ("pipe", re.compile(rf"^(?:(?:{LEVELS})\s*\|\s*)?(?:stdout|stderr)\s*\|\s*")),
    ("proc", re.compile("^" + PROC + r"\s?")),
    ("rank", re.compile(r"^\[rank(?P<rank>\d+)\]:\s?")),
    ("vllm", re.compile(
        rf"^(?P<level>{LEVELS}) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? "
        r"(?:\[(?P<src>[^\]\s]+:\d+)\]|(?P<src_old>[\w./-]+:\d+)\])[ \t]?")),
    ("uvicorn", re.compile(rf"^(?P<level>{LEVELS}):\s+")),
)

#: Where a flattened log restarts a record: a process tag or a vLLM header not at the line start.
RESTART = re.compile(
    r"(?<=\S)(?:(?=" + PROC.replace("?P<proc>", "?:").replace("?P<pid>", "?:") + ")"
    + rf"|(?<!\))(?=\s?(?:{LEVELS}) \d\d-\d\d \d\d:\d\d:\d\d [\[\w]))"
)
RANK_IN_PROC = re.compile(r"(?:rank=|TP|rank)(\d+)")

#: Lines that echo user content (prompts) must never be taken for vLLM's own messages.
USER_CONTENT = re.compile(
    r"^(?:Received request|Added request|Finished request|Aborted request|Request \S+ (?:details|params))"
    r"|\bprompt: '|\bprompt_token_ids: \[|\"(?:GET|POST|PUT|DELETE) /"
)


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
    redactions: dict[str, int] = field(default_factory=dict)


Redactor = Callable[[str], str]


def clean_text(text: str) -> str:
    """Strip ANSI escapes and control characters from one physical line (no newlines inside)."""
    if "\x1b" in text or "[" in text:
        text = ANSI.sub("", text)
    return CONTROL.sub("", text)


def split_flattened(text: str) -> list[str]:
    """A log pasted onto one line restarts a record at each embedded prefix: split there."""
    if len(text) < 60:
        return [text]
    cuts = [m.start() for m in RESTART.finditer(text, 1)]
    if not cuts:
        return [text]
    parts, start = [], 0
    for cut in cuts:
        if cut > start:
            parts.append(text[start:cut].strip())
            start = cut
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def parse_line(number: int, text: str, follow: bool = False) -> Line:
    """Strip and record the prefixes of one clean line."""
    line = Line(number=number, text=text, raw=text, follow=follow)
    rest = text
    changed = True
    guard = 0
    while changed and rest and guard < 8:
        changed = False
        guard += 1
        for name, pattern in PREFIXES:
            m = pattern.match(rest)
            if not m or m.end() == 0:
                continue
            groups = m.groupdict()
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
            changed = True
            break
    line.text = rest.rstrip()
    line.user_content = bool(USER_CONTENT.search(line.text))
    return line


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _physical_to_lines(number: int, raw: bytes, redact: Redactor | None, follow: bool) -> Iterator[Line]:
    """One physical line (CRLF/`\\r` frames included) -> cleaned, parsed Lines."""
    text = _decode(raw)
    frames = text.split("\r") if "\r" in text else [text]
    for frame in frames:
        if not frame.strip():
            continue
        cleaned = clean_text(frame)
        if redact is not None:
            cleaned = redact(cleaned)
        for part in split_flattened(cleaned):
            yield parse_line(number, part, follow)


class Prefilter:
    """Literal keywords (lower-case bytes): a line is looked at only if it holds one of them."""

    def __init__(self, keywords: Iterable[str]) -> None:
        words = {k.lower().encode() for k in keywords if k and k.strip()}
        # a keyword that contains another is redundant: the shorter one finds the line already
        self.keywords = sorted(w for w in words if not any(o != w and o in w for o in words))

    def hit_lines(self, block: bytes) -> list[int]:
        """Start offsets of the lines in `block` that hold a keyword, sorted and unique."""
        low = block.lower()
        starts: set[int] = set()
        for kw in self.keywords:
            find = low.find
            i = find(kw)
            while i != -1:
                start = low.rfind(b"\n", 0, i) + 1
                starts.add(start)
                end = low.find(b"\n", i)
                if end == -1:
                    break
                i = find(kw, end)
        return sorted(starts)


def read_lines(stream: BinaryIO, prefilter: Prefilter | None = None, redact: Redactor | None = None,
               stats: ReadStats | None = None) -> Iterator[Line]:
    """Yield the cleaned lines of a binary stream worth looking at, in order, in constant memory.

    With no prefilter every line is yielded (small pasted fragments); with one, only keyword lines and
    the FOLLOW lines after each.
    """
    st = stats if stats is not None else ReadStats()
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
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut == -1:
            if len(data) < MAX_LINE:
                carry = data
                continue
            # an enormous line: handle it in pieces, all carrying the same line number
            for line in _physical_to_lines(number + 1, data, redact, False):
                st.decoded_lines += 1
                yield line
            carry = b""
            continue
        block, carry = data[: cut + 1], data[cut + 1 :]
        yield from _block_lines(block, number, prefilter, redact, pending_follow, st)
        if prefilter is not None:
            pending_follow = _follow_after(block, prefilter)
        number += block.count(b"\n")
    if carry:  # a last line without a newline (a truncated log)
        yield from _block_lines(carry + b"\n", number, prefilter, redact, pending_follow, st)
        number += 1
    st.lines = number


def _follow_after(block: bytes, prefilter: Prefilter) -> int:
    """Follow lines still owed to the next block (a keyword line among the last FOLLOW of this one)."""
    tail_lines = block[-(MAX_LINE // 4):].split(b"\n")[:-1][-FOLLOW:]
    owed = 0
    for i, raw in enumerate(tail_lines):
        low = raw.lower()
        if any(kw in low for kw in prefilter.keywords):
            owed = FOLLOW - (len(tail_lines) - 1 - i)
    return max(owed, 0)


def _block_lines(block: bytes, first_number: int, prefilter: Prefilter | None, redact: Redactor | None,
                 pending_follow: int, st: ReadStats) -> Iterator[Line]:
    """The lines worth looking at in one block of whole lines."""
    if prefilter is None:
        for i, raw in enumerate(block.split(b"\n")[:-1]):
            st.decoded_lines += 1
            yield from _physical_to_lines(first_number + i + 1, raw, redact, False)
        return
    starts = prefilter.hit_lines(block)
    # the first lines of the block may still be owed as follow lines of the previous block
    pos, number, emitted_upto = 0, first_number, -1
    selected: list[tuple[int, bool]] = []
    lead = pending_follow
    while lead > 0 and pos < len(block):
        selected.append((pos, True))
        pos = block.find(b"\n", pos) + 1
        lead -= 1
    for s in starts:
        selected.append((s, False))
        p = s
        for _ in range(FOLLOW):
            p = block.find(b"\n", p) + 1
            if p <= 0 or p >= len(block):
                break
            selected.append((p, True))
    # keyword lines win over follow flags; sort by offset and de-duplicate
    best: dict[int, bool] = {}
    for off, follow in selected:
        best[off] = best.get(off, True) and follow
    last_off = 0
    for off in sorted(best):
        if off <= emitted_upto:
            continue
        number += block.count(b"\n", last_off, off)
        last_off = off
        end = block.find(b"\n", off)
        raw = block[off:end]
        emitted_upto = off
        st.decoded_lines += 1
        yield from _physical_to_lines(number + 1, raw, redact, best[off])
