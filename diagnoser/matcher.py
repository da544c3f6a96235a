"""Match: rules against clean lines -> hits with typed facts.

Three steps per line, cheapest first: a literal keyword test (the prefilter already dropped most lines),
a rapidfuzz partial match of the rule's phrase against a window (the line plus the lines a terminal or a
chat window wrapped it onto), then the extract regexes on that window (with a whitespace-tolerant retry,
so a number split by a wrap still reads whole). A hit remembers the line's stage so that generic phrases
("CUDA out of memory") count only where their rule says they mean something.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from . import advice_functions, memory
from .reader import FOLLOW, WRAP_MAX, WRAP_MIN_WIDTH, Line
from .rules import Pattern, Rule, template_env
from .stages import coarse
from .tracker import FRAME, TRACEBACK_START, is_exception_line, to_number

WINDOW_CHARS = 4000


@dataclass
class Hit:
    """One rule recognised at one place in the log."""

    rule: Rule
    pattern: Pattern
    line: Line
    end_line: int
    stage: str | None
    fine_stage: str | None
    facts: dict[str, Any]
    evidence: list[Line] = field(default_factory=list)


def type_fact(kind: str | None, raw: str) -> Any:
    """Typed value of one captured group; None when it does not parse (the fact is then absent)."""
    raw = raw.strip()
    if kind == "str":
        return re.sub(r"\s+", " ", raw)
    if kind == "list":
        return [p.strip(" '\"") for p in re.split(r"[,\s]+", raw) if p.strip(" '\"")]
    if kind in ("size",):
        return memory.log_size_gib(raw)
    if kind == "bytes":
        n = to_number(raw.replace(" ", ""))
        return None if n is None else n / memory.GIB
    n = to_number(re.sub(r"\s+", "", raw))
    if n is None:
        return None if kind in ("int", "float", "gib") else re.sub(r"\s+", " ", raw)
    if kind == "int":
        return int(n)
    if kind in ("float", "gib"):
        return float(n)
    return n


#: compiled expressions by source, shared by every Evaluator: a scan of many logs compiles each once
_EXPRESSIONS: dict[str, Any] = {}


class Evaluator:
    """Compiled jinja2 expressions (when:, derive:), evaluated leniently: a missing fact means no value."""

    def __init__(self) -> None:
        self.env = template_env()
        self._cache = _EXPRESSIONS

    def value(self, source: str, names: dict[str, Any]) -> Any:
        expr = self._cache.get(source)
        if expr is None:
            expr = self._cache[source] = self.env.compile_expression(source, undefined_to_none=False)
        try:
            result = expr(**names)
        except Exception:  # noqa: BLE001 - an expression over missing or odd facts simply has no value
            return None
        if hasattr(result, "_undefined_name"):
            return None
        if isinstance(result, float) and not math.isfinite(result):
            return None
        return result

    def truth(self, source: str, names: dict[str, Any]) -> bool:
        return bool(self.value(source, names))


def template_names(facts: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """What templates and expressions see: facts by name, plus ctx and the arithmetic module."""
    return {**facts, "facts": facts, "ctx": ctx, "mem": memory, "fn": advice_functions}


def derive_facts(rule: Rule, facts: dict[str, Any], ctx: dict[str, Any], ev: Evaluator,
                 stage: str | None = None) -> dict[str, Any]:
    """Add the rule's derived facts, in order; each sees the ones before it (and the stage of the failure)."""
    out = dict(facts)
    for name, source in rule.derive.items():
        value = ev.value(source, {**template_names(out, ctx), "stage": stage})
        if value is not None or name not in out:
            out[name] = value  # None: known to be unknown, so templates can test it without failing
    return out


class Matcher:
    """Consumes (line, stage) pairs in order and collects hits; lines wait WRAP_MAX lines for their window."""

    def __init__(self, rules: list[Rule] | tuple[Rule, ...], ctx_source: Any = None) -> None:
        self.rules = list(rules)
        self.entries: list[tuple[Rule, Pattern, tuple[str, ...]]] = [
            (rule, p, tuple(k.lower() for k in p.keywords)) for rule in self.rules for p in rule.patterns
        ]
        self.hits: list[Hit] = []
        self.ev = Evaluator()
        self._pending: deque[tuple[Line, str | None]] = deque()
        self._ctx_source = ctx_source  # an object with .as_dict() (the tracker's Context)

    def feed(self, line: Line, fine_stage: str | None) -> None:
        self._pending.append((line, fine_stage))
        if len(self._pending) > WRAP_MAX:
            self._match_first()

    def finish(self) -> list[Hit]:
        while self._pending:
            self._match_first()
        return self.hits

    @property
    def held(self) -> int:
        """Lines waiting for their window (live mode matches them with finish() once the input is idle)."""
        return len(self._pending)

    # -- internals -----------------------------------------------------------------------------------

    def _window(self) -> list[Line]:
        """The first pending line and the lines that continue its message (a wrapped paste).

        Up to FOLLOW lines continue a message; more only while each piece has the width of the first (a
        hard wrap cuts every line of a message at the same column).
        """
        first = self._pending[0][0]
        lines = [first]
        for nxt, _ in itertools.islice(self._pending, 1, None):
            prev = lines[-1]
            if not _continues(first, prev, nxt):
                break
            if len(lines) > FOLLOW and not _full_piece(prev, first):
                break
            lines.append(nxt)
        return lines

    def _match_first(self) -> None:
        line, fine = self._pending[0]
        try:
            if line.user_content or not line.text:
                return
            low = line.text.lower()
            candidates = [(r, p, kws) for r, p, kws in self.entries if any(k in low for k in kws)]
            window: list[Line] | None = None
            if not candidates:
                # a keyword may be cut in two by a wrap, or sit on the next piece of the message
                if len(self._pending) < 2 or not _continues(line, line, self._pending[1][0]):
                    return
                window = self._window()
                texts = joined_texts(window)
                lows = [t.lower() for t in texts]
                pieces = [w.text.lower() for w in window[1:]]
                # only a keyword cut in two by the wrap: one whole on a later line starts that line's window
                candidates = [(r, p, kws) for r, p, kws in self.entries
                              if any(k in lw and not any(k in pc for pc in pieces) for lw in lows for k in kws)]
                if not candidates:
                    return
            if window is None:
                window = self._window()
                texts = joined_texts(window) if len(window) > 1 else (line.text,)
                lows = [t.lower() for t in texts] if len(window) > 1 else [low]
            processed: list[str] | None = None
            stage = coarse(fine)
            ctx = self._ctx_source.as_dict() if self._ctx_source is not None else {}
            found: dict[str, Hit] = {}  # one hit per rule per line: the most specific pattern wins
            for rule, pattern, kws in candidates:
                if pattern.stages is not None and stage not in pattern.stages:
                    continue
                facts: dict[str, Any] = {}
                if pattern.regex is not None:
                    m = _on_line(pattern.regex, rule, line.text) if len(window) > 1 else None
                    m = m or _search(pattern.regex, texts, None)
                    if m is None and len(window) > 1:
                        m = _search(_tolerant_of(pattern.regex), texts[:1], None)
                    if not m:
                        continue
                    facts.update(self._typed(rule, m.groupdict()))
                else:
                    if processed is None:
                        processed = [default_process(_focus(t, lw, kws, len(pattern.phrase or "")))
                                     for t, lw in zip(texts, lows, strict=True)]
                    if not any(phrase_score(pattern.phrase or "", pr, pattern.threshold) for pr in processed):
                        continue
                extracted = self._extract(rule, texts, line.text if len(window) > 1 else None)
                facts.update({k: v for k, v in extracted.items() if k not in facts})
                if pattern.when_early and not self.ev.truth(
                        pattern.when, {**template_names(facts, ctx), "level": line.level}):
                    continue  # e.g. a stats line below the saturation threshold: no need to derive anything
                names = derive_facts(rule, facts, ctx, self.ev, stage)
                scope = {**template_names(names, ctx), "level": line.level}
                if pattern.when and not pattern.when_early and not self.ev.truth(pattern.when, scope):
                    continue
                if rule.when and not self.ev.truth(rule.when, scope):
                    continue
                hit = Hit(rule=rule, pattern=pattern, line=line, end_line=window[-1].number, stage=stage,
                          fine_stage=fine, facts=facts, evidence=window)
                best = found.get(rule.id)
                if best is None or (best.pattern.generic, -len(best.facts)) > (pattern.generic, -len(facts)):
                    found[rule.id] = hit
            self.hits.extend(found.values())
        finally:
            self._pending.popleft()

    def _extract(self, rule: Rule, texts: tuple[str, ...] | list[str] | str,
                 first_line: str | None = None) -> dict[str, Any]:
        """Facts from the extract regexes: on the first line alone when it holds them whole, else on the
        joined window (a number cut by a wrap), else allowing whitespace inserted anywhere."""
        if isinstance(texts, str):
            texts = (texts,)
        facts: dict[str, Any] = {}
        for ex in rule.extractors:
            m = _on_line(ex.pattern, rule, first_line) if first_line is not None else None
            if m is None:
                m = _search(ex.pattern, texts, None)
            if m is None and len(texts[0]) < WINDOW_CHARS:
                m = ex.tolerant.search(texts[0])
            if m is None:
                continue
            for name, value in self._typed(rule, m.groupdict()).items():
                facts.setdefault(name, value)
        return facts

    @staticmethod
    def _typed(rule: Rule, groups: dict[str, str | None]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, raw in groups.items():
            if raw is None:
                continue
            value = type_fact(rule.facts.get(name), raw)
            if value is not None and value != "":
                out[name] = value
        return out


def _continues(first: Line, prev: Line, nxt: Line) -> bool:
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


def _full_piece(prev: Line, first: Line) -> bool:
    """`prev` was cut at the same column as the first piece: the message goes on."""
    width = len(first.raw.rstrip("\r\n"))
    return width >= WRAP_MIN_WIDTH and len(prev.raw.rstrip("\r\n")) == width


#: The start of a vLLM header that the prefix stripper did not take (the line was cut inside it).
_HEADER_START = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:")
_DIGIT_JOIN = re.compile(r"(?:\d|\d\.)$")


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


NUMERIC = ("int", "float", "gib", "size", "bytes")


def _on_line(pattern: Any, rule: Rule, text: str) -> Any:
    """A match on the first line of a window, unless a number it captured runs into the line's end (the
    number may go on in the next piece: the joined window decides). Text captures stop at the line's end,
    so that the next, unrelated line (a shell prompt, chatter) never becomes part of them."""
    m = pattern.search(text)
    if m is None:
        return None
    end = len(text.rstrip())
    for name, value in m.groupdict().items():
        if value is None or m.end(name) < end:
            continue
        kind = rule.facts.get(name)
        if kind in NUMERIC or (kind is None and re.fullmatch(r"[\d.,]+", value)):
            return None
    return m


def _search(pattern: Any, texts: tuple[str, ...] | list[str], default: Any) -> Any:
    for text in texts:
        m = pattern.search(text)
        if m is not None:
            return m
    return default


_TOLERANT: dict[str, Any] = {}


def _tolerant_of(pattern: Any) -> Any:
    """A match regex that also allows whitespace inserted by a wrap (compiled once per pattern)."""
    found = _TOLERANT.get(pattern.pattern)
    if found is None:
        import regex

        found = _TOLERANT[pattern.pattern] = regex.compile(
            f"(?:{pattern.pattern}){{i<=6:\\s}}", regex.BESTMATCH | regex.V0 | (pattern.flags & regex.IGNORECASE))
    return found


def _content_words(text: str) -> list[str]:
    return [w for w in text.split() if len(w) >= 4]


def phrase_score(phrase: str, processed: str, threshold: float) -> float:
    """How well a (default_process'ed) window carries a phrase, 0 below the threshold.

    partial_ratio tolerates small edits and re-punctuation; word coverage tolerates a dropped or added
    clause (releases reword messages that way) without accepting a different message that shares a few
    words, because it needs nearly all of the phrase's content words.
    """
    target = default_process(phrase)
    score = fuzz.partial_ratio(target, processed, score_cutoff=threshold)
    if score:
        return score
    words = _content_words(target)
    if len(words) < 5:
        return 0.0
    have = set(processed.split())
    coverage = 100.0 * sum(w in have for w in words) / len(words)
    return coverage if coverage >= threshold else 0.0


def _focus(text: str, low: str, keywords: tuple[str, ...], phrase_len: int) -> str:
    """For a very long line (a flattened paste), only the text around the keyword is scored."""
    span = max(4 * phrase_len, 400)
    if len(text) <= 2 * span:
        return text
    positions = [low.find(k) for k in keywords if low.find(k) >= 0]
    if not positions:
        return text[: 2 * span]
    pos = min(positions)
    return text[max(0, pos - span): pos + span]
