"""Hits: one rule recognised at one place in the log, and which hits on one line say less than another.

A `Hit` carries the rule and the pattern that matched, the line (and the window of lines a wrap made of its
message), the stage the line was in and the typed facts read from it. `drop_shadowed` removes the hits that
another hit on the same line makes redundant (a generic phrase beside a specific message, a rule another one
`overrides`); the matcher's fold and the advisor both apply it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnoser.ingest.reader import Line
from diagnoser.rules.model import Pattern, Rule

#: distinct evidence lines a finding shows (advise) and an aggregate rule's fold keeps whole hits for
MAX_EVIDENCE = 6


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


def drop_shadowed(hits: list[Hit]) -> list[Hit]:
    """Hits that say less than another hit on the same line go.

    A generic hit yields to a specific hit of another rule; a rule yields to one that `overrides` it (a more
    precise reading of the same text). Lines are compared as objects: a flattened paste puts many records
    on one physical line, and each keeps its own hits.
    """
    by_line: dict[int, list[Hit]] = {}
    for h in hits:
        by_line.setdefault(id(h.line), []).append(h)
    out = []
    for h in hits:
        others = [o for o in by_line[id(h.line)] if o.rule.id != h.rule.id]
        if h.pattern.generic and any(not o.pattern.generic for o in others):
            continue
        if any(h.rule.id in o.rule.overrides for o in others):
            continue
        out.append(h)
    return out

