r"""Keyword-dense logs at speed: a line's *shape* (its bytes with every digit read as 0) decides once.

A log where every line carries a keyword (a stats line every interval, a V0 preemption storm) went line by
line through the slow path (decode, clean, redact, split, strip prefixes, then the tracker's and the matcher's
keyword tests and regexes) at 200-400 us a line. Such lines repeat a few shapes whose only variable parts are
numbers, and what that path decides for a line that starts with vLLM's header depends on where its digits are,
not on their values: the cleaning, splitting and prefix regexes use digit classes (`\d`, `[0-9]{1,3}`; the
one literal digit, RFC 5424's version, can only start a line), the secret hints and the keywords without a
digit occur at the same places in every line of a shape, and an access line's status (`HTTP/[12]`) is never
asked (a block with ` HTTP/` goes the general way). So:

- the reader (`physical_lines`; `is_dense` lets selection._chosen take every line of a block of keyword lines): the
  first line of each shape only goes the slow way; when that gave exactly the Line built from one header match
  (nothing redacted, nothing split), the shape is marked good and its other lines are built directly;
- `ShapeCache`: which keywords a shape holds (the tracker's landmarks, the matcher's rules), those with a
  digit tested on the lines where the shape allows them;
- `ShapePlans`: where a stats line's numbers are (series, tracker), sliced out of each line;
- `shape_safe`: which rule regexes find the same spans in every line of a shape (the matcher then finds them
  once per shape; a regex that reads a digit's value, `[1-9]`, `700`, is searched on every line).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from diagnoser.ingest.clean import physical_to_lines
from diagnoser.ingest.keywords import LONG_TEXT, lowered
from diagnoser.ingest.line import RANK_IN_PROC, Line
from diagnoser.ingest.redact import Redactor
from diagnoser.ingest.redact_hints import maybe_secret
from diagnoser.ingest.request_lines import USER_CONTENT_MARKERS
from diagnoser.lazyre import lazy

if TYPE_CHECKING:
    from diagnoser.ingest.selection import LineIndex

#: shapes remembered at most (a log of endlessly new shapes only pays one dict lookup a line)
MAX_SHAPES = 4096
ZEROS = bytes.maketrans(b"123456789", b"000000000")

#: A whole line: maybe a coloured process tag (`ESC[1;36m(APIServer pid=1)ESC[0;0m `, the reader's "proc"
#: prefix in its plainest form), vLLM's header (the reader's "vllm" prefix, with a source) and a message of
#: printable ASCII that starts with a letter (so no other prefix of the reader can follow the header).
PLAIN = lazy(
    rb"(?:(\x1b\[[0-9;]*m)?\(([A-Za-z_]\w*(?:[ _][\w=]+)*?) pid=([0-9]+)\)(\x1b\[[0-9;]*m)? ?)?"
    rb"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? "
    rb"(?:\[([^\]\s]+:\d+)\]|([\w./-]+:\d+)\])[ \t]?[A-Za-z][ -~]*")

_verdicts: dict[bytes, Any] = {}  #: a shape's PLAIN spans when its lines take the fast path, else False


def remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    """`cache[key] = value` in a memo of at most MAX_SHAPES entries, emptied when full: a log of endlessly new
    shapes pays a lookup a line, never unbounded memory. Returns `value`."""
    if len(cache) >= MAX_SHAPES:
        cache.clear()
    cache[key] = value
    return value


def shape_key(text: str) -> bytes:
    """A text with every digit read as 0: texts of one key differ only in their digits' values.

    >>> shape_key("Running: 12 reqs, 3.5%") == shape_key("Running: 47 reqs, 9.1%")
    True
    """
    global _last
    last = _last  # one read: another thread (a scan's) may replace it
    if text is last[0]:  # the tracker, the series and the matcher ask about the same line in turn
        return last[1]
    key = text.encode("utf-8", "surrogatepass").translate(ZEROS)
    _last = (text, key)
    return key


_last: tuple[str | None, bytes] = (None, b"")


def is_dense(block: bytes, starts: list[int], index: LineIndex) -> bool:
    """Whether every line of the block is a keyword line of its own: none is a request-logger or access line (no
    marker, no ` HTTP/` in the block), so selection._chosen selects each line once, none as a follow line, without
    looking for any. The first and the last hit are tested before the block's lines are counted (`index`)."""
    if not starts or starts[0] != 0 or block.find(b"\n", starts[-1]) != len(block) - 1:
        return False
    return len(starts) == index.at(len(block)) and block.find(b" HTTP/") == -1 and not any(
        block.find(m) != -1 for m in USER_CONTENT_MARKERS)


def physical_lines(number: int, raw: bytes, redact: Callable[[str], str] | None, follow: bool
                   ) -> Iterable[Line]:
    """clean.physical_to_lines of one line, built straight from its header match when its shape was found
    good (the first line of each shape goes the slow way and says whether the fast Line is the same; see
    the module's docstring). A follow line, or one after a redactor's carry, goes the slow way."""
    fresh = not follow and (redact is None or (isinstance(redact, Redactor) and redact._carry is None))
    key = raw.translate(ZEROS)
    spans = _verdicts.get(key)
    if spans and fresh:
        return (_fast_line(number, raw, spans),)
    slow = list(physical_to_lines(number, raw, redact, follow))
    if spans is None and fresh:
        remember(_verdicts, key, _fast_spans(raw, number, slow))
    return slow


Spans = tuple[tuple[int, int], ...]  #: a PLAIN match's group spans (Match.regs)


def _fast_line(number: int, raw: bytes, spans: Spans) -> Line:
    """The Line parse_line makes of a PLAIN line whose match has these group spans (the same in every line of
    its shape: PLAIN tells no digit from another): the tag's process and pid, the header's fields, the message
    after it, right-stripped (`raw` without the tag's two colour escapes, as clean_text leaves it)."""
    (a7, b7), (a8, b8) = spans[7], spans[8]
    source = raw[a7:b7] if a7 != -1 else raw[a8:b8]
    start = (b7 if a7 != -1 else b8) + 1  # past the source's "]"
    if raw[start:start + 1] in (b" ", b"\t"):
        start += 1
    level, timestamp = raw[slice(*spans[5])].decode(), raw[slice(*spans[6])].decode()
    if spans[2][0] == -1:
        text = raw.decode("ascii")
        return Line(number=number, text=text[start:].rstrip(), raw=text, level=level, timestamp=timestamp,
                    source=source.decode())
    process, pid = raw[slice(*spans[2])].decode(), int(raw[slice(*spans[3])])
    for group in (4, 1):  # the tag's colour escapes go (the right one first: the left one's span holds)
        a, b = spans[group]
        if a != -1:
            raw = raw[:a] + raw[b:]
            start -= b - a
    text = raw.decode("ascii")
    rank = RANK_IN_PROC.search(process)
    return Line(number=number, text=text[start:].rstrip(), raw=text, process=process, pid=pid,
                rank=int(rank.group(1)) if rank else None, level=level, timestamp=timestamp, source=source.decode())


def _fast_spans(raw: bytes, number: int, slow: list[Line]) -> Spans | bool:
    """This shape's PLAIN spans when its slow result is the fast Line (one line, the header's fields, nothing
    redacted), else False."""
    m = PLAIN.fullmatch(raw)
    if m is None or len(slow) != 1 or len(raw) >= LONG_TEXT:
        return False
    fast = _fast_line(number, raw, m.regs)
    if maybe_secret(fast.raw.lower()):  # the redactor would look (hints hold no digit: one answer a shape)
        return False
    return m.regs if fast == slow[0] else False


class ShapeCache:
    """`index.matches(low)` for a text, cached by shape: keywords without digits are found once per shape."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self._digits = [w for w in index.words if any(c.isdigit() for c in w)]
        self._digit_set = set(self._digits)
        self._cache: dict[bytes, tuple[list[str], list[str], list[int]]] = {}

    def matches(self, text: str, low: str | None = None, key: bytes | None = None) -> list[int]:
        if len(text) >= LONG_TEXT:
            # a long text (a piece of an enormous line) never repeats its shape: its key would cost a pass
            # and pin a megabyte in the cache for nothing (nor is it lower-cased for this: present_in)
            return self.index.matches_in(text)
        key = shape_key(text) if key is None else key
        cached = self._cache.get(key)
        if cached is None:
            low = lowered(text) if low is None else low
            present = self.index.present(low)
            # a keyword with digits can only be where the shape has its shape: tested on each line, if at all
            low_key = shape_key(low)
            words = [w for w in present if w not in self._digit_set]
            cached = remember(self._cache, key, (words, [w for w in self._digits if shape_key(w) in low_key],
                                                 self.index.owners(words) if words else []))
        words, maybe, owners = cached
        if not maybe:
            return owners  # (the text is lower-cased only for a new shape, or one whose keywords have digits)
        low = lowered(text) if low is None else low
        found = [*words, *(w for w in maybe if w in low)]
        return self.index.owners(found) if found else []


class ShapePlans:
    """`plan(text)` cached by the text's shape, for a `plan` whose answer is positions found by regexes that
    only use digit classes (`\\d`, `[\\d.]+`): the same in every text of one shape. Callers slice the values."""

    def __init__(self, plan: Callable[[str], Any]) -> None:
        self.plan = plan
        self._cache: dict[bytes, Any] = {}

    def __call__(self, text: str) -> Any:
        if len(text) >= LONG_TEXT:  # never repeats its shape (see ShapeCache.matches)
            return self.plan(text)
        key = shape_key(text)
        found = self._cache.get(key)
        if found is None:
            found = remember(self._cache, key, self.plan(text))
        return found


_QUANTIFIER = lazy(r"(?<!\\)\{\d*(?:,\d*)?\}")


def shape_safe(source: str) -> bool:
    """Whether a regex finds the same spans in every text of one shape: no digit outside its `{m,n}`
    quantifiers (a literal `700`, a `[1-9]` class, a `\\1` backreference, a `\\x31` escape or a fuzzy
    constraint reads digits' values), no named backreference, no `\\N{...}` character.

    >>> shape_safe(r'total_num_cumulative_preemption=(?P<n>\\d+)'), shape_safe(r'Preemptions: ([1-9]\\d*)')
    (True, False)
    """
    bare = _QUANTIFIER.sub("", source)
    return not any(c.isdigit() for c in bare) and not any(s in bare for s in ("(?P=", "\\g", "\\N"))


def digit_free(*texts: str) -> bool:
    return not any(c.isdigit() for t in texts for c in t)
