"""Refuse the regex shapes known to backtrack exponentially, before a rule pack's pattern meets a log.

The run-time guard is the `regex` module's timeout on every match (matcher.py); this is the load-time one,
so a bad rule is reported with its file and key instead of failing on some user's log. Caught: a repeated
group whose every part is itself repeatable (`(a+)+`, `(a*)*`, `(\\w+\\s?)+`, `(.*)*`), and a repeated
alternation whose branches can match the same text (`(a|a)+`, `(.|\\s)*`). A repeat of
a group with a fixed part (`(?:\\d+,)*`) is fine.

    >>> catastrophic("(a|a)+$")
    'a repeated group whose alternatives overlap'
    >>> catastrophic(r"(?:\\d+,)*\\d+") is None
    True
"""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        from re import _constants as C  # type: ignore[attr-defined]
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_constants as C  # type: ignore[no-redef]
        import sre_parse  # type: ignore[no-redef]

_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", None))
#: Character-class-like items: two of these in sibling branches may match the same character.
_CHARS = (C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY, C.CATEGORY)


def catastrophic(source: str) -> str | None:
    """Why this regex can backtrack exponentially, or None (also None when only `regex` can parse it)."""
    try:
        tree = sre_parse.parse(source)
    except Exception:  # noqa: BLE001 - regex-module syntax (fuzzy, \\p{..}): the timeout still guards it
        return None
    return _walk(list(tree))


def _walk(items: list[Any]) -> str | None:
    for op, av in items:
        if op in _REPEATS and op is not None:
            lo, hi, body = av
            body = list(body)
            if hi is C.MAXREPEAT or hi > 16:
                if _all_repeatable(body):
                    return "a repeated group whose every part repeats (a nested quantifier like (a+)+)"
                if _overlapping_branches(body):
                    return "a repeated group whose alternatives overlap"
            found = _walk(body)
        elif op is C.SUBPATTERN:
            found = _walk(list(av[-1]))
        elif op is C.BRANCH:
            found = next((f for f in (_walk(list(b)) for b in av[1]) if f), None)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            found = _walk(list(av[1]))
        else:
            found = None
        if found:
            return found
    return None


def _unwrap(items: list[Any]) -> list[Any]:
    """A body that is one group: its content."""
    while len(items) == 1 and items[0][0] is C.SUBPATTERN:
        items = list(items[0][1][-1])
    return items


def _all_repeatable(items: list[Any]) -> bool:
    """Every part of every branch repeats (or is optional), and at least one repeats without bound."""
    items = _unwrap(items)
    if len(items) == 1 and items[0][0] is C.BRANCH:
        return any(_all_repeatable(list(b)) for b in items[0][1][1])
    if not items:
        return False
    unbounded = False
    for op, av in items:
        if op not in _REPEATS or op is None:
            return False
        lo, hi, _ = av
        if hi is C.MAXREPEAT or hi > 1:
            unbounded = True
        elif lo != 0:
            return False
    return unbounded


def _overlapping_branches(items: list[Any]) -> bool:
    """An alternation in the repeated body with two equal alternatives (the parser factors a common prefix
    out, so `(a|a)` arrives as `a(?:|)`), or two one-character alternatives that share a character."""
    for op, av in _unwrap(items):
        if op is C.SUBPATTERN and _overlapping_branches(list(av[-1])):
            return True
        if op is not C.BRANCH:
            continue
        branches = [list(b) for b in av[1]]
        for i, a in enumerate(branches):
            if any(a == b or _char_overlap(a, b) for b in branches[i + 1:]):
                return True
    return False


def _char_overlap(a: list[Any], b: list[Any]) -> bool:
    """Both branches are one class-like item that can match one same character (\\d and \\w, . and x)."""
    if len(a) != 1 or len(b) != 1 or a[0][0] not in _CHARS or b[0][0] not in _CHARS:
        return False
    probe = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é"]
    return any(_matches(a[0], ch) and _matches(b[0], ch) for ch in probe)


def _matches(item: Any, ch: str) -> bool:
    import re

    try:
        return re.fullmatch(_source(item), ch, re.DOTALL if item[0] is C.ANY else 0) is not None
    except (re.error, ValueError):
        return True


def _source(item: Any) -> str:
    """A regex source for one class-like parsed item (enough to probe it with one character)."""
    op, av = item
    if op is C.LITERAL:
        return "\\" + chr(av) if not chr(av).isalnum() else chr(av)
    if op is C.NOT_LITERAL:
        return "[^" + ("\\" + chr(av)) + "]"
    if op is C.ANY:
        return "."
    if op is C.CATEGORY:
        return _CATEGORY.get(av, ".")
    parts = []
    negate = False
    for sub_op, sub_av in av:
        if sub_op is C.NEGATE:
            negate = True
        elif sub_op is C.LITERAL:
            parts.append("\\" + chr(sub_av) if not chr(sub_av).isalnum() else chr(sub_av))
        elif sub_op is C.RANGE:
            parts.append(f"\\{chr(sub_av[0])}-\\{chr(sub_av[1])}" if not chr(sub_av[0]).isalnum()
                         else f"{chr(sub_av[0])}-{chr(sub_av[1])}")
        elif sub_op is C.CATEGORY:
            parts.append(_CATEGORY.get(sub_av, "."))
        else:
            return "."
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


_CATEGORY = {
    C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s", C.CATEGORY_NOT_SPACE: r"\S",
    C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W",
}
