"""Facts from a matched line: regex groups read on the line, its wrapped window or wrap-tolerantly, typed.

A pattern's regex and a rule's `extract:` regexes are searched on the line alone when it holds them whole,
else on the joined window (a number cut by a wrap), else allowing whitespace inserted anywhere (only where the
regex's leading literal is there: that retry is slow). A line of a shape seen before answers from the shape:
the group spans of a shape-safe regex are found once per shape (ingest/dense.py). `type_fact` turns each
captured text into the rule's declared type (int, float, size, bytes, list, str).
"""

from __future__ import annotations

import re
from typing import Any

from diagnoser.analysis.tracker import to_number
from diagnoser.ingest.dense import digit_free, shape_safe
from diagnoser.ingest.reader import Line
from diagnoser.lazyre import lazy
from diagnoser.rules.model import Rule, wrap_tolerant
from diagnoser.vllm import memory, units

#: a text this long is not retried wrap-tolerantly (that retry is a fuzzy match: slow on long texts)
WINDOW_CHARS = 4000

_SPACES = lazy(r"\s+")


def type_fact(kind: str | None, raw: str) -> Any:
    """Typed value of one captured group; None when it does not parse (the fact is then absent)."""
    raw = raw.strip()
    if kind == "str":
        return _SPACES.sub(" ", raw)
    if kind == "list":
        return [p.strip(" '\"") for p in re.split(r"[,\s]+", raw) if p.strip(" '\"")]
    if kind in ("size",):
        return units.log_size_gib(raw)
    if kind == "bytes":
        n = to_number(raw.replace(" ", ""))
        return None if n is None else n / memory.GIB
    n = to_number(_SPACES.sub("", raw))
    if n is None:
        return None if kind in ("int", "float", "gib") else _SPACES.sub(" ", raw)
    if kind == "int":
        return int(n)
    if kind in ("float", "gib"):
        return float(n)
    return n


_SAFE: dict[int, tuple[Any, bool]] = {}


def _safe(pattern: Any) -> bool:
    """dense.shape_safe of a compiled regex, once per pattern object."""
    found = _SAFE.get(id(pattern))
    if found is None or found[0] is not pattern:
        found = _SAFE[id(pattern)] = (pattern, shape_safe(pattern.pattern))
    return found[1]


def _groups(shaped: dict[int, Any], pattern: Any, text: str, search: Any) -> dict[str, str | None] | None:
    """A match's groupdict on `text`, its spans found once per shape (`search()` gives the match)."""
    spans = shaped.get(id(pattern), False)
    if spans is False:
        m = search()
        spans = shaped[id(pattern)] = None if m is None else {k: m.span(k) for k in m.groupdict()}
    if spans is None:
        return None
    return _at_spans(text, spans)


_VARIES = object()


def _known(rule: Rule, name: str, raw: str | None) -> Any:
    """A group's typed fact when it is the same on every line of the shape (the group took no part, or its
    text holds no digit and types to an immutable value), else _VARIES: typed on each line."""
    if raw is None:
        return None
    if not digit_free(raw):
        return _VARIES
    value = type_fact(rule.facts.get(name), raw)
    return value if value is None or isinstance(value, (str, int, float)) else _VARIES


def _at_spans(text: str, spans: dict[str, tuple[int, int]]) -> dict[str, str | None]:
    """A groupdict rebuilt from spans found on another text of the same shape (-1: the group took no part)."""
    return {k: (text[a:b] if a != -1 else None) for k, (a, b) in spans.items()}


NUMERIC = ("int", "float", "gib", "size", "bytes")


def regex_groups(regex: Any, rule: Rule, text: str, window: list[Line], texts: tuple[str, ...] | list[str],
                 shaped: dict[Any, Any] | None) -> dict[str, str | None] | None:
    """A pattern's named groups on its line (or the window a wrap made of it), None where it does not match: a
    line of a shape seen before answers from the shape; a wrapped message is searched on the line first, then on
    the joined window, then wrap-tolerantly on its first text."""
    if shaped is not None and _safe(regex):
        return _groups(shaped, regex, text, lambda p=regex: p.search(text))
    m = _on_line(regex, rule, text) if len(window) > 1 else None
    m = m or _search(regex, texts, None)
    if m is None and len(window) > 1:
        m = _search(_tolerant_of(regex), texts[:1], None)
    return m.groupdict() if m else None


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


_TOLERANT: dict[tuple[str, type], Any] = {}


def _tolerant_of(pattern: Any) -> Any:
    """A match regex that also allows whitespace inserted by a wrap (compiled once per pattern)."""
    key = (pattern.pattern, type(pattern))
    found = _TOLERANT.get(key)
    if found is None:
        found = _TOLERANT[key] = wrap_tolerant(pattern)
    return found


_REQUIRED: dict[str, str] = {}


def required_literal(source: str) -> str:
    r"""The literal text every match of the regex `source` starts with, lower-cased and without whitespace
    ('' when there is none to tell): a text whose whitespace-free form lacks it cannot match the regex even
    with whitespace inserted anywhere (the wrap-tolerant form).

    >>> required_literal(r'\bKV cache usage: (?P<pct>[\d.]+)%')
    'kvcacheusage:'
    >>> required_literal(r'Running: (\d+)|Waiting')
    ''
    """
    found = _REQUIRED.get(source)
    if found is not None:
        return found
    depth, i, in_class = 0, 0, False
    while i < len(source):  # an alternation at the top level: no literal is required
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            _REQUIRED[source] = ""
            return ""
        i += 1
    out: list[str] = []
    i = 2 if source.startswith("\\b") else 0
    while i < len(source):
        c = source[i]
        if c == "\\":
            nxt = source[i + 1:i + 2]
            if not nxt or nxt.isalnum():
                break  # a class (\d, \s), an anchor (\b) or an escape of a control character
            lit, step = nxt, 2
        elif c in "()[]{}?*+|^$.":
            break
        else:
            lit, step = c, 1
        if source[i + step:i + step + 1] in ("?", "*", "+", "{"):
            break  # this character is quantified: it may be absent or repeated
        out.append(lit)
        i += step
    found = _REQUIRED[source] = "".join("".join(out).split()).lower()
    return found


def extract_shaped(rule: Rule, text: str, shaped: dict[int, Any]) -> dict[str, Any]:
    """extract() on a line alone, each shape-safe extractor's spans found once per shape."""
    facts: dict[str, Any] = {}
    plan = shaped.get(id(rule.extractors))
    if plan is not None:  # every extractor is shape-safe: where each one's groups are, in order
        for name, a, b, known in plan:
            value = known if known is not _VARIES else type_fact(rule.facts.get(name), text[a:b])
            if value is not None and value != "":  # as typed_facts keeps them
                facts.setdefault(name, value)
        return facts
    if rule.extractors and all(_safe(ex.pattern) for ex in rule.extractors):
        plan = []
        for ex in rule.extractors:
            m = _extract_match(ex, text)
            if m is not None:
                plan.extend((name, *m.span(name), _known(rule, name, m.group(name))) for name in m.groupdict())
        shaped[id(rule.extractors)] = plan
        return extract_shaped(rule, text, shaped)
    for ex in rule.extractors:
        if _safe(ex.pattern):
            groups = _groups(shaped, ex, text, lambda ex=ex: _extract_match(ex, text))
        else:
            m = _extract_match(ex, text)
            groups = None if m is None else m.groupdict()
        if groups is None:
            continue
        for name, value in typed_facts(rule, groups).items():
            facts.setdefault(name, value)
    return facts


def _extract_match(ex: Any, text: str) -> Any:
    """One extractor on a line alone: the regex, else its wrap-tolerant form (as extract() tries them)."""
    m = ex.pattern.search(text)
    if m is None and len(text) < WINDOW_CHARS:
        need = required_literal(ex.pattern.pattern)
        if not need or need in "".join(text.split()).lower():
            m = ex.tolerant.search(text)
    return m


def extract(rule: Rule, texts: tuple[str, ...] | list[str] | str,
            first_line: str | None = None) -> dict[str, Any]:
    """Facts from the extract regexes: on the first line alone when it holds them whole, else on the
    joined window (a number cut by a wrap), else allowing whitespace inserted anywhere."""
    if isinstance(texts, str):
        texts = (texts,)
    facts: dict[str, Any] = {}
    squeezed: str | None = None  # the first text without whitespace, lower-cased (on first need)
    for ex in rule.extractors:
        m = _on_line(ex.pattern, rule, first_line) if first_line is not None else None
        if m is None:
            m = _search(ex.pattern, texts, None)
        if m is None and len(texts[0]) < WINDOW_CHARS:
            # the wrap-tolerant retry is slow (fuzzy matching): only where its leading text is there
            need = required_literal(ex.pattern.pattern)
            if need and squeezed is None:
                squeezed = "".join(texts[0].split()).lower()
            if not need or need in squeezed:
                m = ex.tolerant.search(texts[0])
        if m is None:
            continue
        for name, value in typed_facts(rule, m.groupdict()).items():
            facts.setdefault(name, value)
    return facts


def typed_facts(rule: Rule, groups: dict[str, str | None]) -> dict[str, Any]:
    """A match's groups typed as the rule declares them; a group that took no part or does not parse is left out."""
    out: dict[str, Any] = {}
    for name, raw in groups.items():
        if raw is None:
            continue
        value = type_fact(rule.facts.get(name), raw)
        if value is not None and value != "":
            out[name] = value
    return out
