"""Match: rules against clean lines -> hits with typed facts.

Three steps per line, cheapest first: a literal keyword test (the prefilter already dropped most lines),
a rapidfuzz partial match of the rule's phrase against a window (the line plus the lines a terminal or a
chat window wrapped it onto), then the extract regexes on that window (with a whitespace-tolerant retry,
so a number split by a wrap still reads whole). A hit remembers the line's stage so that generic phrases
("CUDA out of memory") count only where their rule says they mean something.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from .reader import FOLLOW, Line
from .rules import Pattern, Rule, template_env
from .stages import coarse
from .tracker import FRAME, TRACEBACK_START, is_exception_line, to_number

GIB = float(1 << 30)
UNIT_TO_GIB = {"b": 1 / GIB, "bytes": 1 / GIB, "kib": 1 / (1 << 20), "kb": 1 / (1 << 20), "mib": 1 / 1024,
               "mb": 1 / 1024, "gib": 1.0, "gb": 1.0, "tib": 1024.0, "tb": 1024.0}
SIZE = re.compile(r"(-?[\d.,\s]+)\s*([KMGT]?i?B|bytes)?", re.IGNORECASE)
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
    score: float = 100.0


def parse_size_gib(text: str) -> float | None:
    """'896.00 MiB' -> 0.875; '16.00 GiB' -> 16.0; '12345678 bytes' -> GiB; GB as vLLM prints it = GiB."""
    m = SIZE.fullmatch(text.strip())
    if not m:
        return None
    number = to_number(m.group(1))
    if number is None:
        return None
    unit = (m.group(2) or "gib").lower()
    return float(number) * UNIT_TO_GIB.get(unit, 1.0)


def type_fact(kind: str | None, raw: str) -> Any:
    """Typed value of one captured group; None when it does not parse (the fact is then absent)."""
    raw = raw.strip()
    if kind == "str":
        return re.sub(r"\s+", " ", raw)
    if kind == "list":
        return [p.strip(" '\"") for p in re.split(r"[,\s]+", raw) if p.strip(" '\"")]
    if kind in ("size",):
        return parse_size_gib(raw)
    if kind == "bytes":
        n = to_number(raw.replace(" ", ""))
        return None if n is None else n / GIB
    n = to_number(re.sub(r"\s+", "", raw))
    if n is None:
        return None if kind in ("int", "float", "gib") else re.sub(r"\s+", " ", raw)
    if kind == "int":
        return int(n)
    if kind in ("float", "gib"):
        return float(n)
    return n


class Evaluator:
    """Compiled jinja2 expressions (when:, derive:), evaluated leniently: a missing fact means no value."""

    def __init__(self) -> None:
        self.env = template_env()
        self._cache: dict[str, Any] = {}

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
    from . import advice_functions, memory

    return {**facts, "facts": facts, "ctx": ctx, "mem": memory, "fn": advice_functions}


def derive_facts(rule: Rule, facts: dict[str, Any], ctx: dict[str, Any], ev: Evaluator) -> dict[str, Any]:
    """Add the rule's derived facts, in order; each sees the ones before it."""
    out = dict(facts)
    for name, source in rule.derive.items():
        value = ev.value(source, template_names(out, ctx))
        if value is not None or name not in out:
            out[name] = value  # None: known to be unknown, so templates can test it without failing
    return out


class Matcher:
    """Consumes (line, stage) pairs in order and collects hits; lines wait FOLLOW lines for their window."""

    def __init__(self, rules: list[Rule] | tuple[Rule, ...], ctx_source: Any = None) -> None:
        self.rules = list(rules)
        self.entries: list[tuple[Rule, Pattern, tuple[str, ...]]] = [
            (rule, p, tuple(k.lower() for k in p.keywords)) for rule in self.rules for p in rule.patterns
        ]
        self.keywords = sorted({k for _, _, kws in self.entries for k in kws})
        self.hits: list[Hit] = []
        self.ev = Evaluator()
        self._pending: deque[tuple[Line, str | None]] = deque()
        self._ctx_source = ctx_source  # an object with .as_dict() (the tracker's Context)

    def feed(self, line: Line, fine_stage: str | None) -> None:
        self._pending.append((line, fine_stage))
        if len(self._pending) > FOLLOW:
            self._match_first()

    def finish(self) -> list[Hit]:
        while self._pending:
            self._match_first()
        return self.hits

    # -- internals -----------------------------------------------------------------------------------

    def _window(self) -> list[Line]:
        """The first pending line and the lines that continue its message (a wrapped paste)."""
        first = self._pending[0][0]
        lines = [first]
        for nxt, _ in list(self._pending)[1:]:
            prev = lines[-1]
            if nxt.number not in (prev.number, prev.number + 1):
                break
            if nxt.proc_key != first.proc_key or nxt.level or nxt.user_content:
                break
            t = nxt.text.lstrip()
            if not t or t.startswith(TRACEBACK_START) or FRAME.match(t) or is_exception_line(t):
                break
            if t.startswith(("^", "~")) or prev.text.rstrip().endswith(("^", "~")):
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
            if not candidates:
                return
            window = self._window()
            text = " ".join(w.text.strip() for w in window) if len(window) > 1 else line.text
            processed: str | None = None
            stage = coarse(fine)
            ctx = self._ctx_source.as_dict() if self._ctx_source is not None else {}
            found: dict[str, Hit] = {}  # one hit per rule per line: the most specific pattern wins
            for rule, pattern, kws in candidates:
                if pattern.stages is not None and stage not in pattern.stages:
                    continue
                facts: dict[str, Any] = {}
                score = 100.0
                if pattern.regex is not None:
                    m = pattern.regex.search(text)
                    if not m:
                        continue
                    facts.update(self._typed(rule, m.groupdict()))
                else:
                    if processed is None:
                        processed = default_process(_focus(text, low, kws, len(pattern.phrase or "")))
                    score = phrase_score(pattern.phrase or "", processed, pattern.threshold)
                    if not score:
                        continue
                facts.update({k: v for k, v in self._extract(rule, text).items() if k not in facts})
                names = derive_facts(rule, facts, ctx, self.ev)
                scope = template_names(names, ctx)
                if pattern.when and not self.ev.truth(pattern.when, scope):
                    continue
                if rule.when and not self.ev.truth(rule.when, scope):
                    continue
                hit = Hit(rule=rule, pattern=pattern, line=line, end_line=window[-1].number, stage=stage,
                          fine_stage=fine, facts=facts, evidence=window, score=float(score))
                best = found.get(rule.id)
                if best is None or (best.pattern.generic, -len(best.facts)) > (pattern.generic, -len(facts)):
                    found[rule.id] = hit
            self.hits.extend(found.values())
        finally:
            self._pending.popleft()

    def _extract(self, rule: Rule, text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        for ex in rule.extractors:
            m = ex.pattern.search(text)
            if m is None:
                m = ex.tolerant.search(text) if len(text) < WINDOW_CHARS else None
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
